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

import sys
from types import FrameType

import numpy as np

from kiln.core import variable as variable_module
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

def _on_variable(name: str, fn):
    """A Variable's operator: the node, or in define-by-run the value (variable.py)."""
    def method(self, *args):
        if variable_module.reads_values(args):
            return variable_module.eager_operator(name, fn, (self,) + args)
        return fn(self, *args)
    method.__name__ = name
    return method


# NumPy must defer to our reflected operators (np.ndarray + Node -> Node.__radd__).
for cls in (Node, Variable):
    for _name, _fn in _METHODS.items():
        setattr(cls, _name, _on_variable(_name, _fn) if cls is Variable and _name != "T"
                else _fn)
    setattr(cls, "__array_ufunc__", None)  # noqa: B010 (typed: mypy refuses new attributes)

# Elementwise ``==``/``!=`` on nodes; the identity hash stays (ir.py sets it explicitly, and
# defining __eq__ after class creation does not reset it).
for _name, _op in (("__eq__", "equal"), ("__ne__", "not_equal")):
    setattr(Node, _name, _cmp(_op))


# ---- foreign libraries ----------------------------------------------------------------------
# TensorFlow converts its inputs with ``__tf_tensor__`` (then ``__array__``), NumPy with
# ``__array__``: a symbolic tensor has no value to give, so both raise an error naming the
# call (found on the stack) and the kiln.ops equivalent, instead of NumPy iterating the tensor.
_WRAPPERS = {"op_dispatch_handler", "error_handler", "wrapper", "wrapped", "convert",
             "convert_to_tensor", "args_to_matching_eager", "<lambda>"}
_OPS_OF_FOREIGN = {"concat": "concatenate", "resize_images": "image.resize", "rank": "ndim",
               "reduce_sum": "sum", "reduce_mean": "mean", "reduce_max": "max",
               "reduce_min": "min", "reduce_prod": "prod", "reduce_any": "any",
               "reduce_all": "all", "reduce_std": "std", "reduce_variance": "var"}


def _library_call() -> tuple[str, str] | None:
    """``(library, function)`` of the outermost TensorFlow/NumPy/JAX/torch call on the stack
    that led here (its wrappers skipped), or None when none did."""
    frame: FrameType | None = sys._getframe(2)
    found = None
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        lib = next((name for name in ("tensorflow", "jax", "torch", "numpy")
                    if f"/{name}/" in path), None)
        if lib is None:
            if found is not None:
                break
        elif frame.f_code.co_name not in _WRAPPERS and not frame.f_code.co_name.startswith("_"):
            found = (lib, frame.f_code.co_name)
        frame = frame.f_back
    return found


def _plain(name: str) -> str:
    for suffix in ("_eager_fallback", "_internal", "_v2"):
        name = name.removesuffix(suffix)
    return name


def _kiln_hint(name: str) -> str:
    ops = sys.modules.get("kiln.ops")  # the frontend, when it is loaded (never imported here)
    target = _OPS_OF_FOREIGN.get(name, name)
    obj = ops
    for part in target.split("."):
        obj = getattr(obj, part, None)
    if ops is not None and callable(obj):
        return f"use kiln.ops.{target} instead"
    return "use the kiln.ops equivalent"


def _no_foreign_value(self: Node, *args: object, **kwargs: object) -> None:
    call = _library_call()
    if call is not None and call[0] == "tensorflow":
        where = f"TensorFlow's {_plain(call[1])}() was given"
        hint = _kiln_hint(_plain(call[1]))
    elif call is not None:
        where = f"{call[0]}.{_plain(call[1])}() was given"
        hint = _kiln_hint(_plain(call[1]))
    else:
        where = "an array conversion (np.asarray, np.array) was given"
        hint = "use kiln.ops functions on it"
    raise TypeError(
        f"{where} a symbolic kiln tensor {self!r}, which has no value until kiln's compiled "
        f"graph runs; {hint} (in a layer's call() or a Lambda layer), or pass concrete arrays")


Node.__array__ = _no_foreign_value  # type: ignore[attr-defined]
Node.__tf_tensor__ = _no_foreign_value  # type: ignore[attr-defined]
