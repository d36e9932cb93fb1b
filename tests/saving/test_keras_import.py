"""Files written by real Keras 3.15.1 (tests/fixtures/keras, made once by
scripts/make_keras_fixtures.py) load into kiln; oracle: the predictions Keras computed and
saved next to them, and the arrays in the files themselves."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from saving_helpers import FIXTURES

import kiln
from kiln import layers
from kiln.saving import load_model, load_weights

NAMES = ["mlp", "cnn", "functional"]


def _inputs(name):
    if name == "functional":
        return [np.load(os.path.join(FIXTURES, f"functional_inputs_{i}.npy")) for i in (0, 1)]
    return np.load(os.path.join(FIXTURES, f"{name}_inputs.npy"))


def _preds(name):
    return np.load(os.path.join(FIXTURES, f"{name}_preds.npy"))


def _fixture(name):
    return os.path.join(FIXTURES, name)


def build_in_code(name):
    """The fixture architectures written in kiln, with names unlike the files' ones."""
    if name == "mlp":
        return kiln.Sequential([kiln.Input((8,)), layers.Dense(16, activation="relu"),
                                layers.Dropout(0.25), layers.Dense(12, activation="tanh"),
                                layers.Dense(4, activation="softmax")])
    if name == "cnn":
        return kiln.Sequential([kiln.Input((8, 8, 2)),
                                layers.Conv2D(4, 3, padding="same", activation="relu"),
                                layers.BatchNormalization(), layers.MaxPooling2D(2),
                                layers.Conv2D(3, 3, activation="relu"), layers.Flatten(),
                                layers.Dense(3, activation="softmax")])
    a = kiln.Input((6,))
    b = kiln.Input((6,))
    ha = layers.Dense(8, activation="relu")(a)
    hb = layers.Dense(8)(b)
    c = layers.Concatenate()([layers.Add()([ha, hb]), a])
    out = layers.Dense(2)(layers.LayerNormalization()(c))
    return kiln.Model([a, b], out)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_load_model_matches_keras_predictions(name, ext):
    model = load_model(_fixture(name + ext))
    np.testing.assert_allclose(model.predict(_inputs(name), verbose=0), _preds(name),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("suffix", [".weights.h5", "_weights_legacy.h5", ".keras", ".h5"])
def test_load_weights_into_model_built_in_code(name, suffix):
    model = build_in_code(name)
    load_weights(model, _fixture(name + suffix))
    np.testing.assert_allclose(model.predict(_inputs(name), verbose=0), _preds(name),
                               atol=1e-5, rtol=0)


def test_keras_optimizer_state_is_restored():
    model = load_model(_fixture("mlp.keras"))
    opt = model.optimizer
    assert type(opt).__name__ == "Adam"
    with h5py.File(_fixture("mlp.weights.h5"), "r") as f:
        saved = [f["optimizer/vars"][str(i)][()] for i in range(len(f["optimizer/vars"]))]
    assert int(opt.iterations.numpy()) == int(saved[0]) == 8  # 2 epochs x 4 batches
    np.testing.assert_allclose(opt.learning_rate, saved[1], rtol=1e-7)
    slots = opt.variables[1:]
    assert len(slots) == len(saved) - 2
    for var, arr in zip(slots, saved[2:]):
        np.testing.assert_array_equal(var.numpy(), arr)
    assert opt.get_slot(model.layers[0].kernel, "momentum") is slots[0]


def test_legacy_h5_optimizer_state_is_restored():
    model = load_model(_fixture("functional.h5"))
    with h5py.File(_fixture("functional.h5"), "r") as f:
        g = f["optimizer_weights"]
        names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
        saved = [g[n][()] for n in names]
    assert int(model.optimizer.iterations.numpy()) == int(saved[0])
    for var, arr in zip(model.optimizer.variables[1:], saved[2:]):
        np.testing.assert_array_equal(var.numpy(), arr)


def test_keras_model_trains_on_after_loading():
    model = load_model(_fixture("cnn.keras"))
    x = _inputs("cnn")
    y = np.arange(len(x)) % 3
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 4 + 3


def test_batchnorm_statistics_come_from_the_file():
    model = load_model(_fixture("cnn.keras"))
    bn = model.layers[1]
    with h5py.File(_fixture("cnn.weights.h5"), "r") as f:
        for i, w in enumerate([bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance]):
            np.testing.assert_array_equal(w.numpy(), f[f"layers/batch_normalization/vars/{i}"])
    assert not np.allclose(bn.moving_mean.numpy(), 0)


def test_keras_names_are_kept():
    model = load_model(_fixture("functional.keras"))
    assert model.name == "two_towers"
    assert [layer.name for layer in model.layers][-1] == "head"


def test_wrong_architecture_for_keras_file_names_layer_and_shapes():
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(16, activation="relu"),
                             layers.Dropout(0.25), layers.Dense(10, activation="tanh"),
                             layers.Dense(4, activation="softmax")])
    before = [w.numpy() for w in model.weights]
    name = model.layers[2].name
    for suffix in (".weights.h5", "_weights_legacy.h5", ".keras"):
        with pytest.raises(ValueError, match=rf"'{name}'.*\(16, 10\).*\(16, 12\)"):
            load_weights(model, _fixture("mlp" + suffix))
    for a, w in zip(before, model.weights):
        np.testing.assert_array_equal(a, w.numpy())


