"""Sequential: building (Input, input_shape=, deferred), add/pop, summary, weights, config,
and learning a seeded 10-class problem."""

from __future__ import annotations

import json

import numpy as np
import pytest
from model_helpers import blobs, weights_equal

import kiln
from kiln import layers


def test_mlp_reaches_95_percent_validation_accuracy():
    x, y = blobs(1500, classes=10, features=8, spread=4.0)
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(64, activation="relu"),
                             layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=15, batch_size=32, validation_split=0.2, verbose=0)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert len(history.history["loss"]) == 15
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert history.history["val_accuracy"][-1] >= 0.95
    assert model.history is history


def _convnet() -> kiln.Sequential:
    return kiln.Sequential([
        kiln.Input((28, 28, 1)),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ])


def test_summary_of_the_keras_mnist_convnet():
    lines: list[str] = []
    model = _convnet()
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert lines[0] == 'Model: "sequential"'
    assert "Total params: 34,826 (136.04 KB)" in text
    assert "Trainable params: 34,826 (136.04 KB)" in text
    assert "Non-trainable params: 0 (0.00 B)" in text
    assert model.count_params() == 34826
    for name, shape, params in [("conv2d (Conv2D)", "(None, 26, 26, 32)", "320"),
                                ("max_pooling2d (MaxPooling2D)", "(None, 13, 13, 32)", "0"),
                                ("conv2d_1 (Conv2D)", "(None, 11, 11, 64)", "18,496"),
                                ("flatten (Flatten)", "(None, 1600)", "0"),
                                ("dense (Dense)", "(None, 10)", "16,010")]:
        row = next(line for line in lines if name in line)
        assert shape in row and row.rstrip(" │").endswith(params)
    assert "InputLayer" not in text


def test_input_shape_argument_and_deferred_build():
    a = kiln.Sequential([layers.Dense(4, input_shape=(3,)), layers.Dense(2)])
    assert a.built and a.input_shape == (None, 3) and a.output_shape == (None, 2)
    b = kiln.Sequential([layers.Dense(4), layers.Dense(2)])
    assert not b.built
    b.compile("sgd", "mse")
    x = np.ones((10, 3), np.float32)
    b.fit(x, np.zeros((10, 2), np.float32), verbose=0)
    assert b.built and b.input_shape == (None, 3)
    # the optimizer is built as soon as the weights exist
    assert b.optimizer.built
    c = kiln.Sequential([layers.Dense(4), layers.Dense(2)])
    assert c.predict(x, verbose=0).shape == (10, 2)
    d = kiln.Sequential([layers.Dense(4)])
    d.build((None, 7))
    assert d.count_params() == 32


def test_optimizer_built_eagerly_at_compile():
    model = kiln.Sequential([kiln.Input((3,)), layers.Dense(2)])
    model.compile("adam", "mse")
    assert model.optimizer.built
    assert len(model.optimizer.variables) == 1 + 2 * 2


def test_add_pop_and_get_layer():
    model = kiln.Sequential()
    model.add(kiln.Input((5,)))
    model.add(layers.Dense(4, name="first"))
    model.add(layers.Dense(3, name="second"))
    assert [layer.name for layer in model.layers] == ["first", "second"]
    assert model.output_shape == (None, 3)
    popped = model.pop()
    assert popped.name == "second" and model.output_shape == (None, 4)
    assert model.get_layer("first") is model.layers[0]
    assert model.get_layer(index=0) is model.layers[0]
    with pytest.raises(ValueError, match="No such layer: nope"):
        model.get_layer("nope")
    with pytest.raises(ValueError, match="index 5"):
        model.get_layer(index=5)
    with pytest.raises(ValueError, match="unique names"):
        model.add(layers.Dense(2, name="first"))
    assert [layer.name for layer in model.layers] == ["first"]
    with pytest.raises(TypeError, match="Layer instance"):
        model.add("dense")
    with pytest.raises(ValueError, match="incompatible"):
        model.add(_bad_dense(model))
    assert [layer.name for layer in model.layers] == ["first"]


def _bad_dense(model: kiln.Sequential) -> layers.Layer:
    bad = layers.Dense(2, name="bad")
    bad.build((None, 99))  # built for 99 features; the model produces 4
    return bad


def test_get_set_weights_and_count_params():
    model = kiln.Sequential([kiln.Input((3,)), layers.Dense(4), layers.Dense(2)])
    weights = model.get_weights()
    assert [w.shape for w in weights] == [(3, 4), (4,), (4, 2), (2,)]
    assert model.count_params() == 3 * 4 + 4 + 4 * 2 + 2
    new = [np.full_like(w, i) for i, w in enumerate(weights)]
    model.set_weights(new)
    assert weights_equal(model.get_weights(), new)
    with pytest.raises(ValueError):
        model.set_weights(new[:2])


def test_config_round_trip_keras_schema():
    model = kiln.Sequential([kiln.Input((6,)), layers.Dense(5, activation="relu"),
                             layers.Dropout(0.2), layers.Dense(2)], name="seq")
    config = json.loads(json.dumps(model.get_config()))
    assert config["name"] == "seq"
    assert config["build_input_shape"] == [None, 6]
    assert [c["class_name"] for c in config["layers"]] == ["InputLayer", "Dense", "Dropout",
                                                           "Dense"]
    assert all("config" in c for c in config["layers"])
    clone = kiln.Sequential.from_config(config)
    assert [layer.name for layer in clone.layers] == [layer.name for layer in model.layers]
    clone.set_weights(model.get_weights())
    x = np.random.default_rng(0).normal(size=(7, 6)).astype(np.float32)
    np.testing.assert_array_equal(clone.predict(x, verbose=0), model.predict(x, verbose=0))


def test_keras2_style_config_with_batch_input_shape():
    config = {"name": "old", "layers": [
        {"class_name": "Dense", "config": {"name": "d1", "units": 3,
                                           "batch_input_shape": [None, 4]}},
        {"class_name": "Dense", "config": {"name": "d2", "units": 1}}]}
    model = kiln.Sequential.from_config(config)
    assert model.built and model.input_shape == (None, 4)
    assert model.count_params() == 4 * 3 + 3 + 3 + 1


def test_unknown_class_in_config_names_it():
    with pytest.raises(ValueError, match="NoSuchLayer"):
        kiln.Sequential.from_config({"name": "m", "layers": [
            {"class_name": "NoSuchLayer", "config": {}}]})


def test_deferred_build_from_integer_ids_with_embedding():
    ids = np.random.default_rng(0).integers(0, 50, (20, 6))
    model = kiln.Sequential([layers.Embedding(50, 4), layers.Flatten(), layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(ids, np.zeros((20, 1)), verbose=0)
    assert model.input_shape == (None, 6)
    np.testing.assert_allclose(model(ids), model.predict(ids, verbose=0), rtol=1e-6)
    dense = kiln.Sequential([layers.Dense(2)])
    assert dense(np.ones((3, 4), np.int64)).shape == (3, 2)  # ints fed to a float model
