"""``compile(run_eagerly=True)`` (kiln/models/eager_loop.py): the steps run define-by-run.
Oracles: the compiled run of the same model on the same batches (weights, History, metrics),
the batches themselves (what ``call()`` sees), a NumPy forward pass, and specific errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers, ops


def _data(n=48, d=5, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype("float32"), rng.integers(0, classes, n)


def _mlp(seed=0, reg=None):
    kiln.utils.set_random_seed(seed)
    return kiln.Sequential([kiln.Input((5,)),
                            layers.Dense(8, activation="tanh", kernel_regularizer=reg),
                            layers.Dense(3)])


def _loss():
    return kiln.losses.SparseCategoricalCrossentropy(from_logits=True)


def _fit(model, eager, opt, x, y, **kw):
    model.compile(kiln.optimizers.get(opt), _loss(), metrics=["accuracy"], run_eagerly=eager)
    assert model.run_eagerly is eager
    return model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, **kw)


@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize("reg", [None, "l2"])
def test_weights_and_history_equal_the_compiled_run(opt, reg):
    x, y = _data()
    runs = []
    for eager in (False, True):
        model = _mlp(reg=reg)
        hist = _fit(model, eager, opt, x, y, validation_data=(x[:16], y[:16]))
        runs.append((model.get_weights(), hist.history, model.evaluate(x, y, verbose=0),
                     model.predict(x[:4], verbose=0)))
    (w0, h0, e0, p0), (w1, h1, e1, p1) = runs
    for a, b in zip(w0, w1):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert h0.keys() == h1.keys() == {"loss", "accuracy", "val_loss", "val_accuracy"}
    for k in h0:
        np.testing.assert_allclose(h1[k], h0[k], rtol=1e-5)
    np.testing.assert_allclose(e1, e0, rtol=1e-5)
    np.testing.assert_allclose(p1, p0, rtol=1e-5, atol=1e-6)


class Branchy(kiln.Model):
    """call() converts its input to NumPy, keeps it, and branches on a value."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = layers.Dense(8, activation="relu")
        self.out = layers.Dense(3)
        self.seen: list = []
        self.branches: list = []

    def call(self, x, training=False):
        if training:
            self.seen.append(np.asarray(x).copy())
        h = self.hidden(x)
        positive = bool(ops.sum(h) > 0)
        self.branches.append(positive)
        if positive:
            h = h * 2.0
        return self.out(h)


def test_subclassed_call_sees_each_batch_and_branches_on_values():
    x, y = _data()
    model = Branchy()
    model.compile("adam", _loss(), metrics=["accuracy"], run_eagerly=True)
    hist = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert len(model.seen) == 6
    np.testing.assert_array_equal(np.concatenate(model.seen[:3]), x)
    np.testing.assert_array_equal(np.concatenate(model.seen[3:]), x)
    assert all(isinstance(b, bool) for b in model.branches)
    assert len(hist.history["loss"]) == 2 and np.isfinite(hist.history["loss"]).all()
    # predict runs call() too and matches a NumPy forward pass of the trained weights
    k1, b1, k2, b2 = model.get_weights()
    h = np.maximum(x[:4] @ k1 + b1, 0)
    h = h * 2.0 if h.sum() > 0 else h
    np.testing.assert_allclose(model.predict(x[:4], verbose=0), h @ k2 + b2, rtol=1e-5,
                               atol=1e-6)


def test_the_same_model_compiled_cannot_branch_on_values():
    x, y = _data()
    model = Branchy()
    model.compile("adam", _loss(), run_eagerly=False)
    with pytest.raises(TypeError, match="truth value of a symbolic kiln tensor"):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)


def test_error_raises_at_the_users_line():
    class Broken(kiln.Model):
        def __init__(self):
            super().__init__()
            self.d = layers.Dense(3)

        def call(self, x, training=False):
            if np.asarray(x).shape[0] > 4:
                raise RuntimeError("user check failed")  # the user's own line
            return self.d(x)

    x, y = _data()
    model = Broken()
    model.compile("sgd", _loss(), run_eagerly=True)
    with pytest.raises(RuntimeError, match="user check failed") as info:
        model.fit(x, y, batch_size=16, verbose=0)
    assert info.traceback[-1].name == "call"


