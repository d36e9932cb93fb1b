"""Python operators on symbolic tensors and Variables (``+ - * / ** @``, unary minus,
comparisons ``< <= > >=``, indexing, ``.T``).

``==`` and ``!=`` keep their identity meaning (nodes are used as dict keys and in lists);
use ``kiln.ops.equal`` / ``kiln.ops.not_equal`` for elementwise comparison.
"""

from __future__ import annotations

from kiln.core.ir import Node
from kiln.core.ops.elementwise import BUILDERS as EW
from kiln.core.ops.linalg import matmul
from kiln.core.ops.movement import getitem, transpose
from kiln.core.variable import Variable


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
    setattr(cls, "__array_ufunc__", None)  # noqa: B010 (typed: mypy refuses new attributes)
