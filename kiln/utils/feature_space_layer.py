"""A FeatureSpace as a host-side layer of a functional model: what
``FeatureSpace.get_encoded_features`` calls on ``get_inputs()`` (``kiln.layers.host_tensor``;
the model runs it on the arrays before its compiled graph, ``kiln.models.host_prefix``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln import layers
from kiln.layers.base import Layer, is_symbolic
from kiln.layers.host_tensor import has_host_tensor, host_call


class FeatureSpaceLayer(Layer):
    """A FeatureSpace as the host-side layer of a functional model
    (:meth:`FeatureSpace.get_encoded_features`)."""

    def __init__(self, space: Any):
        super().__init__(name=space.name)
        self.space = space
        self.built = True

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_symbolic(inputs) or has_host_tensor(inputs):
            return host_call(self, inputs, *args, **kwargs)
        return self.space(inputs)

    def _host_probe(self, inputs: dict) -> dict:
        """One sample of each feature, a known token where there is a vocabulary."""
        probe = {}
        for k, f in self.space.features.items():
            pre = f.preprocessor
            vocab = pre.get_vocabulary(include_special_tokens=False) \
                if isinstance(pre, layers.IntegerLookup | layers.StringLookup) else []
            value = vocab[0] if vocab else "" if f.dtype == "string" else 0
            probe[k] = np.array([[value]], dtype=object if f.dtype == "string" else
                                np.float32 if f.dtype.startswith("float") else np.int64)
        return probe

    def get_config(self) -> dict:
        raise NotImplementedError(f"'{self.name}': a model holding a FeatureSpace cannot be "
                                  "serialized yet; save the FeatureSpace with its own save()")


__all__ = ["FeatureSpaceLayer"]
