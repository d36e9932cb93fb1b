"""fit/evaluate refuse data that would train silently into NaN weights or broadcast into a wrong
loss: NaN/inf in x, y, sample weights and validation data (``check_finite=True``, the default),
targets whose shape does not match the output's, sparse labels that are not integers. Every
refusal is checked to leave the weights, the optimizer and the callbacks untouched."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import blobs, weights_equal

import kiln
from kiln import layers
from kiln.layers.base import reset_names


class Recorder(kiln.callbacks.Callback):
    """Records every hook called."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def on_train_begin(self, logs=None):
        self.calls.append("train_begin")

    def on_test_begin(self, logs=None):
        self.calls.append("test_begin")

    def on_epoch_begin(self, epoch, logs=None):
        self.calls.append("epoch_begin")

    def on_train_batch_begin(self, batch, logs=None):
        self.calls.append("batch_begin")


def _classifier(optimizer="adam"):
    m = kiln.Sequential([kiln.Input((8,), name="features"), layers.Dense(16, activation="relu"),
                         layers.Dense(10, activation="softmax")])
    m.compile(optimizer, "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def _regressor(units=1, loss="mse"):
    m = kiln.Sequential([kiln.Input((8,), name="features"), layers.Dense(units)])
    m.compile("adam", loss)
    return m


def _snapshot(model):
    opt = model.optimizer
    return (model.get_weights(), [v.numpy() for v in opt.variables],
            int(np.asarray(opt.iterations.numpy())))


def _refused(model, call, match):
    """``call(callbacks)`` raises ValueError matching ``match`` and changes nothing."""
    # build the optimizer's slots first, so a change to them would show
    before = _snapshot(model)
    rec = Recorder()
    with pytest.raises(ValueError, match=match) as info:
        call([rec])
    after = _snapshot(model)
    assert weights_equal(after[0], before[0])
    assert weights_equal(after[1], before[1])
    assert after[2] == before[2]
    assert rec.calls == []
    return str(info.value)


# ---- NaN / inf in the data -------------------------------------------------------------------
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_x_is_refused_by_fit_and_evaluate(value):
    model = _classifier()
    x, y = blobs(64)
    x[37, 5] = value
    msg = _refused(model, lambda cb: model.fit(x, y, verbose=0, callbacks=cb),
                   r"x\['features'\].*1 non-finite value")
    assert f"{value}" in msg and "(37, 5)" in msg and "(64, 8)" in msg
    assert "check_finite=False" in msg
    _refused(model, lambda cb: model.evaluate(x, y, verbose=0, callbacks=cb),
             r"x\['features'\] holds 1 non-finite value")


def test_non_finite_float_targets_and_sample_weights_are_refused():
    model = _regressor()
    x, _ = blobs(64)
    y = x[:, :1] * 2.0
    bad_y = y.copy()
    bad_y[[3, 9], 0] = [np.inf, np.nan]
    msg = _refused(model, lambda cb: model.fit(x, bad_y, verbose=0, callbacks=cb),
                   r"y\['\w+'\] holds 2 non-finite values")
    assert "inf, at index (3, 0)" in msg
    sw = np.ones(64, np.float32)
    sw[60] = np.nan
    _refused(model, lambda cb: model.fit(x, y, sample_weight=sw, verbose=0, callbacks=cb),
             r"sample_weight\[0\] holds 1 non-finite value \(the first, nan, at index \(60,\)")
    _refused(model, lambda cb: model.evaluate(x, y, sample_weight=sw, verbose=0,
                                              callbacks=cb), r"sample_weight\[0\]")


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_float64_value_beyond_float32_is_refused_after_conversion():
    model = _regressor()
    x, _ = blobs(16)
    x = x.astype(np.float64)
    x[2, 1] = 1e39  # finite in float64, inf once converted to the model's float32
    _refused(model, lambda cb: model.fit(x, x[:, :1], verbose=0, callbacks=cb),
             r"x\['features'\].*inf, at index \(2, 1\)")


def test_class_weight_that_is_nan_is_refused():
    model = _classifier()
    x, y = blobs(32)
    _refused(model, lambda cb: model.fit(x, y, class_weight={0: float("nan"), 1: 2.0},
                                         verbose=0, callbacks=cb), "class_weight")


def test_non_finite_validation_data_is_refused_before_training():
    model = _classifier()
    x, y = blobs(64)
    vx = x[:16].copy()
    vx[4, 0] = np.nan
    msg = _refused(model, lambda cb: model.fit(x, y, validation_data=(vx, y[:16]), verbose=0,
                                               callbacks=cb), r"validation data")
    assert "x['features']" in msg
    bad = x.copy()
    bad[60, 2] = np.nan  # in the last 10%: the validation split
    _refused(model, lambda cb: model.fit(bad, y, validation_split=0.1, verbose=0,
                                         callbacks=cb), r"x\['features'\]")


def _batches(x, y, size=16):
    for i in range(0, len(x), size):
        yield x[i:i + size], y[i:i + size]


def test_generator_batches_are_checked_as_they_arrive():
    """A NaN in batch 2 of a generator stops fit before that batch: the weights are those of a
    twin model trained on batches 0 and 1 only."""
    x, y = blobs(64)
    bad = x.copy()
    bad[40, 3] = np.nan  # batch 2 of 16

    def trained(data):
        reset_names()
        kiln.utils.set_random_seed(5)
        m = _classifier("sgd")
        return m, data(m)

    model, _ = trained(lambda m: None)
    with pytest.raises(ValueError, match=r"x\['features'\].*nan.*\(8, 3\).*batch 2 "):
        model.fit(_batches(bad, y), verbose=0, shuffle=False)
    twin, _ = trained(lambda m: m.fit(_batches(x[:32], y[:32]), verbose=0, shuffle=False))
    assert weights_equal(model.get_weights(), twin.get_weights())
    # the first batch is checked before anything runs
    bad0 = x.copy()
    bad0[1, 1] = np.inf
    fresh = _classifier()
    _refused(fresh, lambda cb: fresh.fit(_batches(bad0, y), verbose=0, callbacks=cb),
             r"x\['features'\] holds 1 non-finite value")
    _refused(fresh, lambda cb: fresh.evaluate(_batches(bad0, y), verbose=0, callbacks=cb),
             r"x\['features'\]")


def test_validation_generator_batches_are_checked():
    model = _classifier()
    x, y = blobs(48)
    vx = x.copy()
    vx[0, 0] = np.nan
    _refused(model, lambda cb: model.fit(x, y, validation_data=_batches(vx, y), verbose=0,
                                         callbacks=cb), r"validation data")


def test_check_finite_false_trains_on_the_data_as_it_is():
    model = _regressor()
    x, _ = blobs(32)
    y = x[:, :1].copy()
    y[0, 0] = np.nan
    model.fit(x, y, verbose=0, batch_size=32, check_finite=False)
    assert all(np.isnan(w).all() for w in model.get_weights())  # what the check prevents
    assert np.isnan(model.evaluate(x, y, verbose=0, check_finite=False))


def test_predict_is_not_checked_and_propagates_nan():
    """predict passes NaN through (relu included) instead of refusing it or hiding it."""
    model = kiln.Sequential([kiln.Input((4,)), layers.Dense(3, activation="relu",
                                                            kernel_initializer="ones"),
                             layers.Dense(2, activation="relu6", kernel_initializer="ones")])
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    clean = model.predict(x, verbose=0)
    x[1, 2] = np.nan
    out = model.predict(x, verbose=0)
    assert np.isnan(out[1]).all()
    np.testing.assert_array_equal(out[[0, 2]], clean[[0, 2]])


# ---- target shapes ---------------------------------------------------------------------------
def test_a_target_that_would_broadcast_is_refused():
    model = _regressor(units=1)
    x, _ = blobs(64)
    msg = _refused(model, lambda cb: model.fit(x, np.zeros((64, 3), np.float32), verbose=0,
                                               callbacks=cb),
                   r"target y\['\w+'\] of shape \(64, 3\) does not match output '\w+' "
                   r"of shape \(None, 1\)")
    assert "loss 'mse'" in msg
    _refused(model, lambda cb: model.evaluate(x, np.zeros((64, 3), np.float32), verbose=0,
                                              callbacks=cb), r"\(64, 3\).*\(None, 1\)")
    wide = _regressor(units=3)
    _refused(wide, lambda cb: wide.fit(x, np.zeros((64, 1), np.float32), verbose=0,
                                       callbacks=cb), r"\(64, 1\).*\(None, 3\)")


@pytest.mark.parametrize("shape", [(64,), (64, 1)])
def test_a_trailing_axis_of_one_is_accepted(shape):
    model = _regressor(units=1)
    x, _ = blobs(64)
    y = x[:, 0].reshape(shape)
    model.fit(x, y, verbose=0, epochs=2)
    want = np.mean((model.predict(x, verbose=0)[:, 0] - x[:, 0]) ** 2)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), want, rtol=1e-5)


