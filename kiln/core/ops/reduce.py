"""Reductions over axes, with ``keepdims``: sum, mean, max, min, prod, argmax, argmin, logsumexp.

``axis`` attributes are normalized to a sorted tuple of non-negative ints (None means all).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, norm_axes, norm_axis, require_float
from kiln.core.ops.registry import REDUCE, SHAPE, Example, OpDef, apply, register


def reduced_shape(shape: tuple, axes: tuple[int, ...], keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


# Reductions with no identity element: over an empty axis they have no value (NumPy raises).
NO_IDENTITY = frozenset({"max", "min", "logsumexp"})


def _infer(name: str, numeric_only: bool = True, need_float: bool = False):
    def infer(x: TensorType, *, axis: tuple[int, ...], keepdims: bool) -> TensorType:
        if need_float:
            require_float(name, x)
        elif numeric_only and x.dtype == "bool":
            raise TypeError(f"{name}: expected a numeric tensor, received bool")
        for a in axis:
            if not 0 <= a < x.ndim:
                raise ValueError(f"{name}: axis {a} out of range for shape {x.shape}")
            if x.shape[a] == 0 and name in NO_IDENTITY:
                raise ValueError(f"{name}: cannot reduce axis {a} of shape {x.shape}: it is "
                                 f"empty, and {name} has no value for no elements")
        return TensorType(reduced_shape(x.shape, axis, keepdims), x.dtype)
    return infer


def _ref(fn):
    def ref(x, *, axis, keepdims):
        x = np.asarray(x)
        return np.asarray(fn(x, axis=axis, keepdims=keepdims)).astype(x.dtype)
    return ref


def expand_back(ct: Node, x: Node, axis: tuple[int, ...], keepdims: bool) -> Node:
    """Reinserts the reduced axes (as size 1) so that ``ct`` broadcasts against ``x``."""
    if keepdims or not axis:
        return ct
    return apply("expand_dims", ct, axis=axis)


def _bcast(ct: Node, x: Node, axis, keepdims) -> Node:
    return apply("broadcast_like", expand_back(ct, x, axis, keepdims), x)


def _sum_vjp(ct, out, x, *, axis, keepdims):
    return [_bcast(ct, x, axis, keepdims)]


def _mean_vjp(ct, out, x, *, axis, keepdims):
    count = apply("size_of", x, axis=axis)
    return [_bcast(ct, x, axis, keepdims) / count]


def _extreme_vjp(ct, out, x, *, axis, keepdims):
    out_b = _bcast(out, x, axis, keepdims)
    mask = apply("cast", apply("equal", x, out_b), dtype=x.dtype)
    ties = apply("sum", mask, axis=axis, keepdims=True)
    return [_bcast(ct, x, axis, keepdims) * mask / ties]


def _prod_vjp(ct, out, x, *, axis, keepdims):
    return [_bcast(ct, x, axis, keepdims) * _bcast(out, x, axis, keepdims) / x]


def _lse_vjp(ct, out, x, *, axis, keepdims):
    return [_bcast(ct, x, axis, keepdims) * apply("exp", x - _bcast(out, x, axis, keepdims))]


def _lse_ref(x, *, axis, keepdims):
    x = np.asarray(x)
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    s = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        s = np.squeeze(s, axis=axis)
    return s.astype(x.dtype)


def _examples(positive: bool = False):
    def examples(rng: np.random.Generator, dtype: str) -> list[Example]:
        out = []
        for shape, axis, keepdims in [((3, 4), (1,), False), ((3, 4), (0,), True),
                                      ((2, 3, 4), (0, 2), False), ((2, 3, 4), (0, 1, 2), False),
                                      ((5,), (0,), True)]:
            x = rng.uniform(0.5, 1.5, size=shape) if positive else rng.normal(size=shape)
            out.append(Example((x.astype(dtype),), {"axis": axis, "keepdims": keepdims}))
        return out
    return examples


for _name, _fn, _vjp, _pos in [("sum", np.sum, _sum_vjp, False),
                              ("mean", np.mean, _mean_vjp, False),
                              ("max", np.max, _extreme_vjp, False),
                              ("min", np.min, _extreme_vjp, False),
                              ("prod", np.prod, _prod_vjp, True)]:
    register(OpDef(_name, REDUCE, _infer(_name), _ref(_fn), _vjp, examples=_examples(_pos)))
register(OpDef("logsumexp", REDUCE, _infer("logsumexp", need_float=True), _lse_ref, _lse_vjp,
               examples=_examples()))


def _arg_infer(name: str):
    def infer(x: TensorType, *, axis: int, keepdims: bool) -> TensorType:
        if x.dtype == "bool":
            raise TypeError(f"{name}: expected a numeric tensor, received bool")
        if not 0 <= axis < x.ndim:
            raise ValueError(f"{name}: axis {axis} out of range for shape {x.shape}")
        return TensorType(reduced_shape(x.shape, (axis,), keepdims), "int64")
    return infer


def _arg_ref(fn):
    def ref(x, *, axis, keepdims):
        r = fn(np.asarray(x), axis=axis)
        return np.expand_dims(r, axis).astype(np.int64) if keepdims else r.astype(np.int64)
    return ref


def _arg_examples(rng, dtype):
    return [Example((rng.normal(size=(3, 4)).astype(dtype),), {"axis": 1, "keepdims": False}),
            Example((rng.normal(size=(2, 3, 4)).astype(dtype),), {"axis": 0, "keepdims": True})]


register(OpDef("argmax", REDUCE, _arg_infer("argmax"), _arg_ref(np.argmax), differentiable=False,
               examples=_arg_examples, nondiff_reason="integer output"))
register(OpDef("argmin", REDUCE, _arg_infer("argmin"), _arg_ref(np.argmin), differentiable=False,
               examples=_arg_examples, nondiff_reason="integer output"))


# size_of: the number of elements over some axes, as a scalar of x's dtype, known at run time
# (the batch dimension may be None). Constant folding turns it into a constant when static.
def _size_infer(x: TensorType, *, axis: tuple[int, ...]) -> TensorType:
    return TensorType((), x.dtype if x.dtype != "bool" else "float32")


def _size_ref(x, *, axis):
    x = np.asarray(x)
    n = int(np.prod([x.shape[a] for a in axis], dtype=np.int64))
    return np.asarray(n, dtype=x.dtype if x.dtype != bool else np.float32)


register(OpDef("size_of", SHAPE, _size_infer, _size_ref, differentiable=False,
               nondiff_reason="depends only on the shape",
               examples=lambda rng, dtype: [Example((np.zeros((3, 4), dtype),), {"axis": (0, 1)}),
                                            Example((np.zeros((3, 4), dtype),), {"axis": (1,)})],
               shape_only=frozenset({0})))


# ---- builders -------------------------------------------------------------------------------
def _builder(name: str):
    def f(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
        x = as_node(x)
        return apply(name, x, axis=norm_axes(name, axis, x.ndim), keepdims=bool(keepdims))
    f.__name__ = name
    f.__doc__ = (f"``{name}`` of ``x`` over ``axis`` (an int, a tuple, or None for all axes); "
                 "``keepdims`` keeps the reduced axes with size 1.")
    return f


def _arg_builder(name: str):
    def f(x: Any, axis: int = -1, keepdims: bool = False) -> Node:
        x = as_node(x)
        return apply(name, x, axis=norm_axis(name, axis, x.ndim), keepdims=bool(keepdims))
    f.__name__ = name
    f.__doc__ = f"Index of the {name[3:]}imum along ``axis`` (int64)."
    return f


BUILDERS = {n: _builder(n) for n in ["sum", "mean", "max", "min", "prod", "logsumexp"]}
BUILDERS |= {n: _arg_builder(n) for n in ["argmax", "argmin"]}


def size_of(x: Any, axis: Any = None) -> Node:
    """The number of elements of ``x`` over ``axis`` as a scalar tensor (run-time shapes)."""
    x = as_node(x)
    return apply("size_of", x, axis=norm_axes("size_of", axis, x.ndim))
