"""Source ops: constants, placeholders (fed at run time) and params (persistent variables)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import HashableArray, Node, TensorType, fresh_uid, make_node
from kiln.core.ops.registry import SOURCE, OpDef, register


def _fed(*_: Any, **attrs: Any) -> np.ndarray:
    raise RuntimeError("placeholders and params get their values from the executor")


def _const_infer(*, value: HashableArray) -> TensorType:
    return TensorType(value.array.shape, value.array.dtype.name)


def _const_ref(*, value: HashableArray) -> np.ndarray:
    return value.array


def _declared(*, shape: tuple, dtype: str, **_: Any) -> TensorType:
    return TensorType(shape, dtype)


register(OpDef("constant", SOURCE, _const_infer, _const_ref, differentiable=False,
               nondiff_reason="a constant has no inputs"))
register(OpDef("placeholder", SOURCE, _declared, _fed, differentiable=False,
               nondiff_reason="a source node"))
register(OpDef("param", SOURCE, _declared, _fed, differentiable=False,
               nondiff_reason="a source node; autodiff differentiates *with respect to* params"))


def constant(value: Any, dtype: str | None = None) -> Node:
    """A constant tensor holding ``value`` (copied)."""
    arr = np.asarray(value, dtype=dtype)
    return make_node("constant", (), {"value": HashableArray(arr)}, _const_infer)


def placeholder(shape: Any, dtype: str = "float32", name: str | None = None) -> Node:
    """A symbolic input fed when the compiled function is called.

    Args:
        shape: tuple of ints, with ``None`` for dimensions known only at run time (the batch).
        dtype: one of float32 (default), float64, int32, int64, bool.
        name: optional name, shown in dumps and error messages.

    Example:
        >>> x = kiln.placeholder((None, 784))
    """
    t = TensorType(tuple(shape), dtype)
    return make_node("placeholder", (), {"shape": t.shape, "dtype": t.dtype, "name": name,
                                         "uid": fresh_uid()}, _declared)


def param_node(var: Any, shape: tuple, dtype: str, name: str | None) -> Node:
    """The graph node standing for a Variable (bound to its buffer by the executor)."""
    return make_node("param", (), {"shape": tuple(shape), "dtype": dtype, "name": name,
                                   "var": var}, _declared)
