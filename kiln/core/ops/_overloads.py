"""Python operators on symbolic tensors and Variables (``+ - * / ** @``, unary minus,
comparisons ``< <= > >=``, indexing, ``.T``).

On a symbolic tensor (a :class:`Node`) ``==`` and ``!=`` are elementwise as in Keras: they
return a bool tensor when the other side is a tensor, a Variable, a number or an array. Against
anything else (None, a string, Ellipsis, an arbitrary object) they return ``NotImplemented``, so
Python falls back to identity. Nodes keep hashing by identity, so they stay usable as dict keys
and set members (a dict compares keys by identity before calling ``__eq__``); code inside kiln
compares nodes with ``is``, never ``==`` or ``in list``. A Variable's ``==`` keeps its identity
meaning (optimizers look variables up in lists).
"""

from __future__ import annotations

import numpy as np

from kiln.core.ir import Node
from kiln.core.ops.elementwise import BUILDERS as EW
from kiln.core.ops.linalg import matmul
from kiln.core.ops.movement import getitem, transpose
from kiln.core.variable import Variable

_TENSOR_LIKE = (Node, Variable, int, float, bool, np.ndarray, np.generic)


def _cmp(name: str):
    fn = EW[name]

    def method(self, other):
        if not isinstance(other, _TENSOR_LIKE):
            return NotImplemented
        return fn(self, other)

    method.__name__ = f"__{'eq' if name == 'equal' else 'ne'}__"
    return method


def _bin(name: str, reflected: bool = False):
    fn = EW[name]
    if reflected:
        return lambda self, other: fn(other, self)
    return lambda self, other: fn(self, other)


_METHODS = {
    "__add__": _bin("add"), "__radd__": _bin("add", True),
    "__sub__": _bin("sub"), "__rsub__": _bin("sub", True),
    "__mul__": _bin("mul"), "__rmul__": _bin("mul", True),
    "__truediv__": _bin("div"), "__rtruediv__": _bin("div", True),
    "__pow__": _bin("pow"), "__rpow__": _bin("pow", True),
    "__lt__": _bin("less"), "__le__": _bin("less_equal"),
    "__gt__": _bin("greater"), "__ge__": _bin("greater_equal"),
    "__matmul__": lambda self, other: matmul(self, other),
    "__rmatmul__": lambda self, other: matmul(other, self),
    "__neg__": lambda self: EW["neg"](self),
    "__abs__": lambda self: EW["abs"](self),
    "__getitem__": lambda self, key: getitem(self if isinstance(self, Node)
                                             else self.__kiln_node__(), key),
    "T": property(lambda self: transpose(self)),
}

# NumPy must defer to our reflected operators (np.ndarray + Node -> Node.__radd__).
for cls in (Node, Variable):
    for _name, _fn in _METHODS.items():
        setattr(cls, _name, _fn)
    cls.__array_ufunc__ = None

# Elementwise ``==``/``!=`` on nodes; the identity hash stays (ir.py sets it explicitly, and
# defining __eq__ after class creation does not reset it).
Node.__eq__ = _cmp("equal")  # type: ignore[method-assign,assignment]
Node.__ne__ = _cmp("not_equal")  # type: ignore[method-assign,assignment]
