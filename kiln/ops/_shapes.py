"""Keras-style shapes and creation ops whose shapes may hold symbolic dimensions."""

from __future__ import annotations

import builtins

import numpy as np

import kiln.config
from kiln.ops import _G, is_symbolic


class SymbolicDim:
    """A dimension known only at run time: axis ``axis`` of the symbolic tensor ``tensor``
    (``kiln.ops.shape(x)[0]`` for a batch dimension). Creation ops and ``kiln.random``
    accept it in shapes."""

    __slots__ = ("tensor", "axis")

    def __init__(self, tensor, axis):
        self.tensor = tensor
        self.axis = int(axis)

    def __repr__(self):
        return f"SymbolicDim(axis {self.axis} of a tensor of shape {self.tensor.shape})"

    def __index__(self):
        raise TypeError("a symbolic dimension (known when the step runs) has no Python int "
                        "value; pass it to kiln.ops creation functions or kiln.random")

    def as_tensor(self):
        """The dimension as an int32 scalar tensor."""
        return _G.cast(_G.size_of(self.tensor, axis=self.axis), "int32")

    def __kiln_node__(self):
        # an op given the dimension itself (``ops.expand_dims(ops.shape(x)[0], -1)``, as
        # Keras' causal-mask recipes write) computes with its run-time value
        return self.as_tensor()


def static_entries(value):
    """The entries of a 1-D shape-like ``value`` (a list, an array, or an int tensor computed
    from ``ops.shape`` dimensions: ``concatenate([expand_dims(shape(x)[0], -1), [1, 1]])``) as
    ints and :class:`SymbolicDim`s, or None when they cannot be known before the step runs
    (TensorFlow's ``constant_value_as_shape``, for reps and shapes given as tensors)."""
    if isinstance(value, SymbolicDim):
        return [value]
    if isinstance(value, int | np.integer):
        return [int(value)]
    if isinstance(value, np.ndarray):
        return [int(v) for v in value.reshape(-1)] if value.dtype.kind in "iu" else None
    if isinstance(value, list | tuple):
        out = []
        for v in value:
            got = _scalar_entry(v)
            if got is None:
                return None
            out.append(got)
        return out
    node = _G.as_node(value) if is_symbolic(value) else None
    if node is None or node.ndim > 1:
        return None
    if node.ndim == 0:
        got = _scalar_entry(node)
        return None if got is None else [got]
    if node.op == "constant":
        return static_entries(node.attrs["value"].array)
    if node.op == "concatenate":
        out = []
        for part in node.inputs:
            got = static_entries(part)
            if got is None:
                return None
            out += got
        return out
    if node.op in ("expand_dims", "reshape", "cast") and node.inputs[0].ndim <= 1:
        return static_entries(node.inputs[0])
    return None


def _one_element(node):
    return builtins.all(d == 1 for d in node.shape)


def _scalar_entry(value):
    """An int or SymbolicDim for a scalar (a number, or ``size_of`` one axis, cast), or None."""
    if isinstance(value, SymbolicDim):
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if not isinstance(value, _G.Node):
        return None
    node = value
    while node.op in ("cast", "reshape", "expand_dims") and _one_element(node.inputs[0]):
        node = node.inputs[0]
    if node.op == "constant" and node.attrs["value"].array.size == 1:
        return int(node.attrs["value"].array.reshape(-1)[0])
    if node.op == "size_of" and len(node.attrs["axis"]) == 1:
        t, axis = node.inputs[0], node.attrs["axis"][0]
        return SymbolicDim(t, axis) if t.shape[axis] is None else int(t.shape[axis])
    return None


def shape(x):
    """The shape of ``x`` as a tuple: ints, and :class:`SymbolicDim` for dimensions of a
    symbolic tensor known only at run time (Keras' ``ops.shape``)."""
    if is_symbolic(x) and not isinstance(x, np.ndarray | np.generic | int | float | list):
        node = _G.as_node(x)
        return tuple(SymbolicDim(node, i) if d is None else d for i, d in enumerate(node.shape))
    return tuple(np.shape(x))