def test_callbacks_checkpoint_and_on_batch(tmp_path):
    x, y = _data()
    seen = []

    class Recorder(kiln.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append((batch, round(logs["loss"], 6)))

    runs = []
    for eager in (False, True):
        seen.clear()
        model = _mlp()
        path = tmp_path / f"best_{eager}.weights.h5"
        ckpt = kiln.callbacks.ModelCheckpoint(str(path), save_weights_only=True,
                                              monitor="loss")
        _fit(model, eager, "adam", x, y, callbacks=[Recorder(), ckpt])
        assert path.exists()
        out = [model.train_on_batch(x[:16], y[:16]), model.test_on_batch(x[:16], y[:16]),
               model.predict_on_batch(x[:2])]
        runs.append((list(seen), out))
    assert [b for b, _ in runs[0][0]] == [b for b, _ in runs[1][0]] == [0, 1, 2] * 2
    np.testing.assert_allclose([v for _, v in runs[1][0]], [v for _, v in runs[0][0]],
                               rtol=1e-5)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_custom_train_step_runs_on_arrays():
    class Custom(kiln.Model):
        def __init__(self):
            super().__init__()
            self.d = layers.Dense(3)
            self.types: list = []

        def call(self, x, training=False):
            return self.d(x)

        def train_step(self, data):
            x, y = data
            self.types.append(type(x))
            with kiln.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            grads = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply(grads, self.trainable_weights)
            for m in self.metrics:
                m.update_state(loss) if m.name == "loss" else m.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    x, y = _data()
    runs = []
    for eager in (True, False):
        kiln.utils.set_random_seed(3)
        model = Custom()
        model.compile("sgd", _loss(), metrics=["accuracy"], run_eagerly=eager)
        hist = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
        runs.append((model.get_weights(), hist.history, model.types))
    (w_eager, h_eager, types), (w_graph, h_graph, _) = runs
    assert len(types) == 3 and all(issubclass(t, np.ndarray) for t in types)
    assert set(h_eager) == {"loss", "accuracy"}
    for k in h_eager:
        np.testing.assert_allclose(h_eager[k], h_graph[k], rtol=1e-5)
    for a, b in zip(w_eager, w_graph):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_add_loss_in_call_joins_the_loss():
    class WithLoss(kiln.Model):
        def __init__(self):
            super().__init__()
            self.d = layers.Dense(3)

        def call(self, x, training=False):
            out = self.d(x)
            self.add_loss(0.1 * ops.mean(ops.square(out)))
            return out

    x, y = _data()
    runs = []
    for eager in (True, False):
        kiln.utils.set_random_seed(5)
        model = WithLoss()
        model.compile("sgd", _loss(), run_eagerly=eager)
        hist = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        runs.append((hist.history["loss"], model.get_weights()))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-5)
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # without the added loss the weights would differ: the term did reach the gradients
    kiln.utils.set_random_seed(5)
    plain = kiln.Sequential([kiln.Input((5,)), layers.Dense(3)])
    plain.compile("sgd", _loss())
    plain.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert not np.allclose(plain.get_weights()[0], runs[0][1][0], rtol=1e-4)


def test_run_eagerly_attribute_is_settable():
    x, y = _data()
    model = _mlp()
    model.compile("sgd", _loss())
    assert model.run_eagerly is False
    model.run_eagerly = True
    assert model.run_eagerly is True
    model.fit(x, y, batch_size=16, verbose=0)
    assert model.train_function is None  # no compiled step was built