def _keras2_dense(name, units, activation, extra=None):
    cfg = {"name": name, "trainable": True, "dtype": "float32", "units": units,
           "activation": activation, "use_bias": True,
           "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
           "bias_initializer": {"class_name": "Zeros", "config": {}},
           "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
           "kernel_constraint": None, "bias_constraint": None, **(extra or {})}
    return {"class_name": "Dense", "config": cfg}


def _write_keras2_h5(path, model_config, weights):
    """A tf.keras 2.x whole-model file, written by hand: fixed-length byte-string attributes
    and ``:0`` weight names, as tf.keras wrote them."""
    import json

    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = b"2.4.0"
        f.attrs["backend"] = b"tensorflow"
        f.attrs["model_config"] = json.dumps(model_config).encode()
        g = f.create_group("model_weights")
        names = list(weights)
        g.attrs["layer_names"] = np.array([n.encode() for n in names], dtype="S")
        g.attrs["backend"] = b"tensorflow"
        for layer, arrays in weights.items():
            lg = g.create_group(layer)
            wnames = [f"{layer}/{w}:0" for w in ("kernel", "bias")][:len(arrays)]
            lg.attrs["weight_names"] = np.array([n.encode() for n in wnames], dtype="S") \
                if wnames else np.array([], dtype="float64")
            for n, a in zip(wnames, arrays):
                lg[n] = a


def test_keras2_sequential_and_functional_h5(tmp_path):
    rng = np.random.default_rng(5)
    k1, b1 = rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=3).astype("float32")
    k2, b2 = rng.normal(size=(3, 2)).astype("float32"), rng.normal(size=2).astype("float32")
    x = rng.normal(size=(5, 4)).astype("float32")
    expected = np.maximum(x @ k1 + b1, 0) @ k2 + b2

    seq = {"class_name": "Sequential", "config": {"name": "sequential", "layers": [
        _keras2_dense("dense", 3, "relu", {"batch_input_shape": [None, 4]}),
        _keras2_dense("dense_1", 2, "linear")]}}
    _write_keras2_h5(tmp_path / "seq.h5", seq, {"dense": [k1, b1], "dense_1": [k2, b2]})
    with pytest.warns(UserWarning, match="no training configuration"):
        model = load_model(tmp_path / "seq.h5")
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-5, atol=1e-5)

    d1 = dict(_keras2_dense("dense", 3, "relu"), name="dense",
              inbound_nodes=[[["input_1", 0, 0, {}]]])
    d2 = dict(_keras2_dense("dense_1", 2, "linear"), name="dense_1",
              inbound_nodes=[[["dense", 0, 0, {}]]])
    inp = {"class_name": "InputLayer", "name": "input_1", "inbound_nodes": [],
           "config": {"batch_input_shape": [None, 4], "dtype": "float32", "sparse": False,
                      "ragged": False, "name": "input_1"}}
    fn = {"class_name": "Functional", "config": {
        "name": "model", "layers": [inp, d1, d2], "input_layers": [["input_1", 0, 0]],
        "output_layers": [["dense_1", 0, 0]]}}
    _write_keras2_h5(tmp_path / "fn.h5", fn, {"input_1": [], "dense": [k1, b1],
                                              "dense_1": [k2, b2]})
    model = load_model(tmp_path / "fn.h5", compile=False)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, rtol=1e-5, atol=1e-5)
    # and the same weights into a model built in code (matched in order: other names)
    other = kiln.Sequential([kiln.Input((4,)), layers.Dense(3, activation="relu"),
                             layers.Dense(2)])
    load_weights(other, tmp_path / "fn.h5")
    np.testing.assert_allclose(other.predict(x, verbose=0), expected, rtol=1e-5, atol=1e-5)
