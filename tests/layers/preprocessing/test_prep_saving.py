"""Every preprocessing layer round-trips: a model holding it is saved to ``.keras``, loaded,
and predicts the same numbers (adapted state included). StringLookup and Hashing never sit in
a model (they prepare data on the host), so their config goes through JSON instead."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import layers as L


def _adapted_normalization():
    norm = L.Normalization(axis=-1)
    norm.adapt(np.random.default_rng(0).normal(2.0, 3.0, size=(30, 4, 5, 3)))
    return norm


def _adapted_discretization():
    layer = L.Discretization(num_bins=3)
    layer.adapt(np.random.default_rng(1).normal(size=(200, 1)))
    return layer


def _adapted_integer_lookup():
    layer = L.IntegerLookup(output_mode="multi_hot")
    layer.adapt(np.array([[3, 9, 9], [4, 3, 9]]))
    return layer


IMAGE_LAYERS = {
    "Rescaling": lambda: L.Rescaling([0.5, 1.0, 2.0], offset=-1.0),
    "Normalization": _adapted_normalization,
    "NormalizationGiven": lambda: L.Normalization(mean=[1.0, 2.0, 3.0], variance=[1, 4, 9],
                                                  invert=True),
    "Resizing": lambda: L.Resizing(3, 7, interpolation="nearest", crop_to_aspect_ratio=True),
    "CenterCrop": lambda: L.CenterCrop(2, 3),
    "RandomFlip": lambda: L.RandomFlip("vertical", seed=3),
    "RandomRotation": lambda: L.RandomRotation((-0.2, 0.1), fill_mode="constant", seed=4),
    "RandomZoom": lambda: L.RandomZoom(0.2, (-0.1, 0.3), seed=5),
    "RandomTranslation": lambda: L.RandomTranslation(0.1, 0.2, interpolation="nearest"),
    "RandomContrast": lambda: L.RandomContrast((0.1, 0.4), value_range=(-10, 10)),
    "RandomBrightness": lambda: L.RandomBrightness(0.3, value_range=(-10, 10), seed=2),
    "RandomCrop": lambda: L.RandomCrop(3, 3, seed=7),
}

TOKEN_LAYERS = {
    "Discretization": (_adapted_discretization, "float32"),
    "CategoryEncoding": (lambda: L.CategoryEncoding(10, "count"), "int32"),
    "IntegerLookup": (_adapted_integer_lookup, "int64"),
}


def _round_trip(model, x, tmp_path):
    pred = model.predict(x, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = kiln.models.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), pred)
    return loaded


@pytest.mark.parametrize("name", sorted(IMAGE_LAYERS))
def test_image_layer_round_trips_through_keras_file(name, tmp_path):
    layer = IMAGE_LAYERS[name]()
    x = np.random.default_rng(2).normal(size=(3, 4, 5, 3)).astype("float32")
    inp = kiln.Input((4, 5, 3))
    model = kiln.Model(inp, L.Dense(2)(L.Flatten()(layer(inp))))
    loaded = _round_trip(model, x, tmp_path)
    again = next(lay for lay in loaded.layers if type(lay) is type(layer))
    assert again.get_config() == layer.get_config()


@pytest.mark.parametrize("name", sorted(TOKEN_LAYERS))
def test_token_layer_round_trips_through_keras_file(name, tmp_path):
    make, dtype = TOKEN_LAYERS[name]
    layer = make()
    x = np.array([[3, 9, 1], [4, 0, 9], [-2, 3, 3]]).astype(dtype)
    inp = kiln.Input((3,), dtype=dtype)
    model = kiln.Model(inp, layer(inp))
    _round_trip(model, x, tmp_path)


def test_host_layers_round_trip_through_json():
    strings = np.array([["a", "q", "b"], ["c", "", "a"]])
    adapted = L.StringLookup(mask_token="", output_mode="tf_idf")
    adapted.adapt(np.array([["a", "b", "a"], ["c", "a", "b"]]))
    for layer in (adapted, L.StringLookup(vocabulary=["b", "a"], num_oov_indices=3, salt=5),
                  L.StringLookup(vocabulary=["b", "a"], invert=True),
                  L.Hashing(5, mask_value="", salt=(1, 2), output_mode="count")):
        config = json.loads(json.dumps(layer.get_config()))
        again = type(layer).from_config(config)
        probe = np.array([[1, 2, 0], [3, 5, 1]]) if getattr(layer, "invert", False) else strings
        np.testing.assert_array_equal(again(probe), layer(probe))
