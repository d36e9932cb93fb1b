"""Sorting ops: ``argsort`` (stable, NaN last; optionally only the first ``k`` indices) and
the per-row gather ``take_along_axis`` with its scatter-add gradient ``take_along_axis_grad``.

``kiln.ops`` builds ``sort`` (the values at ``argsort``'s indices) and ``top_k`` (the first
``k`` of the descending order) from them: O(n log n) per row (O(n + k log k) for ``top_k``)
and a gradient that scatters the cotangent back through the same indices (docs/ops.md,
"Sorting").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, fmt, norm_axis, require_int
from kiln.core.ops.registry import MOVEMENT, Example, OpDef, apply, register


def _ex(*inputs, wrt=None, **attrs) -> Example:
    return Example(tuple(inputs), attrs, wrt=wrt)


# ---- argsort -------------------------------------------------------------------------------------
def _argsort_infer(x: TensorType, *, axis: int, k: int | None,
                   descending: bool) -> TensorType:
    if not 0 <= axis < x.ndim:
        raise ValueError(f"argsort: axis {axis} out of range for shape {fmt(x.shape)}")
    if k is None:
        return TensorType(x.shape, "int64")
    n = x.shape[axis]
    if k < 1 or (n is not None and k > n):
        raise ValueError(f"argsort: k must be in [1, {n}] (axis {axis} of {fmt(x.shape)}), "
                         f"received {k}")
    return TensorType(x.shape[:axis] + (k,) + x.shape[axis + 1:], "int64")


def descending_key(x: np.ndarray) -> np.ndarray:
    """Values whose ascending order is ``x``'s descending one, NaN still last: ``-x`` for
    floats, ``~x`` for ints and bools (no overflow at the minimum, where ``-x`` has one)."""
    return -x if x.dtype.kind == "f" else ~x


def _argsort_ref(x, *, axis, k, descending):
    # NumPy's stable sort: equal values keep their order, NaN sorts after every number
    x = np.asarray(x)
    order = np.argsort(descending_key(x) if descending else x, axis=axis,
                       kind="stable").astype(np.int64)
    return order if k is None else np.take(order, np.arange(k), axis=axis)


def _argsort_examples(rng, dt):
    ties = np.array([[3, 1, 2, 1, 3, 0], [2, 2, 2, 1, 1, 1]], dt)
    out = [_ex(rng.normal(size=(3, 5)).astype(dt), axis=1, k=None, descending=False),
           _ex(rng.normal(size=(4, 2, 3)).astype(dt), axis=0, k=None, descending=True),
           _ex(ties, axis=1, k=None, descending=False), _ex(ties, axis=1, k=4, descending=True),
           _ex(ties, axis=0, k=1, descending=False)]
    if np.dtype(dt).kind == "f":
        special = np.array([1.0, np.nan, -np.inf, 0.0, np.nan, np.inf, -0.0], dt)
        out += [_ex(special, axis=0, k=None, descending=False),
                _ex(special, axis=0, k=6, descending=True)]
    return out


register(OpDef("argsort", MOVEMENT, _argsort_infer, _argsort_ref, differentiable=False,
               nondiff_reason="integer output", examples=_argsort_examples))


# ---- take_along_axis and its gradient ------------------------------------------------------------
def _same_rows(op: str, a: tuple, b: tuple, axis: int, what: str) -> tuple:
    """The shape of ``b`` with the dims other than ``axis`` checked against (and filled in
    from) ``a``: they must be equal where both are known."""
    if len(a) != len(b):
        raise ValueError(f"{op}: indices of shape {fmt(b)} must have the rank of {what} "
                         f"{fmt(a)}")
    out = []
    for d, (p, q) in enumerate(zip(a, b)):
        if d != axis and p is not None and q is not None and p != q:
            raise ValueError(f"{op}: indices of shape {fmt(b)} and {what} of shape {fmt(a)} "
                             f"differ on axis {d} (only axis {axis} may)")
        out.append(q if d == axis or q is not None else p)
    return tuple(out)


def _tala_infer(x: TensorType, idx: TensorType, *, axis: int) -> TensorType:
    require_int("take_along_axis", idx)
    if not 0 <= axis < x.ndim:
        raise ValueError(f"take_along_axis: axis {axis} out of range for shape {fmt(x.shape)}")
    return TensorType(_same_rows("take_along_axis", x.shape, idx.shape, axis, "x"), x.dtype)


def _tala_ref(x, idx, *, axis):
    return np.take_along_axis(np.asarray(x), np.asarray(idx).astype(np.int64), axis=axis)


def _tala_grad_infer(ct: TensorType, idx: TensorType, x: TensorType, *,
                     axis: int) -> TensorType:
    _same_rows("take_along_axis_grad", x.shape, idx.shape, axis, "x")
    return TensorType(x.shape, ct.dtype)


def _tala_grad_ref(ct, idx, x, *, axis):
    ct, idx = np.asarray(ct), np.asarray(idx).astype(np.int64)
    out = np.zeros(np.shape(x), ct.dtype)
    n = out.shape[axis]
    if ((idx < -n) | (idx >= n)).any():
        raise IndexError("take_along_axis_grad: index out of range")
    where = list(np.ix_(*[np.arange(d) for d in idx.shape]))
    where[axis] = np.where(idx < 0, idx + n, idx)
    np.add.at(out, tuple(where), ct)
    return out


def _tala_examples(rng, dt):
    # repeated and negative indices: the gradient adds the repeats
    return [_ex(rng.normal(size=(3, 5)).astype(dt),
                np.array([[4, 0, 4], [1, -1, 2], [0, 0, 0]], np.int32), axis=1, wrt=(0,)),
            _ex(rng.normal(size=(4, 2, 3)).astype(dt), rng.integers(-4, 4, (6, 2, 3)),
                axis=0, wrt=(0,))]


def _tala_grad_examples(rng, dt):
    return [_ex(rng.normal(size=(3, 3)).astype(dt),
                np.array([[4, 0, 4], [1, -1, 2], [0, 0, 0]], np.int32),
                np.zeros((3, 5), dt), axis=1, wrt=(0,))]


register(OpDef("take_along_axis", MOVEMENT, _tala_infer, _tala_ref,
               lambda ct, out, x, idx, *, axis: [
                   apply("take_along_axis_grad", ct, idx, x, axis=axis), None],
               examples=_tala_examples))
register(OpDef("take_along_axis_grad", MOVEMENT, _tala_grad_infer, _tala_grad_ref,
               lambda ct, out, g, idx, x, *, axis: [
                   apply("take_along_axis", ct, idx, axis=axis), None, None],
               examples=_tala_grad_examples, shape_only=frozenset({2})))


# ---- builders ------------------------------------------------------------------------------------
def argsort(x: Any, axis: int = -1, k: int | None = None, descending: bool = False) -> Node:
    """Indices (int64) that sort ``x`` along ``axis``, ascending or ``descending``: stable
    (equal values keep their order), NaN last either way; with ``k`` only the first ``k``
    of them (the ``k`` smallest or largest, in order)."""
    x = as_node(x)
    return apply("argsort", x, axis=norm_axis("argsort", axis, x.ndim),
                 k=None if k is None else int(k), descending=bool(descending))


def take_along_axis(x: Any, indices: Any, axis: int) -> Node:
    """``np.take_along_axis`` without broadcasting: ``indices`` has ``x``'s shape but on
    ``axis``; negative indices wrap, out-of-range ones raise IndexError."""
    x, idx = as_node(x), as_node(indices)
    return apply("take_along_axis", x, idx, axis=norm_axis("take_along_axis", axis, x.ndim))


BUILDERS = {"argsort": argsort, "take_along_axis": take_along_axis}
