"""A convolution + bias (+ activation) -> max-pooling block and its float64 reference,
shared by the epilogue tests of tests/core/backends (importable as ``conv_cases``: pytest
puts ``tests/`` on the path through its conftest)."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.core.ops import all_ops
from kiln.core.ops.registry import apply

ACTIVATIONS = {None: lambda h: h, "relu": lambda h: kiln.ops.relu(h),
               "sigmoid": lambda h: kiln.ops.sigmoid(h), "tanh": lambda h: kiln.ops.tanh(h)}
REFERENCES = {None: lambda r: r, "relu": lambda r: np.maximum(r, 0),
              "sigmoid": lambda r: 1 / (1 + np.exp(-r)), "tanh": np.tanh}


def conv_block(shape: tuple, k: np.ndarray, bias: np.ndarray, activation: str | None,
               attrs: dict):
    """``max_pool2d(activation(conv2d(x, k) + bias), 2, 2)`` as a CPU function of ``x``."""
    x = kiln.placeholder((None,) + tuple(shape[1:]))
    h = apply("conv2d", x, kiln.ops.constant(k), **attrs) + kiln.Variable(bias)
    return kiln.function([x], kiln.ops.max_pool2d(ACTIVATIONS[activation](h), 2, 2),
                         backend="cpu")


def conv_block_reference(x: np.ndarray, k: np.ndarray, bias: np.ndarray,
                         activation: str | None, attrs: dict) -> tuple[np.ndarray, float]:
    """The block in float64, and the largest magnitude of ``conv + bias`` (the scale of a
    Winograd convolution's error)."""
    ops = all_ops()
    pre = ops["conv2d"].ref(x.astype("float64"), k.astype("float64"), **attrs) + bias
    out = ops["max_pool2d"].ref(REFERENCES[activation](pre), pool_size=(2, 2),
                                strides=(2, 2), padding="valid")
    return out, float(np.nanmax(np.abs(pre)))
