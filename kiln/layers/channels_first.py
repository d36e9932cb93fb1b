"""``data_format="channels_first"`` for the spatial layers (convolutions, pooling, padding,
cropping, up-sampling, spatial dropout, Flatten), as Keras has it.

kiln's kernels compute channels-last (docs/layers.md, "channels_first"). A layer made with
``data_format="channels_first"`` keeps that setting (its config, its build shape and the
shapes it takes and returns are Keras'), and :class:`kiln.layers.Layer.__call__` runs it
between two transposes: ``(batch, channels, *spatial)`` -> ``(batch, *spatial, channels)``,
the channels-last layer, and back when the output keeps the input's rank (a global pooling
or a Flatten returns what Keras returns: Flatten flattens in channels-last order, as
Keras' does, so weights trained in either layout fit the same Dense). The graph passes
merge a transpose pair that cancels. Weights have the same shapes in both layouts.
"""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node


def _active(layer: Any, x: Any) -> bool:
    return (getattr(layer, "data_format", None) == "channels_first" and isinstance(x, Node)
            and len(x.shape) > 2)


def to_last(layer: Any, inputs: Any) -> Any:
    """``inputs`` as the channels-last layer takes them (unchanged unless channels-first)."""
    if not _active(layer, inputs):
        return inputs
    rank = len(inputs.shape)
    return K.transpose(inputs, (0, *range(2, rank), 1))


def back(layer: Any, outputs: Any, inputs: Any, inner: Any) -> Any:
    """The channels-last layer's ``outputs`` in the caller's layout; records the build shape
    as the caller gave it (what Keras writes in the build config)."""
    if inner is inputs:
        return outputs
    if tuple(layer.build_input_shape or ()) == tuple(inner.shape):
        layer.build_input_shape = tuple(inputs.shape)
    if isinstance(outputs, Node) and len(outputs.shape) == len(inputs.shape):
        rank = len(outputs.shape)
        return K.transpose(outputs, (0, rank - 1, *range(1, rank - 1)))
    return outputs


def build_shape(layer: Any, shape: Any) -> Any:
    """A build config's input shape (the caller's layout) as ``build`` takes it."""
    if isinstance(shape, dict):
        return shape
    shape = tuple(shape)
    if getattr(layer, "data_format", None) == "channels_first" and len(shape) > 2:
        return (shape[0], *shape[2:], shape[1])
    return shape