def test_sparse_targets_must_be_labels():
    model = _classifier()
    x, y = blobs(32)
    _refused(model, lambda cb: model.fit(x, np.eye(10, dtype=np.float32)[y], verbose=0,
                                         callbacks=cb),
             r"\(32, 10\) does not match output '\w+' of shape \(None, 10\).*"
             r"\(None,\) or \(None, 1\).*categorical_crossentropy")
    model.fit(x, y[:, None], verbose=0)  # (n, 1) labels are fine


def test_a_custom_loss_may_read_targets_of_any_shape():
    def first_column_mse(y_true, y_pred):
        return kiln.ops.mean(kiln.ops.square(y_pred - y_true[:, :1]), axis=-1)

    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(1)])
    model.compile("sgd", first_column_mse)
    x, _ = blobs(32)
    y = np.stack([x[:, 0], np.zeros(32, np.float32), np.zeros(32, np.float32)], axis=1)
    loss = model.evaluate(x, y, verbose=0)
    np.testing.assert_allclose(loss, np.mean((model.predict(x, verbose=0)[:, 0] - x[:, 0]) ** 2),
                               rtol=1e-5)


# ---- sparse labels ---------------------------------------------------------------------------
@pytest.mark.parametrize("check_finite", [True, False])
def test_a_nan_sparse_label_is_named(check_finite):
    model = _classifier()
    x, y = blobs(32)
    y = y.astype(np.float32)
    y[7] = np.nan
    msg = _refused(model, lambda cb: model.fit(x, y, verbose=0, callbacks=cb,
                                               check_finite=check_finite),
                   r"label value of nan for output '\w+', which has 10 classes \(at index "
                   r"\(7,\)")
    assert "-2147483648" not in msg


