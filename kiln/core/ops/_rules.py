"""Shared pieces of shape/dtype rules and input conversion used by the op families."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.core.ir import FLOAT_DTYPES, INT_DTYPES, Dim, Node, Shape, TensorType, canonical_dtype


def fmt(shape: Shape) -> str:
    """Formats a shape the way NumPy prints it, with None for unknown dims."""
    dims = ", ".join("None" if d is None else str(d) for d in shape)
    return "(" + dims + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(op: str, *shapes: Shape) -> Shape:
    """NumPy broadcasting of static shapes with None (unknown) dims."""
    first = shapes[0]
    if all(s == first for s in shapes):  # the common cases: equal shapes, or with a scalar
        return tuple(first)
    if len(shapes) == 2 and not shapes[1]:
        return tuple(first)
    if len(shapes) == 2 and not first:
        return tuple(shapes[1])
    ndim = max(len(s) for s in shapes)
    out: list[Dim] = []
    for axis in range(ndim):
        dims = [s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            received = " and ".join(fmt(s) for s in shapes)
            raise ValueError(f"{op}: shapes {received} cannot be broadcast together "
                             f"(dimension {axis - ndim} is {sorted(known)})")
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def same_dtype(op: str, *types: TensorType) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        received = ", ".join(f"{t.dtype}{fmt(t.shape)}" for t in types)
        raise TypeError(f"{op}: operands must have the same dtype, received {received}; "
                        "use kiln.ops.cast")
    return types[0].dtype


def require_float(op: str, *types: TensorType | Node) -> None:
    for t in types:
        if t.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{op}: expected a float tensor, received {t.dtype}{fmt(t.shape)}")


def require_int(op: str, t: TensorType, what: str = "indices") -> None:
    if t.dtype not in INT_DTYPES:
        raise TypeError(f"{op}: {what} must be int32 or int64, received {t.dtype}{fmt(t.shape)}")


def norm_axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def norm_axes(op: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """None -> all axes; int or sequence -> sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        axis = (int(axis),)
    axes = tuple(sorted({norm_axis(op, int(a), ndim) for a in axis}))
    if len(axes) != len(tuple(axis)):
        raise ValueError(f"{op}: repeated axis in {axis}")
    return axes


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(canonical_dtype(dtype))


def is_node(x: Any) -> bool:
    return isinstance(x, Node) or hasattr(x, "__kiln_node__")


def as_node(x: Any, dtype: str | None = None) -> Node:
    """Converts a Node, a Variable, a NumPy array or a Python scalar into a graph node.

    Args:
        x: the value.
        dtype: dtype for constants made from Python scalars and NumPy arrays (the dtype of the
            other operand, like JAX's weak types); NumPy arrays keep their own when None.
    """
    if isinstance(x, Node):
        return x
    if hasattr(x, "__kiln_node__"):
        return x.__kiln_node__()
    from kiln.core.ops.source import constant

    if isinstance(x, bool | int | float | np.generic | np.ndarray | list | tuple):
        arr = np.asarray(x)
        if dtype is None:
            if arr.dtype.kind == "f":
                dtype = "float32" if not isinstance(x, np.ndarray | np.generic) else arr.dtype.name
            elif arr.dtype.kind in "iu":
                dtype = "int64" if arr.dtype.itemsize > 4 else "int32"
                if not isinstance(x, np.ndarray | np.generic):
                    dtype = "int32" if np.all(np.abs(arr) < 2**31) else "int64"
            elif arr.dtype.kind == "b":
                dtype = "bool"
            else:
                raise TypeError(f"cannot convert {type(x).__name__} of dtype {arr.dtype} to a "
                                "kiln tensor")
        return constant(arr.astype(np_dtype(dtype)))
    library = type(x).__module__.split(".")[0]
    if library in ("tensorflow", "jax", "jaxlib", "torch"):
        # a value of another framework inside a kiln computation (a tf.Variable weight, the
        # result of a tf op on a kiln Variable): it cannot join kiln's compiled graph
        raise TypeError(f"expected a kiln tensor, Variable, NumPy array or number, received "
                        f"{type(x).__name__} (a {library} value): kiln's compiled graphs "
                        f"cannot use another framework's tensors or variables; create "
                        f"weights with add_weight and compute with kiln.ops")
    raise TypeError(f"expected a kiln tensor, Variable, NumPy array or number, "
                    f"received {type(x).__name__}")


def as_nodes(op: str, *xs: Any) -> list[Node]:
    """Converts operands so that numbers and arrays take the dtype of the symbolic operand."""
    dtype = None
    for x in xs:
        if is_node(x):
            dtype = as_node(x).dtype
            break
    return [as_node(x, dtype) for x in xs]


def static_prod(dims: Sequence[Dim]) -> int | None:
    known = [d for d in dims if d is not None]
    if len(known) < len(dims):
        return None
    return int(np.prod(known, dtype=np.int64))
