"""Functional models: DAG discovery from HISTORY, multiple inputs/outputs (list and dict),
shared layers, nested models, raw ops between layers, config round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import layers


def _two_heads(rng: np.random.Generator, n: int = 512):
    a = rng.normal(size=(n, 6)).astype(np.float32)
    b = rng.normal(size=(n, 4)).astype(np.float32)
    y_reg = (2.0 * a[:, :1] - b[:, 1:2]).astype(np.float32)
    y_cls = ((a[:, 0] + b[:, 0] > 0).astype(np.int64) + (a[:, 1] > 0.5)).astype(np.int64)
    return a, b, y_reg, y_cls


def _two_input_two_output_model() -> kiln.Model:
    ia, ib = kiln.Input((6,), name="a"), kiln.Input((4,), name="b")
    shared = layers.Dense(16, activation="relu", name="shared")
    h = layers.Concatenate()([shared(layers.Dense(16, name="pa")(ia)),
                              shared(layers.Dense(16, name="pb")(ib))])
    reg = layers.Dense(1, name="reg")(h)
    cls = layers.Dense(3, activation="softmax", name="cls")(h)
    return kiln.Model([ia, ib], [reg, cls])


def test_two_inputs_two_outputs_both_heads_train():
    a, b, y_reg, y_cls = _two_heads(np.random.default_rng(0))
    model = _two_input_two_output_model()
    assert model.output_names == ["reg", "cls"]
    assert [layer.name for layer in model.layers] == ["a", "b", "pa", "pb", "shared",
                                                      "concatenate", "reg", "cls"]
    model.compile("adam", loss=["mse", "sparse_categorical_crossentropy"],
                  loss_weights=[1.0, 0.5], metrics={"cls": ["accuracy"]})
    hist = model.fit({"a": a, "b": b}, [y_reg, y_cls], epochs=8, batch_size=32,
                     verbose=0).history
    assert list(hist) == ["loss", "reg_loss", "cls_loss", "cls_accuracy"]
    assert hist["reg_loss"][-1] < 0.5 * hist["reg_loss"][0]
    assert hist["cls_loss"][-1] < 0.9 * hist["cls_loss"][0]
    # total = weighted sum of the (unweighted) per-output losses
    logs = model.evaluate([a, b], [y_reg, y_cls], verbose=0, return_dict=True)
    np.testing.assert_allclose(logs["loss"], logs["reg_loss"] + 0.5 * logs["cls_loss"],
                               rtol=1e-5)
    reg, cls = model.predict([a, b], verbose=0)
    assert reg.shape == (512, 1) and cls.shape == (512, 3)
    np.testing.assert_allclose(cls.sum(1), 1.0, rtol=1e-5)
    # the shared layer's weights are counted once
    assert model.count_params() == 6 * 16 + 16 + 4 * 16 + 16 + 16 * 16 + 16 + 33 + 99


def test_dict_inputs_and_outputs_and_loss_dict():
    rng = np.random.default_rng(1)
    a, b, y_reg, y_cls = _two_heads(rng, 64)
    ia, ib = kiln.Input((6,)), kiln.Input((4,))
    h = layers.Dense(8, activation="relu")(layers.Concatenate()([ia, ib]))
    model = kiln.Model({"left": ia, "right": ib},
                       {"value": layers.Dense(1)(h), "label": layers.Dense(3)(h)})
    assert model.output_names == ["value", "label"]
    model.compile("sgd", loss={"value": "mse", "label": kiln.losses.SparseCategoricalCrossentropy(
        from_logits=True)})
    hist = model.fit({"right": b, "left": a}, {"label": y_cls, "value": y_reg}, epochs=2,
                     verbose=0).history
    assert {"loss", "value_loss", "label_loss"} <= set(hist)
    out = model.predict({"left": a, "right": b}, verbose=0)
    assert set(out) == {"value", "label"} and out["label"].shape == (64, 3)
    with pytest.raises(ValueError, match="missing"):
        model.predict({"left": a}, verbose=0)


def test_nested_model_as_layer_and_config_round_trip():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    inner = kiln.Sequential([kiln.Input((6,)), layers.Dense(8, activation="relu")],
                            name="inner")
    inp = kiln.Input((6,))
    outer = kiln.Model(inp, layers.Dense(1)(inner(inp)))
    assert [layer.name for layer in outer.layers][1] == "inner"
    assert outer.count_params() == 6 * 8 + 8 + 9
    outer.compile("sgd", "mse")
    outer.fit(x, x[:, :1], epochs=1, verbose=0)
    config = json.loads(json.dumps(outer.get_config()))
    assert config["input_layers"] == [["input_layer_1", 0, 0]]
    assert [entry["class_name"] for entry in config["layers"]] == ["InputLayer", "Sequential",
                                                                   "Dense"]
    dense_entry = config["layers"][2]
    arg = dense_entry["inbound_nodes"][0]["args"][0]
    assert arg["class_name"] == "__keras_tensor__"
    assert arg["config"]["keras_history"] == ["inner", 0, 0]
    clone = kiln.Model.from_config(config)
    clone.set_weights(outer.get_weights())
    np.testing.assert_allclose(clone.predict(x, verbose=0), outer.predict(x, verbose=0),
                               rtol=1e-6)


def test_shared_layer_config_round_trip_and_keras2_inbound_nodes():
    model = _two_input_two_output_model()
    config = json.loads(json.dumps(model.get_config()))
    shared = next(c for c in config["layers"] if c["name"] == "shared")
    assert len(shared["inbound_nodes"]) == 2
    clone = kiln.Model.from_config(config)
    clone.set_weights(model.get_weights())
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(5, 6)), rng.normal(size=(5, 4))
    for u, v in zip(clone.predict([a, b], verbose=0), model.predict([a, b], verbose=0)):
        np.testing.assert_allclose(u, v, rtol=1e-6)
    keras2 = {"name": "k2", "layers": [
        {"class_name": "InputLayer", "name": "in", "inbound_nodes": [],
         "config": {"batch_input_shape": [None, 3], "name": "in"}},
        {"class_name": "Dense", "name": "d", "config": {"name": "d", "units": 2},
         "inbound_nodes": [[["in", 0, 0, {}]]]}],
        "input_layers": [["in", 0, 0]], "output_layers": [["d", 0, 0]]}
    m2 = kiln.Model.from_config(keras2)
    assert m2.predict(np.ones((2, 3)), verbose=0).shape == (2, 2)


def test_raw_ops_between_layers_are_replayed():
    inp = kiln.Input((3,))
    h = layers.Dense(4, kernel_initializer="ones", bias_initializer="zeros")(inp)
    out = layers.Dense(1, kernel_initializer="ones", bias_initializer="zeros")(h * 2.0 + 1.0)
    model = kiln.Model(inp, out)
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    np.testing.assert_allclose(model.predict(x, verbose=0), [[4 * (2 * 6 + 1)]])
    with pytest.raises(NotImplementedError, match="raw kiln.ops"):
        model.get_config()


def test_disconnected_graph_and_bad_arguments():
    a, b = kiln.Input((3,)), kiln.Input((3,))
    out = layers.Dense(1)(layers.Add()([a, b]))
    with pytest.raises(ValueError, match="Graph disconnected"):
        kiln.Model(a, out)
    with pytest.raises(TypeError, match="symbolic tensors"):
        kiln.Model(a, np.ones(3))


def test_functional_model_called_on_new_tensor_and_numpy():
    inp = kiln.Input((3,))
    model = kiln.Model(inp, layers.Dense(2, kernel_initializer="ones")(inp))
    x2 = kiln.Input((3,))
    y2 = model(x2)
    assert y2.shape == (None, 2)
    np.testing.assert_allclose(model(np.ones((4, 3), np.float32)), np.full((4, 2), 3.0))
    with pytest.raises(ValueError, match="incompatible"):
        model(kiln.Input((5,)))
