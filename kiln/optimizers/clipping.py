"""Gradient clipping as graph nodes (Keras 3's ``clipnorm``, ``global_clipnorm`` rules)."""

from __future__ import annotations

from collections.abc import Sequence

from kiln import ops
from kiln.core import Node


def clip_by_norm(g: Node, clipnorm: float) -> Node:
    """``g`` scaled so that its L2 norm is at most ``clipnorm``."""
    l2sum = ops.sum(ops.square(g), keepdims=True)
    pred = l2sum > 0.0
    # Two-sided where: no NaN from sqrt's gradient at 0 (Keras's trick, kept for parity).
    l2sum_safe = ops.where(pred, l2sum, ops.ones_like(l2sum))
    l2norm = ops.where(pred, ops.sqrt(l2sum_safe), l2sum)
    return g * clipnorm / ops.maximum(l2norm, clipnorm)


def global_norm(values: Sequence[Node]) -> Node:
    """The L2 norm of all ``values`` together (computed in float64 if any is float64)."""
    dtype = "float64" if any(v.dtype == "float64" for v in values) else "float32"
    total: Node | None = None
    for v in values:
        s = ops.cast(ops.sum(ops.square(v)), dtype)
        total = s if total is None else total + s
    assert total is not None
    return ops.sqrt(total)


def clip_by_global_norm(values: Sequence[Node], clip_norm: float) -> list[Node]:
    """Scales ``values`` so that their global norm is at most ``clip_norm`` (NaN if the norm
    is not finite, like Keras)."""
    norm = global_norm(values)
    scale = clip_norm * ops.minimum(1.0 / norm, 1.0 / clip_norm)
    scale = scale + (norm - norm)
    return [v * ops.cast(scale, v.dtype) for v in values]

