"""Pooling, channels-last (NHWC) like Keras, with TensorFlow padding (see ``window.py``).

Registered ops (on 4-D tensors; the 1-D variants are builders over them): ``max_pool2d`` /
``avg_pool2d`` and their gradients ``max_pool2d_grad(x, out, ct)`` (each window's cotangent
goes to its first maximal element, row-major) and ``avg_pool2d_grad(ct)`` (the transpose of the
average; with "same" padding a window averages over its real elements only).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Dim, Node, TensorType
from kiln.core.ops._rules import as_node, fmt, require_float, same_dtype
from kiln.core.ops.conv_dynamic import dynamic_avg_pool_grad
from kiln.core.ops.registry import NN, Example, OpDef, apply, register
from kiln.core.ops.window import (
    Pair,
    check_attrs,
    check_rank,
    col2im,
    crop_hw,
    int_tuple,
    pad_hw,
    padding_arg,
    rank4,
    same,
    slices,
    window2d,
)

__all__ = ["max_pool2d", "avg_pool2d", "max_pool1d", "avg_pool1d"]


# ---- pooling ------------------------------------------------------------------------------------
def _pool_check(op: str, x: TensorType, pool_size: Any, strides: Any, padding: Any) -> None:
    require_float(op, x)
    rank4(op, "input", x)
    if (not isinstance(pool_size, tuple) or len(pool_size) != 2
            or not all(isinstance(i, int) and i >= 1 for i in pool_size)):
        raise ValueError(f"{op}: pool_size must be a pair of positive ints, received "
                         f"{pool_size!r}")
    check_attrs(op, strides, padding)


def _pool_out(op: str, x_shape: tuple, pool_size: Pair, strides: Pair,
              padding: str) -> tuple[Dim, Dim]:
    try:
        (oh, ow), _ = window2d(x_shape[1:3], pool_size, strides, (1, 1), padding, op=op,
                                 what="pool")
    except ValueError as exc:
        raise ValueError(f"{exc}; input {fmt(x_shape)}, pool_size {pool_size}") from None
    return oh, ow


def _pool_infer(name: str):
    def infer(x: TensorType, *, pool_size: Pair, strides: Pair, padding: str) -> TensorType:
        _pool_check(name, x, pool_size, strides, padding)
        oh, ow = _pool_out(name, x.shape, pool_size, strides, padding)
        return TensorType((x.shape[0], oh, ow, x.shape[3]), x.dtype)
    return infer


def _max_pool_ref(x, *, pool_size, strides, padding):
    x = np.asarray(x)
    (oh, ow), pads = window2d(x.shape[1:3], pool_size, strides, (1, 1), padding)
    xp = pad_hw(x, pads, -np.inf)
    out = None
    for s in slices(oh, ow, pool_size, strides, (1, 1)):
        out = xp[s].copy() if out is None else np.maximum(out, xp[s])
    return out.astype(x.dtype, copy=False)


def _counts(hw: Pair, pool_size: Pair, strides: Pair, padding: str) -> np.ndarray:
    """(OH, OW, 1): the number of real (unpadded) input elements in each window."""
    (oh, ow), pads = window2d(hw, pool_size, strides, (1, 1), padding)
    assert oh is not None and ow is not None  # hw is static
    ones = pad_hw(np.ones((1, hw[0], hw[1], 1)), pads)
    total = np.zeros((1, oh, ow, 1))
    for s in slices(oh, ow, pool_size, strides, (1, 1)):
        total += ones[s]
    return total[0]


def _avg_pool_ref(x, *, pool_size, strides, padding):
    x = np.asarray(x)
    (oh, ow), pads = window2d(x.shape[1:3], pool_size, strides, (1, 1), padding)
    xp = pad_hw(x, pads)
    total = sum(xp[s] for s in slices(oh, ow, pool_size, strides, (1, 1)))
    cnt = _counts(x.shape[1:3], pool_size, strides, padding).astype(x.dtype)
    return (total / cnt).astype(x.dtype, copy=False)


def _static_hw(op: str, x: Node) -> Pair:
    if x.shape[1] is None or x.shape[2] is None:
        raise ValueError(f"{op}: the gradient needs static spatial dims, received input "
                         f"{fmt(x.shape)}")
    return (x.shape[1], x.shape[2])


def _max_pool_vjp(ct, out, x, *, pool_size, strides, padding):
    return [apply("max_pool2d_grad", x, out, ct, pool_size=pool_size, strides=strides,
                  padding=padding)]


def _avg_pool_vjp(ct, out, x, *, pool_size, strides, padding):
    if x.shape[1] is None or x.shape[2] is None:  # a sequence of unknown length
        return [dynamic_avg_pool_grad(ct, x, pool_size=pool_size, strides=strides,
                                      padding=padding)]
    return [apply("avg_pool2d_grad", ct, input_shape=_static_hw("avg_pool2d", x),
                  pool_size=pool_size, strides=strides, padding=padding)]


def _max_grad_infer(x: TensorType, out: TensorType, ct: TensorType, *, pool_size: Pair,
                    strides: Pair, padding: str) -> TensorType:
    op = "max_pool2d_grad"
    _pool_check(op, x, pool_size, strides, padding)
    same_dtype(op, x, out, ct)
    oh, ow = _pool_out(op, x.shape, pool_size, strides, padding)
    want = (x.shape[0], oh, ow, x.shape[3])
    for what, t in (("pooled output", out), ("cotangent", ct)):
        if t.ndim != 4 or not all(same(a, b) for a, b in zip(t.shape, want)):
            raise ValueError(f"{op}: {what} of shape {fmt(t.shape)} does not match the pooled "
                             f"shape {fmt(want)} of input {fmt(x.shape)}")
    return x


def _max_grad_ref(x, out, ct, *, pool_size, strides, padding):
    """Routes each window's cotangent to its first maximal element (row-major in the window)."""
    x, out, ct = np.asarray(x), np.asarray(out), np.asarray(ct)
    (oh, ow), pads = window2d(x.shape[1:3], pool_size, strides, (1, 1), padding)
    xp = pad_hw(x, pads, -np.inf)
    dx = np.zeros(xp.shape, dtype=ct.dtype)
    found = np.zeros(out.shape, dtype=bool)
    for s in slices(oh, ow, pool_size, strides, (1, 1)):
        hit = (xp[s] == out) & ~found
        dx[s] += np.where(hit, ct, 0)
        found |= hit
    return crop_hw(dx, pads)


