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
    if dt == "float32":  # a product kiln's Dense kernel takes (its narrow variant, a row tail;
        # AVX-512 hosts: kiln/core/backends/cpu/gemm/native_matmul.py); its wide blocks are tested
        # in tests/core/backends/test_native_matmul.py (here every backend runs each example,
        # the CUDA simulator one thread per output)
        shapes.append(((129, 5), (5, 10)))
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


# ---- gemm: alpha * (a @ b) + beta * c ---------------------------------------------------------
# Not built by user code: the ``gemm`` pass (kiln/core/passes/gemm.py) writes it for a matmul
# scaled into a sum with a tensor of its shape (an optimizer's ``momentum * v - lr * g``, a
# recurrent ``x @ Wx + h @ Wh``), so that BLAS adds the product into ``c`` as it computes it
# (docs/architecture.md, "Passes").
def _gemm_infer(a: TensorType, b: TensorType, c: TensorType, alpha: TensorType,
                beta: TensorType) -> TensorType:
    dtype = same_dtype("gemm", a, b, c, alpha, beta)
    if dtype not in ("float32", "float64"):
        raise TypeError(f"gemm: expected float32 or float64 operands, received {dtype}")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gemm: a and b must be matrices, received {fmt(a.shape)} and "
                         f"{fmt(b.shape)}")
    if alpha.shape != () or beta.shape != ():
        raise ValueError(f"gemm: alpha and beta must be scalars, received {fmt(alpha.shape)} "
                         f"and {fmt(beta.shape)}")
    k1, k2 = a.shape[1], b.shape[0]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ValueError(f"gemm: cannot multiply {fmt(a.shape)} by {fmt(b.shape)}: inner "
                         f"dimensions {k1} and {k2} differ")
    shape = (a.shape[0], b.shape[1])
    if c.ndim != 2 or any(x is not None and y is not None and x != y
                          for x, y in zip(c.shape, shape)):
        raise ValueError(f"gemm: c must have the product's shape {fmt(shape)}, received "
                         f"{fmt(c.shape)}")
    return TensorType(tuple(x if x is not None else y for x, y in zip(shape, c.shape)), dtype)


def _gemm_ref(a, b, c, alpha, beta):
    return np.matmul(a, b) * alpha + c * beta


def _gemm_vjp(ct, out, a, b, c, alpha, beta):
    scaled = apply("mul", ct, alpha)
    product = apply("matmul", a, b)
    return [apply("matmul", scaled, swap_last(b)), apply("matmul", swap_last(a), scaled),
            apply("mul", ct, beta),
            apply("sum", apply("mul", ct, product), axis=(0, 1), keepdims=False),
            apply("sum", apply("mul", ct, c), axis=(0, 1), keepdims=False)]


def _gemm_examples(rng, dt):
    def arr(*shape):
        return np.asarray(rng.normal(size=shape)).astype(dt)

    return [Example((arr(3, 4), arr(4, 5), arr(3, 5), arr(), arr())),
            Example((arr(7, 1), arr(1, 3), arr(7, 3), np.asarray(-0.5, dt),
                     np.asarray(0.9, dt))),
            Example((np.ascontiguousarray(arr(9, 33).T), arr(9, 6), arr(33, 6),
                     np.asarray(-0.01, dt),
                     np.asarray(1.0, dt)))]


register(OpDef("gemm", LINALG, _gemm_infer, _gemm_ref, _gemm_vjp, examples=_gemm_examples))
