"""Categorical encodings (Keras' ``output_mode``): ``encode`` in the graph, ``encode_numpy``
for the host-side layers (lookups and hashing on arrays), and the ``CategoryEncoding`` layer.

Semantics (Keras' ``encode_categorical_inputs``): a scalar becomes rank 1; ``one_hot`` adds an
axis of size ``depth`` (replacing a last axis of size 1); ``multi_hot`` and ``count`` reduce
over axis 1 of the one-hot encoding (axis 0 for rank-1 inputs: one sample), giving 1 where an
index occurs / how often it occurs; an index outside ``[0, depth)`` encodes as zeros.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.base import Layer
from kiln.layers.preprocessing._base import check_choice
from kiln.layers.preprocessing.tf_data import TFDataLayer

ENCODE_MODES = ("one_hot", "multi_hot", "count", "tf_idf")


def encode(idx: Node, mode: str, depth: int, dtype: str, weights: Node | None = None) -> Node:
    """Encodes integer indices ``idx`` (graph). ``weights`` multiply the counts (``count``)."""
    if mode == "int":
        return idx if idx.dtype == dtype else K.cast(idx, dtype)
    if idx.ndim == 0:
        idx = K.reshape(idx, (1,))
    if mode == "one_hot":
        if idx.ndim > 1 and idx.shape[-1] == 1:
            idx = K.squeeze(idx, -1)
        return K.one_hot(idx, depth, dtype)
    hot = K.one_hot(idx, depth, dtype)
    axis = 1 if idx.ndim > 1 else 0
    if mode == "multi_hot":
        return K.max(hot, axis=axis)
    if weights is not None:
        hot = hot * K.expand_dims(K.cast(weights, dtype), -1)
    return K.sum(hot, axis=axis)


def encode_numpy(idx: np.ndarray, mode: str, depth: int, dtype: str,
                 weights: np.ndarray | None = None) -> np.ndarray:
    """:func:`encode` on arrays (the host-side layers' path)."""
    idx = np.asarray(idx)
    if mode == "int":
        return idx.astype(dtype)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if mode == "one_hot" and idx.ndim > 1 and idx.shape[-1] == 1:
        idx = idx[..., 0]
    if mode in ("multi_hot", "count") and idx.ndim <= 2:
        return _bincount(idx, mode, depth, dtype, weights)
    hot = (idx[..., None] == np.arange(depth)).astype(dtype)
    if mode == "one_hot":
        return hot
    axis = 1 if idx.ndim > 1 else 0
    if mode == "multi_hot":
        return hot.max(axis=axis)
    if weights is not None:
        hot = hot * np.asarray(weights, dtype)[..., None]
    return hot.sum(axis=axis).astype(dtype)


def _bincount(idx: np.ndarray, mode: str, depth: int, dtype: str,
              weights: np.ndarray | None) -> np.ndarray:
    """multi_hot/count of a rank-1 (one sample) or rank-2 index array by one ``bincount``
    (the one-hot tensor of the general path would be ``rows x length x depth``)."""
    rows = idx.reshape(1, -1) if idx.ndim == 1 else idx
    n, m = rows.shape
    flat = rows.reshape(-1).astype(np.int64)
    valid = (flat >= 0) & (flat < depth)  # the mask and out-of-range indices: zeros
    slots = (np.repeat(np.arange(n, dtype=np.int64), m) * depth + flat)[valid]
    w = None
    if weights is not None and mode == "count":
        w = np.broadcast_to(np.asarray(weights, np.float64), rows.shape).reshape(-1)[valid]
    counts = np.bincount(slots, weights=w, minlength=n * depth).reshape(n, depth)
    if mode == "multi_hot":
        counts = counts > 0
    out = counts.astype(dtype)
    return out[0] if idx.ndim == 1 else out


class CategoryEncoding(TFDataLayer, Layer):
    """Encodes integer category indices in ``[0, num_tokens)`` as dense vectors (Keras'
    ``CategoryEncoding``).

    Args:
        num_tokens: the number of categories (the output depth).
        output_mode: ``"multi_hot"`` (default; also ``"binary"``), ``"one_hot"`` or
            ``"count"`` (see the module docstring for the shapes).
        sparse: must be False.

    Call arguments:
        count_weights: with ``output_mode="count"``, a weight per input index (same shape
            as the inputs), summed instead of 1.

    Indices outside ``[0, num_tokens)`` encode as zeros (they are not checked in a
    compiled model).

    Example:
        >>> kiln.layers.CategoryEncoding(4, "one_hot")(np.array([3, 2, 0, 1]))
    """

    def __init__(self, num_tokens: int | None = None, output_mode: str = "multi_hot",
                 sparse: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        if output_mode == "binary":
            output_mode = "multi_hot"
        check_choice("CategoryEncoding", "output_mode", output_mode, ENCODE_MODES[:3])
        if num_tokens is None or isinstance(num_tokens, bool) or int(num_tokens) < 1:
            raise ValueError(f"CategoryEncoding: num_tokens must be an int >= 1, received "
                             f"num_tokens={num_tokens!r}")
        if sparse:
            raise ValueError("CategoryEncoding: sparse=True is not supported by kiln")
        self.num_tokens = int(num_tokens)
        self.output_mode = output_mode
        self.sparse = False

    def call(self, inputs: Node, count_weights: Node | None = None) -> Node:
        if count_weights is not None and self.output_mode != "count":
            raise ValueError(f"Layer '{self.name}' (CategoryEncoding): count_weights is only "
                             f"used with output_mode='count', not {self.output_mode!r}")
        idx = inputs if inputs.dtype in ("int32", "int64") else K.cast(inputs, "int32")
        return encode(idx, self.output_mode, self.num_tokens, self.dtype, count_weights)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"num_tokens": self.num_tokens, "output_mode": self.output_mode,
                       "sparse": self.sparse})
        return config
