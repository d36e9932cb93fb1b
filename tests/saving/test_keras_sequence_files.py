"""Keras 3 files of sequence models (LSTM, GRU, SimpleRNN, Bidirectional, TimeDistributed,
MultiHeadAttention, Embedding(mask_zero=True)) load into kiln and predict what Keras
predicted; kiln writes these models in the layout Keras writes.

Fixtures: tests/fixtures/keras/{seq_rnn,bidir_rnn,transformer,masked_lstm}.*, written once by
real Keras 3.15.1 (jax) with scripts/make_keras_fixtures.py; oracle: the predictions Keras
computed (``NAME_preds.npy``) and the layout of Keras' own files. That Keras loads kiln's files
is checked outside the test suite (Keras is not a kiln dependency):
scripts/check_kiln_files_in_keras.py.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import h5py
import numpy as np
import pytest
from saving_helpers import FIXTURES

import kiln
from kiln import layers
from kiln.saving import load_model, load_weights, save_weights
from kiln.saving.keras_ops import KerasOperation
from kiln.saving.state import keras_optimizer_arrays

NAMES = ["seq_rnn", "bidir_rnn", "transformer", "masked_lstm"]
ATOL = 1e-5


def _fixture(name):
    return os.path.join(FIXTURES, name)


def _inputs(name):
    return np.load(_fixture(f"{name}_inputs.npy"))


def _preds(name):
    return np.load(_fixture(f"{name}_preds.npy"))


def build_in_code(name, mask_zero=True):
    """The fixture architectures written in kiln (generated layer names, unlike the files')."""
    if name == "seq_rnn":
        return kiln.Sequential([kiln.Input((7,), dtype="int32"), layers.Embedding(20, 6),
                                layers.LSTM(8, return_sequences=True), layers.GRU(5),
                                layers.Dense(3, activation="softmax")])
    if name == "bidir_rnn":
        x = kiln.Input((6, 4))
        h = layers.Bidirectional(layers.LSTM(5, return_sequences=True))(x)
        h = layers.GRU(4, reset_after=False, return_sequences=True)(h)
        h = layers.SimpleRNN(3, return_sequences=True)(h)
        return kiln.Model(x, layers.TimeDistributed(layers.Dense(2))(h))
    if name == "transformer":
        x = kiln.Input((5, 8))
        att = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
        h = layers.LayerNormalization()(layers.Add()([x, att]))
        ff = layers.Dense(8)(layers.Dense(16, activation="relu")(h))
        h = layers.LayerNormalization()(layers.Add()([h, ff]))
        return kiln.Model(x, layers.Dense(3, activation="softmax")(
            layers.GlobalAveragePooling1D()(h)))
    assert name == "masked_lstm"
    x = kiln.Input((7,), dtype="int32")
    h = layers.LSTM(5)(layers.Embedding(20, 6, mask_zero=mask_zero)(x))
    return kiln.Model(x, layers.Dense(2)(h))


def _h5_tree(f, skip=("optimizer",)):
    """{dataset path: shape} of a Keras 3 weights file (optimizer excluded by default)."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.split("/")[0] not in skip:
            out[name] = obj.shape
    f.visititems(visit)
    return out


# ---- Keras' files load into kiln ------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("ext", [".keras", ".h5"])
def test_load_model_matches_keras_predictions(name, ext):
    model = load_model(_fixture(name + ext))
    np.testing.assert_allclose(model.predict(_inputs(name), verbose=0), _preds(name),
                               atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("suffix", [".weights.h5", "_weights_legacy.h5", ".keras", ".h5"])
def test_load_weights_into_model_built_in_code(name, suffix):
    model = build_in_code(name)
    load_weights(model, _fixture(name + suffix))
    np.testing.assert_allclose(model.predict(_inputs(name), verbose=0), _preds(name),
                               atol=ATOL, rtol=0)


def test_keras_mask_operation_node_is_a_kiln_op():
    """Keras writes Embedding(mask_zero=True)'s mask as a NotEqual node feeding the LSTM's
    ``mask=``; kiln runs it as kiln.ops.not_equal, and the mask changes the predictions."""
    with zipfile.ZipFile(_fixture("masked_lstm.keras")) as z:
        entries = json.loads(z.read("config.json"))["config"]["layers"]
    assert [(e["module"], e["class_name"]) for e in entries
            if e["class_name"] == "NotEqual"] == [("keras.src.ops.numpy", "NotEqual")]
    model = load_model(_fixture("masked_lstm.keras"))
    ops = [layer for layer in model.layers if isinstance(layer, KerasOperation)]
    assert [(op.name, op.operation) for op in ops] == [("not_equal", "NotEqual")]
    unmasked = build_in_code("masked_lstm", mask_zero=False)
    load_weights(unmasked, _fixture("masked_lstm.weights.h5"))
    x = _inputs("masked_lstm")
    assert (x == 0).any()
    assert np.abs(unmasked.predict(x, verbose=0) - _preds("masked_lstm")).max() > 1e-2


def _keras_paths(model):
    """id(variable) -> Keras' flat variable path (``bidirectional_forward_lstm_1_lstm_cell_
    kernel``) of a model loaded from a Keras config (so its layer names are Keras')."""
    out = {}

    def walk(layer, prefix):
        for w in layer._weights:
            out.setdefault(id(w), f"{prefix}_{w.short_name}")
        for sub in layer._sublayers():
            walk(sub, f"{prefix}_{sub.name}")

    for layer in model.layers:
        walk(layer, layer.name)
    return out


@pytest.mark.parametrize("name", ["bidir_rnn", "transformer", "seq_rnn"])
def test_keras_optimizer_state_lands_on_the_right_variables(name):
    """Keras' legacy .h5 names every optimizer slot after its variable: kiln's restored slots
    line up (Bidirectional: forward before backward; MHA: query, key, value, output)."""
    model = load_model(_fixture(name + ".h5"))
    with h5py.File(_fixture(name + ".h5"), "r") as f:
        g = f["optimizer_weights"]
        names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
        saved = [g[n][()] for n in names]
    restored = keras_optimizer_arrays(model.optimizer)
    assert len(restored) == len(saved)
    for a, b in zip(restored, saved):
        np.testing.assert_array_equal(a, b)
    paths = _keras_paths(model)
    for j, var in enumerate(model.trainable_weights):
        assert names[2 + 2 * j].endswith(paths[id(var)] + "_momentum"), (j, names[2 + 2 * j])
        assert names[3 + 2 * j].endswith(paths[id(var)] + "_velocity")
    with h5py.File(_fixture(name + ".weights.h5"), "r") as f:  # the .keras layout: same
        v = f["optimizer/vars"]
        keras3 = [v[str(i)][()] for i in range(len(v))]
    for a, b in zip(keras_optimizer_arrays(load_model(_fixture(name + ".keras")).optimizer),
                    keras3):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op, arguments, args, oracle", [
    ("NotEqual", {}, ([[0, 2, 0], [1, 0, 3]], 0), lambda x, y: np.not_equal(x, y)),
    ("Equal", {}, ([[0, 2, 0], [1, 0, 3]], 0), lambda x, y: np.equal(x, y)),
    ("Greater", {}, ([[0.5, 2.0], [1.0, -1.0]], 1.0), lambda x, y: np.greater(x, y)),
    ("Any", {"axis": -1, "keepdims": False}, ([[True, False], [False, False]],),
     lambda x: np.any(x, axis=-1)),
    ("All", {"axis": [0], "keepdims": True}, ([[True, False], [True, True]],),
     lambda x: np.all(x, axis=0, keepdims=True)),
    ("LogicalAnd", {}, ([[True, False], [True, True]], [[True, True], [False, True]]),
     np.logical_and),
    ("LogicalNot", {}, ([[True, False]],), np.logical_not),
    ("Cast", {"dtype": "float32"}, ([[True, False]],), lambda x: x.astype("float32")),
])
def test_keras_operations_compute_what_numpy_does(op, arguments, args, oracle):
    arrays = [np.asarray(a) if isinstance(a, list) else a for a in args]
    arrays[0] = arrays[0].astype("int32") if arrays[0].dtype.kind == "i" else arrays[0]
    got = KerasOperation(op, arguments)(*arrays)
    want = oracle(*arrays)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_unknown_keras_operation_is_refused(tmp_path):
    src = _fixture("masked_lstm.keras")
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    config = json.loads(members["config.json"])
    for entry in config["config"]["layers"]:
        if entry["class_name"] == "NotEqual":
            entry["class_name"] = entry["registered_name"] = "Sin"
    members["config.json"] = json.dumps(config).encode()
    path = tmp_path / "edited.keras"
    with zipfile.ZipFile(path, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(ValueError, match=r"Keras operation keras\.src\.ops\.numpy\.Sin"):
        load_model(path)


def test_multi_head_attention_refuses_keras_options_it_lacks():
    base = {"num_heads": 2, "key_dim": 4}
    assert layers.MultiHeadAttention.from_config({**base, "use_gate": False,
                                                  "sliding_window": None}).num_heads == 2
    with pytest.raises(ValueError, match="use_gate=True is not supported"):
        layers.MultiHeadAttention.from_config({**base, "use_gate": True})
    with pytest.raises(ValueError, match="sliding_window=3 is not supported"):
        layers.MultiHeadAttention.from_config({**base, "sliding_window": 3})


# ---- kiln writes what Keras writes ------------------------------------------------------------
@pytest.fixture(scope="module")
def kiln_written(tmp_path_factory):
    """The four models built and trained in kiln, saved as .keras, .h5 and Keras-layout
    .weights.h5; returns {name: (model, inputs, folder)}."""
    folder = tmp_path_factory.mktemp("kiln_files")
    kiln.utils.set_random_seed(3)
    out = {}
    for name in NAMES:
        model = build_in_code(name)
        x = _inputs(name)
        if name in ("seq_rnn", "transformer"):
            y, loss = np.arange(len(x)) % 3, "sparse_categorical_crossentropy"
        else:
            y = np.zeros(_preds(name).shape, "float32") + 0.5
            loss = "mean_squared_error"
        model.compile(kiln.optimizers.Adam(0.01), loss)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        model.save(str(folder / f"{name}.keras"))
        model.save(str(folder / f"{name}.h5"))
        save_weights(model, folder / f"{name}.weights.h5", format="keras")
        out[name] = (model, x, folder)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_kiln_weights_layout_is_keras_layout(kiln_written, name):
    """Every dataset path and shape of kiln's Keras-layout weights (and optimizer variable
    count) is what Keras wrote for the same architecture (layers/lstm/cell/vars/0,
    layers/bidirectional/forward_layer/cell/vars/0, layers/multi_head_attention/query_dense
    /vars/0 ...)."""
    _, _, folder = kiln_written[name]
    with h5py.File(_fixture(name + ".weights.h5"), "r") as f:
        want, want_opt = _h5_tree(f), len(f["optimizer/vars"])
    for member in (f"{name}.weights.h5", f"{name}.keras"):
        path = folder / member
        if member.endswith(".keras"):
            with zipfile.ZipFile(path) as z:
                f = h5py.File(io.BytesIO(z.read("model.weights.h5")), "r")
        else:
            f = h5py.File(path, "r")
        with f:
            assert _h5_tree(f) == want
            assert len(f["optimizer/vars"]) == want_opt


@pytest.mark.parametrize("name", NAMES)
def test_kiln_config_names_keras_classes(kiln_written, name):
    """config.json of kiln's .keras: the layers' classes and modules are Keras' (no kiln
    module names, no operation nodes when kiln propagates the mask itself)."""
    _, _, folder = kiln_written[name]
    with zipfile.ZipFile(folder / f"{name}.keras") as z:
        mine = json.loads(z.read("config.json"))
    with zipfile.ZipFile(_fixture(name + ".keras")) as z:
        theirs = json.loads(z.read("config.json"))
    assert '"module": "kiln' not in json.dumps(mine)
    keras_layers = [e["class_name"] for e in theirs["config"]["layers"]
                    if not e["module"].startswith("keras.src.ops")]
    assert [e["class_name"] for e in mine["config"]["layers"]] == keras_layers
    assert {e["module"] for e in mine["config"]["layers"]} == {"keras.layers"}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("ext", [".keras", ".h5", ".weights.h5"])
def test_kiln_files_reload_in_kiln(kiln_written, name, ext):
    model, x, folder = kiln_written[name]
    path = folder / f"{name}{ext}"
    if ext == ".weights.h5":
        again = build_in_code(name)
        load_weights(again, path)
    else:
        again = load_model(path)
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6, rtol=0)