def test_a_non_integer_sparse_label_is_named():
    model = _classifier()
    x, y = blobs(32)
    y = y.astype(np.float64)
    y[3] = 2.5
    _refused(model, lambda cb: model.fit(x, y, verbose=0, callbacks=cb),
             r"non-integer label value of 2.5 .*\(3,\).*integer labels in \[0, 9\]")
    y[3] = 12.0
    _refused(model, lambda cb: model.evaluate(x, y, verbose=0, callbacks=cb),
             r"label value of 12.0 .*10 classes")


def test_a_refused_target_does_not_fix_the_metrics():
    """The metrics resolved for an output follow the first ACCEPTED target: a refused one
    leaves nothing behind (Keras picks the accuracy from the target's shape)."""
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(1, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy", metrics=["accuracy"])
    x, y = blobs(32, classes=2)
    with pytest.raises(ValueError, match="does not match"):
        model.evaluate(x, np.eye(2, dtype=np.float32)[y], verbose=0)
    logs = model.evaluate(x, y.astype(np.float32), verbose=0, return_dict=True)
    p = model.predict(x, verbose=0)[:, 0]
    np.testing.assert_allclose(logs["accuracy"], np.mean((p > 0.5) == (y == 1)), rtol=1e-6)


# ---- the check's fast proof (one dot product or sum) and its element-by-element fallback -----
def _oracle(a):
    """The first non-finite value by NumPy's isfinite over the whole array, and the count."""
    bad = ~np.isfinite(a)
    if not bad.any():
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return index, int(bad.sum())


@pytest.mark.parametrize("layout", ["c", "fortran", "strided"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64])
def test_first_non_finite_matches_isfinite(dtype, layout):
    from kiln.models.data import first_non_finite

    rng = np.random.default_rng(3)
    base = rng.standard_normal((37, 22)).astype(dtype)
    for bad in [None, ((0, 0), np.nan), ((36, 21), np.inf), ((17, 4), -np.inf),
                ((5, 9), np.nan)]:
        a = base.copy()
        if bad is not None:
            a[bad[0]] = bad[1]
        a = {"c": a, "fortran": np.asfortranarray(a), "strided": a[:, ::1]}[layout]
        if layout == "strided":  # every other column of a wider array: not contiguous
            wide = np.zeros((37, 44), dtype)
            wide[:, ::2] = a
            a = wide[:, ::2]
        found = first_non_finite(a)
        want = _oracle(a)
        if want is None:
            assert found is None
        else:
            assert found[0] == want[0] and found[2] == want[1]
            assert not np.isfinite(found[1])


@pytest.mark.parametrize("dtype, big, proved", [(np.float32, 3e37, False),
                                                (np.float64, 1e306, False),
                                                (np.float16, 6e4, True)])
def test_huge_finite_values_are_not_taken_for_inf(dtype, big, proved):
    """Their sum overflows: the reduction proves nothing and the element-by-element scan
    decides, finding nothing, or the one real NaN. float16 is summed in float32, which does
    not overflow here: the sum is the proof."""
    from kiln.models.data import _finite_by_reduction, first_non_finite

    a = np.full((64, 33), big, dtype)
    assert _finite_by_reduction(a) == proved
    assert first_non_finite(a) is None
    a[40, 7] = np.nan
    found = first_non_finite(a)
    assert found[0] == (40, 7) and found[2] == 1


def test_fit_on_huge_finite_data_is_not_refused():
    model = _regressor()
    x, _ = blobs(32)
    x[:, 0] = 3e37  # their sum overflows float32; every value is finite
    model.fit(x, np.zeros((32, 1), np.float32), verbose=0, epochs=1)