class ScaledDense(layers.Layer):
    """A user's layer using its Variables in ops and Python operators."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.inputs_seen: list = []

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units),
                                 initializer="glorot_uniform", name="w")
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")
        self.scale = self.add_weight(shape=(), initializer="ones", name="scale")

    def call(self, x):
        self.inputs_seen.append(np.asarray(x).copy() if isinstance(x, np.ndarray) else None)
        return ops.tanh(ops.matmul(x, self.w) + self.b) * self.scale


class Holder(kiln.Model):
    def __init__(self):
        super().__init__()
        self.custom = ScaledDense(8)
        self.head = layers.Dense(3)

    def call(self, x):
        return self.head(self.custom(x))


def test_a_users_layer_call_sees_arrays_and_trains_like_compiled():
    x, y = _data()
    runs = []
    for eager in (False, True):
        kiln.utils.set_random_seed(2)
        model = Holder()
        model.compile("adam", _loss(), run_eagerly=eager)
        hist = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        runs.append((model.get_weights(), hist.history["loss"], model.custom.inputs_seen))
    (w0, l0, seen0), (w1, l1, seen1) = runs
    assert all(s is None for s in seen0)  # compiled: call() saw symbolic tensors
    batches = [s for s in seen1 if len(s) == 16]
    assert len(batches) == 6 and all(s.dtype == np.float32 for s in seen1)
    np.testing.assert_array_equal(np.concatenate(batches[:3]), x)
    np.testing.assert_allclose(l1, l0, rtol=1e-5)
    for a, b in zip(w0, w1):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert not np.allclose(w1[2], 1.0)  # the scale Variable, used by `*`, was trained


def test_model_call_outside_fit_with_run_eagerly():
    model = Holder()
    model.compile("sgd", _loss(), run_eagerly=True)
    x, _ = _data(n=4)
    out = model(x)
    w, b, scale, k, c = model.get_weights()
    np.testing.assert_allclose(out, np.tanh(x @ w + b) * scale @ k + c, rtol=1e-5, atol=1e-6)
    assert model.custom.inputs_seen[-1].shape == (4, 5)


def test_later_epochs_compile_nothing(monkeypatch):
    """Every eager call and the tape's gradient function are compiled once per signature:
    the second epoch only runs cached functions."""
    from kiln.core import executor

    x, y = _data()
    model = Holder()
    model.compile("adam", _loss(), metrics=["accuracy"], run_eagerly=True)
    made = []
    real = executor.Function.__init__

    def counting(self, *args, **kwargs):
        made.append(kwargs.get("name"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(executor.Function, "__init__", counting)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert "GradientTape.gradient" in made  # the first epoch compiled (the counter counts)
    made.clear()
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert made == []


def _raw_ops_model():
    kiln.utils.set_random_seed(4)
    inputs = kiln.Input((5,))
    h = ops.relu(layers.Dense(8)(inputs)) * 2.0  # raw ops between layers
    return kiln.Model(inputs, layers.Dense(3)(h))


def test_functional_model_with_raw_ops_runs_as_one_eager_call():
    x, y = _data()
    model, ref = _raw_ops_model(), _raw_ops_model()
    model.compile("sgd", _loss(), run_eagerly=True)
    ref.compile("sgd", _loss())
    for m in (model, ref):
        m.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(ref.get_weights(), model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(x[:3], verbose=0), ref.predict(x[:3], verbose=0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(x[:3]), ref(x[:3]), rtol=1e-5, atol=1e-6)


def _two_outputs(seed=6):
    kiln.utils.set_random_seed(seed)
    inputs = kiln.Input((5,))
    h = layers.BatchNormalization()(layers.Dense(8, activation="relu")(inputs))
    a = layers.Dense(3, name="cls")(h)
    b = layers.Dense(1, name="reg")(h)
    return kiln.Model(inputs, [a, b])


def test_two_outputs_batchnorm_sample_and_loss_weights_equal_compiled():
    x, y = _data()
    y2 = np.random.default_rng(1).normal(size=(len(x), 1)).astype("float32")
    sw = np.linspace(0.5, 1.5, len(x)).astype("float32")
    runs = []
    for eager in (False, True):
        model = _two_outputs()
        model.compile("adam", [_loss(), "mse"], loss_weights=[1.0, 0.5],
                      metrics=[["accuracy"], ["mae"]], run_eagerly=eager)
        hist = model.fit(x, [y, y2], sample_weight=sw, batch_size=16, epochs=2,
                         shuffle=False, verbose=0, validation_split=0.25)
        runs.append((model.get_weights(), hist.history))
    (w0, h0), (w1, h1) = runs
    assert h0.keys() == h1.keys() and len(h0) == 10
    for k in h0:
        np.testing.assert_allclose(h1[k], h0[k], rtol=1e-5, err_msg=k)
    for a, b in zip(w0, w1):  # includes the moving mean and variance
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_generator_data_and_a_custom_test_step():
    x, y = _data()

    def batches():
        for i in range(0, len(x), 16):
            yield x[i:i + 16], y[i:i + 16]

    class Evaluated(Branchy):
        def test_step(self, data):
            xb, yb = data
            loss = self.compute_loss(x=xb, y=yb, y_pred=self(xb, training=False))
            return {"mean_input": float(np.mean(np.asarray(xb))), "loss": loss}

    runs = []
    for eager in (False, True):
        kiln.utils.set_random_seed(8)
        model = _mlp(8)
        model.compile("adam", _loss(), run_eagerly=eager)
        model.fit(batches(), epochs=1, steps_per_epoch=3, verbose=0)
        runs.append(model.get_weights())
    for a, b in zip(*runs):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    model = Evaluated()
    model.compile("sgd", _loss(), run_eagerly=True)
    logs = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    assert logs["mean_input"] == pytest.approx(float(np.mean(x[32:])), rel=1e-5)
    assert np.isfinite(logs["loss"])
