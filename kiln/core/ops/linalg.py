"""Linear algebra: matmul with NumPy batch-dimension broadcasting."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_nodes, broadcast_shapes, fmt, same_dtype
from kiln.core.ops.registry import LINALG, Example, OpDef, apply, register


def _infer(a: TensorType, b: TensorType) -> TensorType:
    dtype = same_dtype("matmul", a, b)
    if dtype == "bool":
        raise TypeError("matmul: expected numeric operands, received bool")
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"matmul: operands must have rank >= 2, received {fmt(a.shape)} and "
                         f"{fmt(b.shape)}")
    k1, k2 = a.shape[-1], b.shape[-2]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ValueError(f"matmul: cannot multiply {fmt(a.shape)} by {fmt(b.shape)}: inner "
                         f"dimensions {k1} and {k2} differ")
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (a.shape[-2], b.shape[-1]), dtype)


def swap_last(x: Node) -> Node:
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return apply("transpose", x, perm=perm)


def _vjp(ct, out, a, b):
    if b.ndim == 2 and a.ndim > 2 and a.shape[-1] is not None and ct.shape[-1] is not None:
        # the matrix's gradient as ONE GEMM over the folded batch axes, not a batch of
        # products summed afterwards (a Dense on sequences, an RNN's input projection)
        a2 = apply("reshape", a, shape=(-1, a.shape[-1]))
        c2 = apply("reshape", ct, shape=(-1, ct.shape[-1]))
        return [apply("matmul", ct, swap_last(b)), apply("matmul", swap_last(a2), c2)]
    return [apply("matmul", ct, swap_last(b)), apply("matmul", swap_last(a), ct)]


def _examples(rng, dt):
    shapes = [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((2, 1, 3, 4), (3, 4, 2)), ((1, 4), (4, 1))]
    return [Example((rng.normal(size=s1).astype(dt), rng.normal(size=s2).astype(dt)))
            for s1, s2 in shapes]


register(OpDef("matmul", LINALG, _infer, lambda a, b: np.matmul(a, b), _vjp,
               examples=_examples))


def matmul(a: Any, b: Any) -> Node:
    """Matrix product with NumPy semantics (batch dims broadcast; 1-D operands are vectors).

    Example:
        >>> y = kiln.ops.matmul(x, w)   # (None, 784) @ (784, 512) -> (None, 512)
    """
    from kiln.core.ops.movement import expand_dims, squeeze

    x, y = as_nodes("matmul", a, b)
    squeeze_axes = []
    if x.ndim == 1:
        x = expand_dims(x, 0)
        squeeze_axes.append(-2)
    if y.ndim == 1:
        y = expand_dims(y, 1)
        squeeze_axes.append(-1)
    out = apply("matmul", x, y)
    if squeeze_axes:
        out = squeeze(out, [a % out.ndim for a in squeeze_axes])
    return out
