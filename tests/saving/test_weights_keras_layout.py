"""``save_weights("x.weights.h5")`` writes Keras 3's layout by default (what
``keras.Model.load_weights`` reads for that name); kiln's own layout is ``format="kiln"``
(and the default for other names); ``load_weights`` reads both.

Oracles: the layout Keras 3.15 writes (/work/shared/notes: ``layers/<class>_<n>/vars/<i>``),
and Keras itself where installed: a kiln file loaded by Keras predicts what kiln predicts,
and a Keras file loaded by kiln predicts what Keras predicts."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import kiln
from kiln import layers


def _mlp(lib):
    L = lib.layers
    return lib.Sequential([lib.Input((5,)), L.Dense(8, activation="relu"),
                           L.BatchNormalization(), L.Dense(3)])


def _cnn(lib):
    L = lib.layers
    return lib.Sequential([lib.Input((8, 8, 2)), L.Conv2D(4, 3, activation="relu"),
                           L.MaxPooling2D(2), L.Flatten(), L.Dense(3, activation="softmax")])


def _randomize(model, seed):
    """Every weight random (moving variances positive), so that order mistakes show."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(0.5, 1.5, w.shape).astype("float32")
                       if "variance" in getattr(w, "name", "") or "variance" in getattr(
                           w, "path", "") else rng.normal(size=w.shape).astype("float32")
                       for w in model.weights])


def _predict(model, x):
    out = np.asarray(model.predict(x, verbose=0))
    assert np.isfinite(out).all()
    return out


def _inputs(model, seed=0):
    shape = (4,) + tuple(model.inputs[0].shape[1:])
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


@pytest.fixture(params=[_mlp, _cnn], ids=["mlp", "cnn"])
def build(request):
    return request.param


def test_weights_h5_gets_the_keras_layout_by_default(tmp_path, build):
    model = build(kiln)
    _randomize(model, 1)
    path = tmp_path / "m.weights.h5"
    model.save_weights(path)
    with h5py.File(path, "r") as f:
        assert "kiln_format" not in f.attrs
        first = "layers/dense/vars" if build is _mlp else "layers/conv2d/vars"
        assert sorted(f[first].keys(), key=int) == ["0", "1"]
        assert f[first + "/0"].shape == model.layers[0].weights[0].shape
        assert "vars" in f
        if build is _mlp:
            assert len(f["layers/batch_normalization/vars"]) == 4
            assert "layers/dense_1/vars/1" in f
    again = build(kiln)
    again.load_weights(path)
    x = _inputs(model)
    np.testing.assert_array_equal(_predict(again, x), _predict(model, x))


def test_kiln_layout_behind_an_option_and_load_weights_reads_both(tmp_path):
    model = _mlp(kiln)
    _randomize(model, 2)
    x = _inputs(model)
    for name, fmt, kiln_layout in [("a.weights.h5", "kiln", True), ("b.h5", None, True),
                                   ("c.h5", "keras", False), ("d.weights.h5", None, False)]:
        path = tmp_path / name
        kiln.saving.save_weights(model, path, format=fmt)
        with h5py.File(path, "r") as f:
            assert ("kiln_format" in f.attrs) is kiln_layout
            assert ("layers" in f) is not kiln_layout
        again = _mlp(kiln)
        again.load_weights(path)
        np.testing.assert_array_equal(_predict(again, x), _predict(model, x))
    with pytest.raises(ValueError, match="format must be None, 'kiln' or 'keras', received"):
        model.save_weights(tmp_path / "e.weights.h5", format="tf")


def test_a_trained_model_writes_its_optimizer_state_as_keras_does(tmp_path):
    model = _mlp(kiln)
    model.compile("adam", "mse")
    x = _inputs(model)
    model.fit(x, np.zeros((4, 3), "float32"), epochs=1, verbose=0)
    path = tmp_path / "t.weights.h5"
    model.save_weights(path)
    with h5py.File(path, "r") as f:
        # iteration, learning rate, then (momentum, velocity) per trainable variable
        assert len(f["optimizer/vars"]) == 2 + 2 * len(model.trainable_weights)
        assert int(f["optimizer/vars/0"][()]) == 1


def _keras():
    keras = pytest.importorskip("keras")
    if keras.config.backend() == "numpy":
        pytest.importorskip("scipy")
    return keras


def test_keras_loads_what_kiln_saves(tmp_path, build):
    keras = _keras()
    model = build(kiln)
    _randomize(model, 3)
    path = tmp_path / "k.weights.h5"
    model.save_weights(path)
    theirs = build(keras)
    theirs.load_weights(str(path))
    x = _inputs(model)
    np.testing.assert_allclose(_predict(theirs, x),
                               _predict(model, x), rtol=1e-4, atol=1e-5)


def test_kiln_loads_what_keras_saves(tmp_path, build):
    keras = _keras()
    theirs = build(keras)
    _randomize(theirs, 4)
    path = tmp_path / "from_keras.weights.h5"
    theirs.save_weights(str(path))
    model = build(kiln)
    model.load_weights(path)
    x = _inputs(model)
    np.testing.assert_allclose(_predict(model, x),
                               _predict(theirs, x), rtol=1e-4, atol=1e-5)


def test_keras_loads_a_trained_kiln_model_with_its_optimizer_state(tmp_path):
    keras = _keras()
    model = _mlp(kiln)
    model.compile("adam", "mse")
    x = _inputs(model)
    model.fit(x, np.ones((4, 3), "float32"), epochs=2, verbose=0)
    path = tmp_path / "trained.weights.h5"
    model.save_weights(path)
    theirs = _mlp(keras)
    theirs.compile("adam", "mse")
    theirs.load_weights(str(path))
    np.testing.assert_allclose(_predict(theirs, x),
                               _predict(model, x), rtol=1e-4, atol=1e-5)


def test_unbuilt_subclassed_model_loads_a_keras_layout_file(tmp_path):
    class Net(kiln.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = layers.Dense(4, activation="tanh")
            self.out = layers.Dense(2)

        def call(self, x):
            return self.out(self.hidden(x))

    x = np.random.default_rng(0).normal(size=(3, 6)).astype("float32")
    model = Net()
    model.predict(x, verbose=0)
    path = tmp_path / "net.weights.h5"
    model.save_weights(path)
    fresh = Net()
    fresh.load_weights(path)
    np.testing.assert_array_equal(_predict(fresh, x), _predict(model, x))
