"""Movement ops: reshape, transpose, broadcasting, expand/squeeze, concatenate, slice, pad,
take (gather) and its scatter-add gradient, one_hot. ``stack`` and ``split`` are built from them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType, canonical_dtype
from kiln.core.ops._rules import (
    as_node,
    as_nodes,
    broadcast_shapes,
    fmt,
    norm_axes,
    norm_axis,
    require_int,
    same_dtype,
    static_prod,
)
from kiln.core.ops.registry import MOVEMENT, Example, OpDef, apply, register


def _ex(*inputs, wrt=None, **attrs) -> Example:
    return Example(tuple(inputs), attrs, wrt=wrt)


# ---- reshape ------------------------------------------------------------------------------------
def _reshape_infer(x: TensorType, *, shape: tuple) -> TensorType:
    if sum(1 for d in shape if d == -1) > 1:
        raise ValueError(f"reshape: at most one -1 allowed in target shape {shape}")
    size = x.size
    known = static_prod([d for d in shape if d != -1])
    if size is not None:
        if -1 in shape:
            if not known or size % known:
                raise ValueError(f"reshape: cannot reshape {fmt(x.shape)} ({size} elements) "
                                 f"into {shape}")
            shape = tuple(size // known if d == -1 else d for d in shape)
        elif known != size:
            raise ValueError(f"reshape: cannot reshape {fmt(x.shape)} ({size} elements) into "
                             f"{fmt(shape)} ({known} elements)")
        return TensorType(shape, x.dtype)
    return TensorType(tuple(None if d == -1 else d for d in shape), x.dtype)


def _reshape_vjp(ct, out, x, *, shape):
    return [reshape_to(ct, x)]


def reshape_to(ct: Node, x: Node) -> Node:
    """Reshapes ``ct`` to the (possibly partly unknown) shape of ``x``."""
    unknown = sum(1 for d in x.shape if d is None)
    if unknown <= 1:
        return apply("reshape", ct, shape=tuple(-1 if d is None else d for d in x.shape))
    return apply("reshape_like", ct, x)


register(OpDef("reshape", MOVEMENT, _reshape_infer, lambda x, *, shape: np.reshape(x, shape),
               _reshape_vjp, examples=lambda rng, dt: [
                   _ex(rng.normal(size=(3, 4)).astype(dt), shape=(4, 3)),
                   _ex(rng.normal(size=(2, 3, 4)).astype(dt), shape=(-1, 4)),
                   _ex(rng.normal(size=(6,)).astype(dt), shape=(1, 6, 1))],
               view=lambda node, ins, shape: ins[0].reshape(shape)))


def _reshape_like_infer(x: TensorType, like: TensorType) -> TensorType:
    if x.size is not None and like.size is not None and x.size != like.size:
        raise ValueError(f"reshape_like: cannot reshape {fmt(x.shape)} into {fmt(like.shape)}")
    return TensorType(like.shape, x.dtype)


register(OpDef("reshape_like", MOVEMENT, _reshape_like_infer,
               lambda x, like: np.reshape(x, np.shape(like)),
               lambda ct, out, x, like: [reshape_to(ct, x), None],
               examples=lambda rng, dt: [_ex(rng.normal(size=(3, 4)).astype(dt),
                                             np.zeros((2, 6), dt), wrt=(0,))],
               view=lambda node, ins, shape: ins[0].reshape(shape),
               shape_only=frozenset({1})))


# ---- transpose ----------------------------------------------------------------------------------
def _transpose_infer(x: TensorType, *, perm: tuple) -> TensorType:
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose: perm {perm} is not a permutation of the axes of "
                         f"{fmt(x.shape)}")
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


register(OpDef("transpose", MOVEMENT, _transpose_infer,
               lambda x, *, perm: np.transpose(x, perm),
               lambda ct, out, x, *, perm: [apply("transpose", ct,
                                                  perm=tuple(int(i) for i in np.argsort(perm)))],
               examples=lambda rng, dt: [_ex(rng.normal(size=(3, 4)).astype(dt), perm=(1, 0)),
                                         _ex(rng.normal(size=(2, 3, 4)).astype(dt),
                                             perm=(2, 0, 1))],
               view=lambda node, ins, shape: ins[0].transpose(node.attrs["perm"])))


# ---- broadcasting -------------------------------------------------------------------------------
def _broadcast_view(node: Node, ins: list, shape: tuple) -> Any:
    """Stride 0 along broadcast dims, decided on the static shapes too (see Layout.broadcast)."""
    return ins[0].broadcast(shape, node.inputs[0].shape, node.shape)


def _bto_infer(x: TensorType, *, shape: tuple) -> TensorType:
    out = broadcast_shapes("broadcast_to", x.shape, shape)
    if out != tuple(shape):
        raise ValueError(f"broadcast_to: cannot broadcast {fmt(x.shape)} to {fmt(shape)}")
    return TensorType(shape, x.dtype)


register(OpDef("broadcast_to", MOVEMENT, _bto_infer,
               lambda x, *, shape: np.broadcast_to(x, shape).copy(),
               lambda ct, out, x, *, shape: [ct],
               examples=lambda rng, dt: [_ex(rng.normal(size=(4,)).astype(dt), shape=(3, 4)),
                                         _ex(rng.normal(size=(3, 1)).astype(dt), shape=(2, 3, 5))],
               view=_broadcast_view))


def _blike_infer(x: TensorType, like: TensorType) -> TensorType:
    out = broadcast_shapes("broadcast_like", x.shape, like.shape)
    if len(out) != like.ndim:
        raise ValueError(f"broadcast_like: cannot broadcast {fmt(x.shape)} to {fmt(like.shape)}")
    return TensorType(tuple(d if d is not None else o for d, o in zip(like.shape, out)), x.dtype)


register(OpDef("broadcast_like", MOVEMENT, _blike_infer,
               lambda x, like: np.broadcast_to(x, np.shape(like)).copy(),
               lambda ct, out, x, like: [ct, None],
               examples=lambda rng, dt: [_ex(rng.normal(size=(4,)).astype(dt),
                                             np.zeros((3, 4), dt), wrt=(0,)),
                                         _ex(np.asarray(rng.normal(), dt), np.zeros((2, 3), dt),
                                             wrt=(0,))],
               view=_broadcast_view, shape_only=frozenset({1})))


# ---- expand_dims / squeeze ----------------------------------------------------------------------
def _expand_infer(x: TensorType, *, axis: tuple) -> TensorType:
    shape = list(x.shape)
    for a in axis:  # sorted, in output positions
        shape.insert(a, 1)
    return TensorType(tuple(shape), x.dtype)


def _squeeze_infer(x: TensorType, *, axis: tuple) -> TensorType:
    for a in axis:
        if x.shape[a] not in (1, None):
            raise ValueError(f"squeeze: cannot squeeze axis {a} of size {x.shape[a]} in "
                             f"{fmt(x.shape)}")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axis), x.dtype)


register(OpDef("expand_dims", MOVEMENT, _expand_infer,
               lambda x, *, axis: np.expand_dims(x, axis),
               lambda ct, out, x, *, axis: [apply("squeeze", ct, axis=axis)],
               examples=lambda rng, dt: [_ex(rng.normal(size=(3, 4)).astype(dt), axis=(1,)),
                                         _ex(rng.normal(size=(3,)).astype(dt), axis=(0, 2))],
               view=lambda node, ins, shape: ins[0].expand_dims(node.attrs["axis"])))
register(OpDef("squeeze", MOVEMENT, _squeeze_infer, lambda x, *, axis: np.squeeze(x, axis),
               lambda ct, out, x, *, axis: [apply("expand_dims", ct, axis=axis)],
               examples=lambda rng, dt: [_ex(rng.normal(size=(3, 1, 4)).astype(dt), axis=(1,)),
                                         _ex(rng.normal(size=(1, 3, 1)).astype(dt),
                                             axis=(0, 2))],
               view=lambda node, ins, shape: ins[0].squeeze(node.attrs["axis"])))


# ---- concatenate --------------------------------------------------------------------------------
def _concat_infer(*xs: TensorType, axis: int) -> TensorType:
    if not xs:
        raise ValueError("concatenate: needs at least one tensor")
    dtype = same_dtype("concatenate", *xs)
    nd = xs[0].ndim
    shapes = " and ".join(fmt(x.shape) for x in xs)
    if any(x.ndim != nd for x in xs) or not 0 <= axis < nd:
        raise ValueError(f"concatenate: cannot join shapes {shapes} along axis {axis}")
    out = []
    for i in range(nd):
        dims = [x.shape[i] for x in xs]
        if i == axis:
            out.append(None if None in dims else sum(d for d in dims if d is not None))
        else:
            known = {d for d in dims if d is not None}
            if len(known) > 1:
                raise ValueError(f"concatenate: shapes {shapes} differ in axis {i} "
                                 f"(only axis {axis} may differ)")
            out.append(known.pop() if known else None)
    return TensorType(tuple(out), dtype)


def _concat_vjp(ct, out, *xs, axis):
    grads, start = [], 0
    for x in xs:
        size = x.shape[axis]
        if size is None:
            raise ValueError("concatenate: gradient needs static sizes along the joined axis")
        spec = tuple((start, start + size, 1) if i == axis else (None, None, None)
                     for i in range(x.ndim))
        grads.append(apply("slice", ct, spec=spec))
        start += size
    return grads


register(OpDef("concatenate", MOVEMENT, _concat_infer,
               lambda *xs, axis: np.concatenate(xs, axis=axis), _concat_vjp,
               examples=lambda rng, dt: [
                   _ex(rng.normal(size=(2, 3)).astype(dt), rng.normal(size=(2, 2)).astype(dt),
                       axis=1),
                   _ex(*(rng.normal(size=(1, 3)).astype(dt) for _ in range(3)), axis=0)]))


# ---- slice --------------------------------------------------------------------------------------
def _slices(spec: tuple) -> tuple[slice, ...]:
    return tuple(slice(*s) for s in spec)


def _slice_infer(x: TensorType, *, spec: tuple) -> TensorType:
    if len(spec) != x.ndim:
        raise ValueError(f"slice: spec has {len(spec)} entries for a tensor of shape "
                         f"{fmt(x.shape)}")
    shape: list[int | None] = []
    for d, s in zip(x.shape, spec):
        if s[2] == 0:
            raise ValueError("slice: step cannot be zero")
        if d is None:
            shape.append(None)
        else:
            shape.append(len(range(*slice(*s).indices(d))))
    return TensorType(tuple(shape), x.dtype)


def _slice_grad_ref(ct, x, *, spec):
    out = np.zeros(np.shape(x), dtype=np.asarray(ct).dtype)
    out[_slices(spec)] = ct
    return out


def _slice_grad_infer(ct: TensorType, x: TensorType, *, spec: tuple) -> TensorType:
    return TensorType(x.shape, ct.dtype)


register(OpDef("slice", MOVEMENT, _slice_infer, lambda x, *, spec: np.asarray(x)[_slices(spec)],
               lambda ct, out, x, *, spec: [apply("slice_grad", ct, x, spec=spec)],
               examples=lambda rng, dt: [
                   _ex(rng.normal(size=(5, 4)).astype(dt), spec=((1, 4, 1), (None, None, 2))),
                   _ex(rng.normal(size=(6,)).astype(dt), spec=((None, None, -2),)),
                   _ex(rng.normal(size=(3, 4)).astype(dt), spec=((-2, None, 1), (0, 3, 1)))],
               view=lambda node, ins, shape: ins[0].slice(node.attrs["spec"])))
register(OpDef("slice_grad", MOVEMENT, _slice_grad_infer, _slice_grad_ref,
               lambda ct, out, g, x, *, spec: [apply("slice", ct, spec=spec), None],
               examples=lambda rng, dt: [
                   _ex(rng.normal(size=(3, 2)).astype(dt), np.zeros((5, 4), dt), wrt=(0,),
                       spec=((1, 4, 1), (None, None, 2)))],
               shape_only=frozenset({1})))


# ---- pad ----------------------------------------------------------------------------------------
def _pad_infer(x: TensorType, *, pads: tuple, value: float) -> TensorType:
    if len(pads) != x.ndim or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ValueError(f"pad: pads {pads} do not fit a tensor of shape {fmt(x.shape)} "
                         "(one non-negative (before, after) pair per axis)")
    return TensorType(tuple(None if d is None else d + lo + hi
                            for d, (lo, hi) in zip(x.shape, pads)), x.dtype)


def _pad_vjp(ct, out, x, *, pads, value):
    spec = tuple((lo, -hi if hi else None, 1) for lo, hi in pads)
    return [apply("slice", ct, spec=spec)]


register(OpDef("pad", MOVEMENT, _pad_infer,
               lambda x, *, pads, value: np.pad(x, pads, constant_values=value), _pad_vjp,
               examples=lambda rng, dt: [_ex(rng.normal(size=(2, 3)).astype(dt),
                                             pads=((1, 0), (2, 1)), value=0.0),
                                         _ex(rng.normal(size=(3,)).astype(dt), pads=((0, 2),),
                                             value=1.5)]))


# ---- take (gather) and scatter-add ---------------------------------------------------------------
def _take_infer(x: TensorType, idx: TensorType, *, axis: int) -> TensorType:
    require_int("take", idx)
    if not 0 <= axis < x.ndim:
        raise ValueError(f"take: axis {axis} out of range for shape {fmt(x.shape)}")
    return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


def _take_grad_infer(ct: TensorType, idx: TensorType, x: TensorType, *, axis: int) -> TensorType:
    return TensorType(x.shape, ct.dtype)


def _take_grad_ref(ct, idx, x, *, axis):
    x_shape = np.shape(x)
    out = np.zeros(x_shape, dtype=np.asarray(ct).dtype)
    idx = np.asarray(idx)
    moved = np.moveaxis(out, axis, 0)  # view
    ct_moved = np.asarray(ct).reshape(x_shape[:axis] + (idx.size,) + x_shape[axis + 1:])
    ct_moved = np.moveaxis(ct_moved, axis, 0)
    np.add.at(moved, idx.reshape(-1), ct_moved)
    return out


def _take_examples(rng, dt):
    return [_ex(rng.normal(size=(5, 3)).astype(dt), np.array([[0, 4], [2, 0]], np.int32),
                axis=0, wrt=(0,)),
            _ex(rng.normal(size=(2, 4, 3)).astype(dt), np.array([3, 1, 1], np.int64), axis=1,
                wrt=(0,))]


register(OpDef("take", MOVEMENT, _take_infer,
               lambda x, idx, *, axis: np.take(x, idx, axis=axis),
               lambda ct, out, x, idx, *, axis: [apply("take_grad", ct, idx, x, axis=axis), None],
               examples=_take_examples))
register(OpDef("take_grad", MOVEMENT, _take_grad_infer, _take_grad_ref,
               lambda ct, out, g, idx, x, *, axis: [apply("take", ct, idx, axis=axis), None, None],
               examples=lambda rng, dt: [_ex(rng.normal(size=(2, 2, 3)).astype(dt),
                                             np.array([[0, 4], [2, 0]], np.int32),
                                             np.zeros((5, 3), dt), axis=0, wrt=(0,))],
               shape_only=frozenset({2})))


# ---- one_hot ------------------------------------------------------------------------------------
def _one_hot_infer(idx: TensorType, *, depth: int, dtype: str) -> TensorType:
    require_int("one_hot", idx)
    return TensorType(idx.shape + (depth,), dtype)


def _one_hot_ref(idx, *, depth, dtype):
    idx = np.asarray(idx)
    return (idx[..., None] == np.arange(depth)).astype(dtype)


register(OpDef("one_hot", MOVEMENT, _one_hot_infer, _one_hot_ref, differentiable=False,
               nondiff_reason="integer input",
               examples=lambda rng, dt: [_ex(np.array([0, 2, 1, 3], np.int32), depth=4,
                                             dtype=dt)]))


# ---- builders -----------------------------------------------------------------------------------
def reshape(x: Any, shape: Any) -> Node:
    """Reshapes ``x``; one entry of ``shape`` may be -1 (inferred)."""
    x = as_node(x)
    shape = tuple(int(d) for d in shape)
    if shape == x.shape:
        return x
    return apply("reshape", x, shape=shape)


def transpose(x: Any, perm: Any = None) -> Node:
    """Permutes the axes of ``x`` (reverses them when ``perm`` is None)."""
    x = as_node(x)
    perm = tuple(range(x.ndim))[::-1] if perm is None else tuple(norm_axis("transpose", p, x.ndim)
                                                                 for p in perm)
    return x if perm == tuple(range(x.ndim)) else apply("transpose", x, perm=perm)


def broadcast_to(x: Any, shape: Any) -> Node:
    """Broadcasts ``x`` to a static ``shape``."""
    x = as_node(x)
    shape = tuple(int(d) for d in shape)
    return x if x.shape == shape else apply("broadcast_to", x, shape=shape)


def broadcast_like(x: Any, like: Node) -> Node:
    """Broadcasts ``x`` to the run-time shape of ``like``."""
    return apply("broadcast_like", as_node(x, as_node(like).dtype), as_node(like))


def expand_dims(x: Any, axis: Any) -> Node:
    """Inserts size-1 axes at positions ``axis`` (positions in the result)."""
    x = as_node(x)
    n = x.ndim + (1 if isinstance(axis, int) else len(axis))
    return apply("expand_dims", x, axis=norm_axes("expand_dims", axis, n))


def squeeze(x: Any, axis: Any = None) -> Node:
    """Removes size-1 axes (all of them when ``axis`` is None)."""
    x = as_node(x)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = norm_axes("squeeze", axis, x.ndim)
    return x if not axes else apply("squeeze", x, axis=axes)


def _parts(op: str, xs: Any) -> Any:
    """The tensors to join: a list as given, or one tensor's slices along its first axis
    (``np.stack(a)`` / ``np.concatenate(a)`` on one array)."""
    if isinstance(xs, Node):
        if xs.ndim == 0 or xs.shape[0] is None:
            raise ValueError(f"{op}: given one tensor of shape {fmt(xs.shape)}, joins its slices "
                             "along the first axis, which needs a known first dimension; pass a "
                             "list of tensors")
        return [getitem(xs, i) for i in range(xs.shape[0])]
    return xs


def concatenate(xs: Any, axis: int = 0) -> Node:
    """Joins tensors along an existing ``axis``."""
    nodes = as_nodes("concatenate", *_parts("concatenate", xs))
    if not nodes:
        raise ValueError("concatenate: needs at least one tensor")
    axis = norm_axis("concatenate", axis, nodes[0].ndim)
    return nodes[0] if len(nodes) == 1 else apply("concatenate", *nodes, axis=axis)


def stack(xs: Any, axis: int = 0) -> Node:
    """Joins tensors along a new ``axis``."""
    nodes = as_nodes("stack", *_parts("stack", xs))
    if not nodes:
        raise ValueError("stack: needs at least one tensor")
    axis = norm_axis("stack", axis, nodes[0].ndim + 1)
    return concatenate([apply("expand_dims", n, axis=(axis,)) for n in nodes], axis=axis)


def slice_(x: Any, spec: Any) -> Node:
    """Basic slicing with one ``(start, stop, step)`` triple (or ``slice``) per axis."""
    x = as_node(x)
    norm = []
    for s in spec:
        if isinstance(s, slice):
            s = (s.start, s.stop, s.step)
        start, stop, step = (tuple(s) + (None, None, None))[:3]
        norm.append((start, stop, 1 if step is None else step))
    norm += [(None, None, 1)] * (x.ndim - len(norm))
    return apply("slice", x, spec=tuple(norm))


def split(x: Any, num_or_sizes: Any, axis: int = 0) -> list[Node]:
    """Splits ``x`` along ``axis`` into equal parts or parts of the given sizes."""
    x = as_node(x)
    axis = norm_axis("split", axis, x.ndim)
    dim = x.shape[axis]
    if isinstance(num_or_sizes, int):
        if dim is None or dim % num_or_sizes:
            raise ValueError(f"split: axis {axis} of {fmt(x.shape)} cannot be split into "
                             f"{num_or_sizes} equal parts")
        sizes = [dim // num_or_sizes] * num_or_sizes
    else:
        sizes = [int(s) for s in num_or_sizes]
        if dim is not None and sum(sizes) != dim:
            raise ValueError(f"split: sizes {sizes} do not add up to {dim} (axis {axis} of "
                             f"{fmt(x.shape)})")
    out, start = [], 0
    for s in sizes:
        spec: list[tuple[int | None, int | None, int]] = [(None, None, 1)] * x.ndim
        spec[axis] = (start, start + s, 1)
        out.append(apply("slice", x, spec=tuple(spec)))
        start += s
    return out


def pad(x: Any, pads: Any, constant_values: float = 0.0) -> Node:
    """Pads ``x`` with ``constant_values``; ``pads`` is one (before, after) pair per axis."""
    x = as_node(x)
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    return apply("pad", x, pads=pads, value=float(constant_values))


def take(x: Any, indices: Any, axis: int = 0) -> Node:
    """Gathers entries of ``x`` along ``axis`` at integer ``indices`` (like ``np.take``)."""
    x = as_node(x)
    idx = as_node(indices)
    return apply("take", x, idx, axis=norm_axis("take", axis, x.ndim))


gather = take


def one_hot(indices: Any, depth: int, dtype: str = "float32") -> Node:
    """One-hot encodes integer ``indices`` into a new last axis of size ``depth``."""
    return apply("one_hot", as_node(indices), depth=int(depth), dtype=canonical_dtype(dtype))


def getitem(x: Node, key: Any) -> Node:
    """``x[key]`` for ints, slices, None and Ellipsis (basic NumPy indexing)."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        fill = x.ndim - (len(key) - 1 - sum(1 for k in key if k is None))
        key = key[:i] + (slice(None),) * fill + key[i + 1:]
    spec, squeeze_axes, new_axes, out_pos, axis = [], [], [], 0, 0
    for k in key:
        if k is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        if isinstance(k, int | np.integer):
            k = int(k)
            spec.append((k, k + 1 if k != -1 else None, 1))
            squeeze_axes.append(axis)
        elif isinstance(k, slice):
            spec.append((k.start, k.stop, 1 if k.step is None else k.step))
            out_pos += 1
        else:
            raise TypeError(f"kiln tensors support basic indexing only (ints, slices, None, ...); "
                            f"received {type(k).__name__}; use kiln.ops.take for gathers")
        axis += 1
    if axis > x.ndim:
        raise IndexError(f"too many indices for a tensor of shape {fmt(x.shape)}")
    out = slice_(x, spec) if any(s != (None, None, 1) for s in spec) else x
    if squeeze_axes:
        out = apply("squeeze", out, axis=tuple(squeeze_axes))
    if new_axes:
        out = apply("expand_dims", out, axis=tuple(new_axes))
    return out
