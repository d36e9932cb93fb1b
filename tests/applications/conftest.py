"""Keeps the applications tests' memory bounded.

A functional model's layers stay reachable after the model is dropped: ``HISTORY`` (the
functional API's tensor -> layer map, weak on the tensor) holds each layer, and the layer's
``_inbound`` call records hold its output tensors, so neither side is ever released (a
weak-key dictionary cannot break a cycle through its own values). With models of up to 138M
parameters built test after test, that adds up to gigabytes; after each test this fixture
drops the call records of the models the test built (through ``imagenet_utils.finish``), and
Keras' session when Keras is loaded.
"""

import gc
import sys

import pytest

from kiln.applications import imagenet_utils


def _layers(model, seen):
    for layer in getattr(model, "layers", []):
        if id(layer) not in seen:
            seen.add(id(layer))
            yield layer
            yield from _layers(layer, seen)


@pytest.fixture(autouse=True)
def release_models(monkeypatch):
    built = []
    finish = imagenet_utils.finish

    def recording(*args, **kwargs):
        model = finish(*args, **kwargs)
        built.append(model)
        return model

    monkeypatch.setattr(imagenet_utils, "finish", recording)
    yield
    for model in built:
        for layer in [model, *_layers(model, set())]:
            if isinstance(getattr(layer, "_inbound", None), list):
                layer._inbound.clear()
    built.clear()
    if "keras" in sys.modules:
        sys.modules["keras"].backend.clear_session()
    gc.collect()
