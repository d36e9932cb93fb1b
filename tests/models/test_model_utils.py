"""layer.input / layer.output, model_from_json and clone_model (Keras' semantics)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers


def build():
    inp = kiln.Input((4,), name="x")
    hidden = layers.Dense(3, activation="relu", name="h")
    h = hidden(inp)
    out = layers.Dense(2, name="o")(h)
    return kiln.Model(inp, out, name="m"), inp, hidden, h, out


def test_layer_input_and_output_are_the_symbolic_tensors_of_its_call():
    model, inp, hidden, h, out = build()
    assert hidden.input is inp and hidden.output is h
    assert model.layers[0].output is inp  # the InputLayer's placeholder
    # a feature extractor from an intermediate output (the Keras guide's idiom)
    features = kiln.Model(model.inputs, [layer.output for layer in model.layers[1:]])
    x = np.random.default_rng(0).standard_normal((5, 4)).astype("float32")
    got = features.predict(x, verbose=0)
    w, b = hidden.get_weights()
    np.testing.assert_allclose(got[0], np.maximum(x @ w + b, 0), rtol=1e-6, atol=1e-6)


def test_output_of_a_layer_never_or_twice_called_is_a_clear_error():
    layer = layers.Dense(2, name="lonely")
    with pytest.raises(AttributeError, match="'lonely' has never been called"):
        _ = layer.output
    layer(kiln.Input((3,)))
    layer(kiln.Input((3,)))
    with pytest.raises(AttributeError, match="called 2 times"):
        _ = layer.input


def test_model_from_json_and_clone_model_rebuild_the_architecture():
    model, *_ = build()
    x = np.random.default_rng(1).standard_normal((6, 4)).astype("float32")
    for copy in (kiln.models.model_from_json(model.to_json()), kiln.models.clone_model(model)):
        assert [type(layer) for layer in copy.layers] == [type(layer) for layer in model.layers]
        assert [w.shape for w in copy.get_weights()] == [w.shape for w in model.get_weights()]
        copy.set_weights(model.get_weights())
        np.testing.assert_allclose(copy.predict(x, verbose=0), model.predict(x, verbose=0),
                                   rtol=1e-6)
    with pytest.raises(NotImplementedError, match="clone_function"):
        kiln.models.clone_model(model, clone_function=lambda layer: layer)


def test_layers_serialize_and_deserialize_round_trip():
    model, _, hidden, *_ = build()
    config = kiln.layers.serialize(hidden)
    assert config["class_name"] == "Dense" and config["registered_name"] is None
    copy = kiln.layers.deserialize(config)
    assert type(copy) is layers.Dense and copy.get_config() == hidden.get_config()
    rebuilt = kiln.layers.deserialize(kiln.layers.serialize(model))
    assert [type(layer) for layer in rebuilt.layers] == [type(layer) for layer in model.layers]
    with pytest.raises(ValueError, match="unknown layer class 'Nope'"):
        kiln.layers.deserialize({"class_name": "Nope", "config": {}})


def test_a_registered_function_is_an_activation_that_loads(tmp_path):
    @kiln.saving.register_keras_serializable(package="t", name="shifted_relu")
    def shifted_relu(x):
        return kiln.ops.relu(x - 0.5)

    inp = kiln.Input((3,))
    model = kiln.Model(inp, layers.Dense(2, activation=shifted_relu)(inp))
    model.save(tmp_path / "m.keras")
    loaded = kiln.models.load_model(tmp_path / "m.keras")
    x = np.random.default_rng(2).standard_normal((4, 3)).astype("float32")
    w, b = model.get_weights()
    np.testing.assert_allclose(loaded.predict(x, verbose=0), np.maximum(x @ w + b - 0.5, 0),
                               rtol=1e-6, atol=1e-6)
