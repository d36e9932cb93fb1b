"""Real Keras 3 as the oracle: the layer configs of the models in tests/fixtures/keras (written
by Keras itself, see scripts/make_keras_fixtures.py) load through ``from_config``, round-trip,
and, with the trained weights from ``NAME.weights.h5``, reproduce Keras' predictions.

The layers are wired here from the config's ``inbound_nodes`` (a tiny stand-in for the
functional API), so the test depends only on kiln.layers.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln.layers.base import snake_case

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "keras"
NAMES = ["mlp", "cnn", "functional"]


def _config(name: str) -> dict:
    path = FIXTURES / f"{name}.keras"
    if not path.exists():
        pytest.skip(f"fixture {path} not present")
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("config.json"))


def _resolve(arg, tensors):
    if isinstance(arg, list):
        return [_resolve(a, tensors) for a in arg]
    if isinstance(arg, dict) and arg.get("class_name") == "__keras_tensor__":
        layer_name, _, index = arg["config"]["keras_history"]
        out = tensors[layer_name]
        return out[index] if isinstance(out, list) else out
    return arg


def _build(config: dict):
    """(input placeholders, output tensor, layers in config order) for a Keras model config."""
    model = config["config"]
    tensors, inputs, layers = {}, [], []
    previous = None
    for entry in model["layers"]:
        cls = getattr(L, entry["class_name"])
        layer_config = dict(entry["config"])
        layer = cls.from_config(json.loads(json.dumps(layer_config)))
        layers.append(layer)
        if isinstance(layer, L.InputLayer):
            tensors[layer.name] = previous = layer.output
            inputs.append(layer.output)
            continue
        nodes = entry.get("inbound_nodes")
        if config["class_name"] == "Sequential" or not nodes:
            args = previous
        else:
            args = _resolve(nodes[0]["args"][0], tensors)
        tensors[layer.name] = previous = layer(args)
    if config["class_name"] == "Sequential":
        return inputs, previous, layers
    ins = model["input_layers"]
    ins = [ins] if isinstance(ins[0], str) else ins
    order = [tensors[entry[0]] for entry in ins]
    outputs = model["output_layers"]
    out_name = outputs[0] if isinstance(outputs[0], str) else outputs[0][0]  # one output
    return order, tensors[out_name], layers


def _load_weights(name: str, layers: list) -> None:
    """Keras 3 weight files key layers by class-derived names (dense, dense_1 ...) in order."""
    h5py = pytest.importorskip("h5py")
    counts: dict[str, int] = {}
    with h5py.File(FIXTURES / f"{name}.weights.h5", "r") as f:
        for layer in layers:
            if not layer.weights:
                continue
            base = snake_case(type(layer).__name__)
            n = counts.get(base, 0)
            counts[base] = n + 1
            group = f["layers"][base if n == 0 else f"{base}_{n}"]["vars"]
            layer.set_weights([group[str(i)][()] for i in range(len(group))])


@pytest.mark.parametrize("name", NAMES)
def test_keras_layer_configs_round_trip(name: str) -> None:
    for entry in _config(name)["config"]["layers"]:
        cls = getattr(L, entry["class_name"])
        layer = cls.from_config(dict(entry["config"]))
        again = cls.from_config(layer.get_config())
        assert again.get_config() == layer.get_config()
        # every key Keras wrote is present in kiln's config (same names)
        if entry["class_name"] != "InputLayer":
            missing = set(entry["config"]) - set(layer.get_config())
            assert not missing, f"{entry['class_name']}: keys {missing} missing"


@pytest.mark.parametrize("name", NAMES)
def test_keras_predictions_reproduced(name: str) -> None:
    inputs, output, layers = _build(_config(name))
    _load_weights(name, layers)
    if len(inputs) == 1:
        data = [np.load(FIXTURES / f"{name}_inputs.npy")]
    else:
        data = [np.load(FIXTURES / f"{name}_inputs_{i}.npy") for i in range(len(inputs))]
    want = np.load(FIXTURES / f"{name}_preds.npy")
    got = kiln.function(inputs, output, backend="reference")(*data)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
