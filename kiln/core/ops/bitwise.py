"""Bitwise ops on integer tensors (int32/int64): and, or, xor, invert, shifts.

They cannot be composites of the arithmetic primitives (a bit at a time would take 32 or 64
steps), so each is an elementwise op with a scalar body the generated CPU and CUDA loops
compile. The bodies use only what the native expression lowering has (``&``, ``|``, ``<<``,
``>>`` and arithmetic): ``a ^ b == (a | b) - (a & b)`` and ``~a == -a - 1`` in two's
complement. Shift counts must lie in [0, bits): ``kiln.ops.left_shift``/``right_shift``
handle larger counts the way NumPy does before calling these. All are piecewise constant
integer functions: no gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, as_nodes, broadcast_shapes, fmt, same_dtype
from kiln.core.ops.registry import ELEMENTWISE, Example, OpDef, apply, register

_INTS = ("int32", "int64")
_WHY = "integer bit operations: no gradient"


def _int_infer(name: str):
    def infer(*ts: TensorType) -> TensorType:
        dtype = same_dtype(name, *ts)
        if dtype not in _INTS:
            received = ", ".join(f"{t.dtype}{fmt(t.shape)}" for t in ts)
            raise TypeError(f"{name}: expected int32 or int64 tensors, received {received}")
        return TensorType(broadcast_shapes(name, *(t.shape for t in ts)), dtype)
    return infer


def _examples(n: int, shift: bool = False):
    def examples(rng: np.random.Generator, dtype: str) -> list[Example]:
        out = []
        for itype, bits in (("int32", 32), ("int64", 64)):
            x = rng.integers(-2**20, 2**20, size=(3, 4)).astype(itype)
            if n == 1:
                out.append(Example((x,), wrt=()))
                continue
            y = rng.integers(0, bits, size=(4,)) if shift else rng.integers(
                -2**20, 2**20, size=(4,))
            out.append(Example((x, y.astype(itype)), wrt=()))
        return out
    return examples


def _ref(fn):
    def ref(*xs):
        return np.asarray(fn(*xs)).astype(np.result_type(*xs))
    return ref


_OPS = {
    "bitwise_and": (np.bitwise_and, "({0} & {1})", 2, False),
    "bitwise_or": (np.bitwise_or, "({0} | {1})", 2, False),
    "bitwise_xor": (np.bitwise_xor, "(({0} | {1}) - ({0} & {1}))", 2, False),
    "bitwise_invert": (np.invert, "(-{0} - 1)", 1, False),
    "left_shift": (np.left_shift, "({0} << {1})", 2, True),
    "right_shift": (np.right_shift, "({0} >> {1})", 2, True),
}
for _name, (_fn, _body, _n, _shift) in _OPS.items():
    register(OpDef(_name, ELEMENTWISE, _int_infer(_name), _ref(_fn), None, differentiable=False,
                   nondiff_reason=_WHY, scalar=_body, examples=_examples(_n, _shift)))


def bitwise(name: str, *xs: Any) -> Node:
    """The bitwise op ``name`` on ``xs`` (numbers take the tensor operand's dtype)."""
    nodes = as_nodes(name, *xs) if len(xs) > 1 else [as_node(xs[0])]
    return apply(name, *nodes)


__all__ = ["bitwise"]