def _avg_grad_infer(ct: TensorType, *, input_shape: Pair, pool_size: Pair, strides: Pair,
                    padding: str) -> TensorType:
    op = "avg_pool2d_grad"
    _pool_check(op, ct, pool_size, strides, padding)
    if (not isinstance(input_shape, tuple) or len(input_shape) != 2
            or not all(isinstance(i, int) and i >= 1 for i in input_shape)):
        raise ValueError(f"{op}: input_shape must be a static (H, W), received {input_shape!r}")
    oh, ow = _pool_out(op, (None,) + input_shape + (None,), pool_size, strides, padding)
    if not (same(ct.shape[1], oh) and same(ct.shape[2], ow)):
        raise ValueError(f"{op}: pooling an input of spatial size {input_shape} gives ({oh}, "
                         f"{ow}), but the cotangent has shape {fmt(ct.shape)}")
    return TensorType((ct.shape[0],) + input_shape + (ct.shape[3],), ct.dtype)


def _avg_grad_ref(ct, *, input_shape, pool_size, strides, padding):
    ct = np.asarray(ct)
    (oh, ow), pads = window2d(input_shape, pool_size, strides, (1, 1), padding)
    per = ct / _counts(input_shape, pool_size, strides, padding).astype(ct.dtype)
    cols = np.broadcast_to(per[:, :, :, None, None, :],
                           per.shape[:3] + tuple(pool_size) + per.shape[3:])
    padded = (input_shape[0] + sum(pads[0]), input_shape[1] + sum(pads[1]))
    dx = col2im(cols, padded, pads, oh, ow, pool_size, strides, (1, 1))
    return dx.astype(ct.dtype, copy=False)


def _avg_grad_vjp(g, out, ct, *, input_shape, pool_size, strides, padding):
    # avg_pool2d is linear and avg_pool2d_grad is its transpose, so this is exact.
    return [apply("avg_pool2d", g, pool_size=pool_size, strides=strides, padding=padding)]


_POOL_CASES = [  # x shape, pool_size, strides, padding
    ((2, 5, 5, 2), (2, 2), (2, 2), "valid"),
    ((2, 5, 5, 2), (3, 3), (2, 2), "same"),
    ((1, 4, 5, 3), (2, 3), (1, 1), "same"),
    ((1, 5, 4, 2), (3, 2), (1, 2), "valid"),
    ((2, 5, 3, 2), (2, 2), (2, 2), "same"),  # windows tile the input but the last overruns it
]