def test_kiln_h5_carries_keras_training_config(kiln_written):
    """kiln's .h5 model file also holds what Keras' legacy loader reads to compile the
    model and restore the optimizer (training_config, optimizer_weights)."""
    model, _, folder = kiln_written["bidir_rnn"]
    with h5py.File(folder / "bidir_rnn.h5", "r") as f:
        training = json.loads(f.attrs["training_config"])
        assert training["optimizer_config"]["class_name"] == "Adam"
        assert training["loss"] == "mean_squared_error" and "loss_weights" in training
        g = f["optimizer_weights"]
        names = [n.decode() if isinstance(n, bytes) else n for n in g.attrs["weight_names"]]
        arrays = [g[n][()] for n in names]
    assert len(set(names)) == len(names)
    expected = keras_optimizer_arrays(model.optimizer)
    assert len(arrays) == len(expected)
    for a, b in zip(arrays, expected):
        np.testing.assert_array_equal(a, b)


def test_keras_operation_node_survives_kiln_round_trip(tmp_path):
    """A Keras file with a NotEqual node, loaded by kiln and saved again, has the node in
    Keras' form (so Keras loads it) and reloads in kiln to the same predictions."""
    model = load_model(_fixture("masked_lstm.keras"))
    path = tmp_path / "again.keras"
    model.save(str(path))
    with zipfile.ZipFile(path) as z:
        entries = json.loads(z.read("config.json"))["config"]["layers"]
    (node,) = [e for e in entries if e["class_name"] == "NotEqual"]
    assert node["module"] == "keras.src.ops.numpy" and node["registered_name"] == "NotEqual"
    assert node["config"] == {"name": "not_equal"} and "build_config" not in node
    (lstm,) = [e for e in entries if e["class_name"] == "LSTM"]
    assert lstm["inbound_nodes"][0]["kwargs"]["mask"]["config"]["keras_history"][0] == \
        "not_equal"
    model.save(str(path.with_suffix(".h5")))
    for p in (path, path.with_suffix(".h5")):
        np.testing.assert_allclose(load_model(p).predict(_inputs("masked_lstm"), verbose=0),
                                   _preds("masked_lstm"), atol=ATOL, rtol=0)