def like_shape(shape_, dtype="float32"):
    """A tensor of ``shape_`` (ints and SymbolicDims) whose values are never read, for ops that
    take their shape from a tensor; None when the shape is static."""
    shape_ = tuple(shape_)
    if not builtins.any(isinstance(d, SymbolicDim) for d in shape_):
        return None
    rank = len(shape_)
    base = np.zeros(tuple(1 if isinstance(d, SymbolicDim) else int(d) for d in shape_), dtype)
    like = _G.constant(base)
    for p, d in enumerate(shape_):
        if not isinstance(d, SymbolicDim):
            continue
        t = d.tensor
        picked = t[tuple(builtins.slice(None) if a == d.axis else builtins.slice(0, 1)
                         for a in range(t.ndim))]
        column = _G.reshape(picked, tuple(-1 if i == p else 1 for i in range(rank)))
        like = like + _G.zeros_like(_G.cast(column, dtype))
    return like


def created(array):
    """A creation op's result: the array, or a constant node of it while a step is traced
    (so that what is computed from it, a layer called on ``arange`` included, is part of the
    step's graph)."""
    return _G.constant(array) if is_symbolic() else array


def _shape_tuple(shape_):
    return (shape_,) if isinstance(shape_, int | np.integer | SymbolicDim) else tuple(shape_)


def full(shape, fill_value, dtype=None):
    """An array filled with ``fill_value``, of dtype floatx unless ``dtype`` is given (Keras):
    a NumPy array for a static shape (a constant node inside a traced step), a tensor when the
    shape has a :class:`SymbolicDim`.

    Example:
        >>> kiln.ops.full((2,), 7)
        array([7., 7.], dtype=float32)
    """
    shape_ = _shape_tuple(shape)
    dtype = dtype or kiln.config.floatx()  # Keras: floatx unless given
    like = like_shape(shape_)
    if like is None:
        return created(np.full(tuple(int(d) for d in shape_), fill_value, dtype=dtype))
    return _G.broadcast_like(_G.constant(np.asarray(fill_value, dtype)), _G.cast(like, dtype))


def ones(shape, dtype=None):
    """Ones of ``shape`` (see :func:`full`; default dtype floatx)."""
    return full(shape, 1, dtype or kiln.config.floatx())


def zeros(shape, dtype=None):
    """Zeros of ``shape`` (see :func:`full`; default dtype floatx)."""
    return full(shape, 0, dtype or kiln.config.floatx())


def _is_dim_of(d, node):
    """Whether the SymbolicDim ``d`` is a run-time dimension of ``node`` itself."""
    return isinstance(d, SymbolicDim) and d.tensor is node and node.shape[d.axis] is None


def reshape_symbolic(x, shape_):
    """``reshape(x, shape_)`` where ``shape_`` holds :class:`SymbolicDim` entries (Keras code's
    ``ops.reshape(x, (ops.shape(x)[0], -1, d))``); None when it holds none.

    Without a -1 the result takes its run-time shape from a stand-in of ``shape_``
    (:func:`like_shape`); with a -1, the symbolic entries must be ``x``'s own unknown
    dimensions (then the -1 is static)."""
    shape_ = tuple(shape_)
    if not builtins.any(isinstance(d, SymbolicDim) for d in shape_):
        return None
    node = _G.as_node(x)
    if -1 not in shape_:
        return _G.apply("reshape_like", node, like_shape(shape_, node.dtype))
    symbolic = [d for d in shape_ if isinstance(d, SymbolicDim)]
    unknown = [a for a, d in enumerate(node.shape) if d is None]
    if len(symbolic) == 1 and len(unknown) == 1 and _is_dim_of(symbolic[0], node):
        known = int(np.prod([d for d in node.shape if d is not None]))
        rest = int(np.prod([int(d) for d in shape_ if not isinstance(d, SymbolicDim)
                            and d != -1]))
        if rest and known % rest == 0:
            return _G.reshape(node, tuple(-1 if isinstance(d, SymbolicDim) else
                                          known // rest if d == -1 else int(d)
                                          for d in shape_))
    raise TypeError(f"reshape: cannot infer the -1 of the shape {shape_} for a tensor of shape "
                    f"{node.shape} (its symbolic dimensions are not this tensor's own unknown "
                    "dimension); give every dimension, or only one of -1 and ops.shape(x)[i]")


def broadcast_to_symbolic(x, shape_):
    """``broadcast_to(x, shape_)`` where ``shape_`` holds :class:`SymbolicDim` entries (Keras
    code's ``ops.broadcast_to(table, ops.shape(inputs))``); None when it holds none."""
    like = like_shape(tuple(shape_), _G.as_node(x).dtype)
    return None if like is None else _G.broadcast_like(_G.as_node(x), like)