def _distinct(rng, shape, dt):
    """Values at least 0.1 apart, so no window's maximum is near a tie for finite differences."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.1 - 0.05 * n).astype(dt)


def _pool_examples(rng, dt):
    return [Example((_distinct(rng, xs, dt),),
                    {"pool_size": p, "strides": s, "padding": pad}, fd_eps=1e-3)
            for xs, p, s, pad in _POOL_CASES]


def _max_grad_examples(rng, dt):
    out = []
    for xs, p, s, pad in _POOL_CASES:
        attrs = {"pool_size": p, "strides": s, "padding": pad}
        x = _distinct(rng, xs, dt)
        y = _max_pool_ref(x, **attrs)
        out.append(Example((x, y, rng.normal(size=y.shape).astype(dt)), attrs, wrt=()))
    return out


def _avg_grad_examples(rng, dt):
    out = []
    for xs, p, s, pad in _POOL_CASES:
        attrs = {"pool_size": p, "strides": s, "padding": pad}
        y = _avg_pool_ref(np.zeros(xs), **attrs)
        out.append(Example((rng.normal(size=y.shape).astype(dt),),
                           dict(attrs, input_shape=xs[1:3])))
    return out


register(OpDef("max_pool2d", NN, _pool_infer("max_pool2d"), _max_pool_ref, _max_pool_vjp,
               examples=_pool_examples, doc="2-D max pooling, NHWC; 'same' pads with -inf"))
register(OpDef("avg_pool2d", NN, _pool_infer("avg_pool2d"), _avg_pool_ref, _avg_pool_vjp,
               examples=_pool_examples,
               doc="2-D average pooling, NHWC; 'same' averages over the real elements only"))
register(OpDef("max_pool2d_grad", NN, _max_grad_infer, _max_grad_ref, differentiable=False,
               examples=_max_grad_examples,
               nondiff_reason="second derivatives of max pooling are not implemented",
               doc="gradient of max_pool2d: routes each cotangent to its window's first max"))
register(OpDef("avg_pool2d_grad", NN, _avg_grad_infer, _avg_grad_ref, _avg_grad_vjp,
               examples=_avg_grad_examples,
               doc="gradient of avg_pool2d (its transpose)"))


# ---- builders -----------------------------------------------------------------------------------
def _pool2d(op: str, x: Any, pool_size: Any, strides: Any, padding: str) -> Node:
    x = as_node(x)
    ps = int_tuple(op, "pool_size", pool_size, 2)
    st = ps if strides is None else int_tuple(op, "strides", strides, 2)
    return apply(op, x, pool_size=ps, strides=st, padding=padding_arg(op, padding))


def max_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """2-D max pooling, channels-last.

    Args:
        x: input of shape (batch, height, width, channels).
        pool_size: int or pair.
        strides: int or pair; defaults to ``pool_size``.
        padding: "valid" or "same" (padding never wins the max).

    Returns:
        A tensor of shape (batch, out_h, out_w, channels).

    Example:
        >>> y = kiln.ops.max_pool2d(x, 2)   # (None, 28, 28, 8) -> (None, 14, 14, 8)
    """
    return _pool2d("max_pool2d", x, pool_size, strides, padding)


def avg_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """2-D average pooling, channels-last; with "same", averages over real elements only.

    Args:
        x: input of shape (batch, height, width, channels).
        pool_size: int or pair.
        strides: int or pair; defaults to ``pool_size``.
        padding: "valid" or "same".

    Returns:
        A tensor of shape (batch, out_h, out_w, channels).

    Example:
        >>> y = kiln.ops.avg_pool2d(x, 3, strides=2, padding="same")
    """
    return _pool2d("avg_pool2d", x, pool_size, strides, padding)


def _pool1d(op: str, x: Any, pool_size: Any, strides: Any, padding: str) -> Node:
    from kiln.core.ops.movement import expand_dims, squeeze

    x = as_node(x)
    check_rank(f"{op[:-2]}1d", "input", x, 3)
    (ps,) = int_tuple(f"{op[:-2]}1d", "pool_size", pool_size, 1)
    (st,) = (ps,) if strides is None else int_tuple(f"{op[:-2]}1d", "strides", strides, 1)
    y = apply(op, expand_dims(x, 1), pool_size=(1, ps), strides=(1, st),
              padding=padding_arg(f"{op[:-2]}1d", padding))
    return squeeze(y, 1)


def max_pool1d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """1-D max pooling of (batch, length, channels) (built on max_pool2d).

    Example:
        >>> y = kiln.ops.max_pool1d(x, 2)   # (None, 10, 4) -> (None, 5, 4)
    """
    return _pool1d("max_pool2d", x, pool_size, strides, padding)


def avg_pool1d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """1-D average pooling of (batch, length, channels) (built on avg_pool2d).

    Example:
        >>> y = kiln.ops.avg_pool1d(x, 3, strides=1, padding="same")
    """
    return _pool1d("avg_pool2d", x, pool_size, strides, padding)
