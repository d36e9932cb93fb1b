"""Functional models saved by Keras 3.15.1 (``model.save("NAME.keras")``, jax backend) load in
kiln and predict what Keras predicted (tests/fixtures/keras_functional: the files and
make_fixtures.py, which wrote them). Keras records ``"kwargs": {"mask": null}`` in the inbound
nodes of layers whose call takes a mask (BatchNormalization, Dropout, LSTM): a None mask is
no argument."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

import kiln

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras_functional")
NAMES = ["bn", "dropout", "conv_pool", "merge", "lstm", "embedding_mask"]


@pytest.mark.parametrize("name", NAMES)
def test_keras_file_loads_and_predicts_like_keras(name):
    path = os.path.join(HERE, f"{name}.keras")
    assert os.path.getsize(path) < 100_000
    data = np.load(os.path.join(HERE, f"{name}.npz"))
    xs = [data["x"]] if "x" in data else [data["x0"], data["x1"]]
    model = kiln.saving.load_model(path)
    got = model.predict(xs[0] if len(xs) == 1 else xs, verbose=0)
    np.testing.assert_allclose(got, data["y"], rtol=1e-4, atol=1e-5)


def test_the_files_carry_keras_none_mask_kwargs():
    # the case this guards: Keras' own config names mask=None for BatchNormalization
    with zipfile.ZipFile(os.path.join(HERE, "bn.keras")) as z:
        config = json.loads(z.read("config.json"))
    kwargs = [node.get("kwargs") for layer in config["config"]["layers"]
              if layer["class_name"] == "BatchNormalization"
              for node in layer["inbound_nodes"]]
    assert kwargs and all(k.get("mask", "absent") is None for k in kwargs)


def test_none_mask_keyword_is_no_argument_for_a_layer_without_one():
    x = kiln.Input((4,))
    bn = kiln.layers.BatchNormalization()
    y = bn(x, mask=None)
    assert y.shape == (None, 4)
    arr = np.arange(8, dtype="float32").reshape(2, 4)
    np.testing.assert_allclose(bn(arr, mask=None), bn(arr))
