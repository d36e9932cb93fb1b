"""Data handling: validation_split, generators and sequences, partial batches without
recompiling, sample/class weights, steps_per_epoch, validation_freq."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import blobs, weights_equal

import kiln
from kiln import layers
from kiln.layers.base import reset_names


def _model(seed: int = 5) -> kiln.Sequential:
    reset_names()
    kiln.utils.set_random_seed(seed)
    m = kiln.Sequential([kiln.Input((8,)), layers.Dense(16, activation="relu"),
                         layers.Dense(10, activation="softmax")])
    m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


class _CountBatches(kiln.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.train, self.test, self.sizes = 0, 0, []

    def on_train_batch_end(self, batch, logs=None):
        self.train += 1

    def on_test_batch_end(self, batch, logs=None):
        self.test += 1


def test_validation_split_takes_the_last_samples_before_shuffling():
    x, y = blobs(200)
    a = _model()
    h_a = a.fit(x, y, epochs=3, batch_size=16, validation_split=0.25, verbose=0).history
    b = _model()
    h_b = b.fit(x[:150], y[:150], epochs=3, batch_size=16, validation_data=(x[150:], y[150:]),
                verbose=0).history
    assert h_a == h_b
    assert weights_equal(a.get_weights(), b.get_weights())
    np.testing.assert_allclose(a.evaluate(x[150:], y[150:], verbose=0)[0],
                               h_a["val_loss"][-1], rtol=1e-6)


def test_last_partial_batch_does_not_recompile(monkeypatch):
    created = []
    real = kiln.core.function

    def counting(*args, **kwargs):
        created.append(kwargs.get("name"))
        return real(*args, **kwargs)

    monkeypatch.setattr(kiln.core, "function", counting)
    x, y = blobs(100)
    m = _model()
    counter = _CountBatches()
    m.fit(x, y, epochs=2, batch_size=32, validation_data=(x[:10], y[:10]),
          callbacks=[counter], verbose=0)
    assert counter.train == 2 * 4  # 32 + 32 + 32 + 4
    assert created == ["train_function", "test_function"]
    m.fit(x[:37], y[:37], epochs=1, batch_size=16, verbose=0)
    m.evaluate(x[:5], y[:5], verbose=0)
    assert created == ["train_function", "test_function"]
    m.predict(x[:3], verbose=0)
    m.predict(x, batch_size=64, verbose=0)
    assert created == ["train_function", "test_function", "predict_function"]


def _batches(x, y, bs):
    return [(x[i:i + bs], y[i:i + bs]) for i in range(0, len(x), bs)]


def test_generator_list_and_sequence_inputs_match_arrays():
    x, y = blobs(96)
    ref = _model()
    ref.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0)

    def gen():
        while True:
            yield from _batches(x, y, 32)

    g = _model()
    g.fit(gen(), steps_per_epoch=3, epochs=2, verbose=0)
    assert weights_equal(g.get_weights(), ref.get_weights())

    class Batches:  # re-iterable: restarts at every epoch
        def __iter__(self):
            return iter(_batches(x, y, 32))

    again = _model()
    again.fit(Batches(), epochs=2, verbose=0)
    assert weights_equal(again.get_weights(), ref.get_weights())

    class Seq:
        def __init__(self):
            self.ends = 0

        def __len__(self):
            return 3

        def __getitem__(self, i):
            return x[32 * i:32 * (i + 1)], y[32 * i:32 * (i + 1)]

        def on_epoch_end(self):
            self.ends += 1

    seq = Seq()
    s = _model()
    s.fit(seq, epochs=2, shuffle=False, verbose=0)
    assert weights_equal(s.get_weights(), ref.get_weights())
    assert seq.ends == 2
    # evaluate and predict on generators
    ev = ref.evaluate(iter(_batches(x, y, 32)), verbose=0)
    np.testing.assert_allclose(ev, ref.evaluate(x, y, verbose=0), rtol=1e-6)
    pred = ref.predict(iter([b[0] for b in _batches(x, y, 40)]), verbose=0)
    np.testing.assert_allclose(pred, ref.predict(x, verbose=0), rtol=1e-6)


def test_one_shot_generator_runs_out():
    x, y = blobs(64)
    m = _model()
    with pytest.warns(UserWarning, match="ran out"):
        history = m.fit(iter(_batches(x, y, 32)), epochs=3, verbose=0)
    assert len(history.history["loss"]) == 1


def test_generator_with_sample_weights_and_validation_generator():
    x, y = blobs(64)
    w = np.linspace(0.5, 1.5, 64).astype(np.float32)
    m = _model()
    gen = ((x[i:i + 16], y[i:i + 16], w[i:i + 16]) for i in range(0, 64, 16))
    h = m.fit(gen, epochs=1, validation_data=iter(_batches(x, y, 16)), verbose=0).history
    assert {"loss", "val_loss", "accuracy", "val_accuracy"} == set(h)


def test_class_weight_equals_sample_weight():
    x, y = blobs(64)
    cw = {c: 1.0 + 0.1 * c for c in range(10)}
    a = _model()
    a.fit(x, y, epochs=2, batch_size=16, class_weight=cw, verbose=0)
    b = _model()
    b.fit(x, y, epochs=2, batch_size=16, sample_weight=np.array([cw[c] for c in y]), verbose=0)
    assert weights_equal(a.get_weights(), b.get_weights())


def test_sample_weight_reduction_sum_over_batch_size():
    x, y = blobs(20)
    m = _model()
    w = np.random.default_rng(0).uniform(0, 2, 20).astype(np.float32)
    per_sample = kiln.losses.sparse_categorical_crossentropy(y, m.predict(x, verbose=0))
    got = m.evaluate(x, y, sample_weight=w, batch_size=20, verbose=0)[0]
    np.testing.assert_allclose(got, np.sum(per_sample * w) / 20, rtol=1e-5)


class _PerEpoch(kiln.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.counts = []

    def on_epoch_begin(self, epoch, logs=None):
        self.counts.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.counts[-1] += 1


def test_steps_per_epoch_on_arrays_and_validation_freq():
    """Keras 3's rule (checked against it, TensorFlow backend): with ``steps_per_epoch`` an
    epoch continues the pass where the last one stopped and ends early, with a warning, when
    the pass runs out; the arrays are never repeated within an epoch."""
    x, y = blobs(64)
    m = _model()
    counter = _PerEpoch()
    with pytest.warns(UserWarning, match="ran out of data"):
        h = m.fit(x, y, batch_size=16, epochs=4, steps_per_epoch=6, validation_data=(x, y),
                  validation_freq=2, callbacks=[counter], verbose=0).history
    assert counter.counts == [4, 4, 4, 4]  # 4 batches in the data: each epoch one pass
    assert len(h["loss"]) == 4 and len(h["val_loss"]) == 2
    counter = _PerEpoch()
    with pytest.warns(UserWarning, match="ran out of data"):
        m.fit(x, y, batch_size=16, epochs=4, steps_per_epoch=3, callbacks=[counter], verbose=0)
    assert counter.counts == [3, 1, 3, 1]  # as Keras: the pass's remainder, then a new pass
    with pytest.warns(UserWarning, match="ran out of data"):
        assert m.predict(x, batch_size=16, steps=10, verbose=0).shape[0] == 64
    h = m.fit(x, y, epochs=3, validation_data=(x, y), validation_freq=[1, 3], verbose=0)
    assert len(h.history["val_loss"]) == 2


def test_initial_epoch_and_stop_training():
    x, y = blobs(64)
    m = _model()

    class Stop(kiln.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 3:
                self.model.stop_training = True

    h = m.fit(x, y, epochs=10, initial_epoch=2, callbacks=[Stop()], verbose=0)
    assert h.epoch == [2, 3]


def test_verbose_modes_print(capsys):
    x, y = blobs(64)
    m = _model()
    m.fit(x, y, epochs=2, verbose=2)
    out = capsys.readouterr().out
    assert out.count("loss") >= 2
    m.fit(x, y, epochs=1, verbose=0)
    assert capsys.readouterr().out == ""
