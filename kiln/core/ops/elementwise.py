"""Elementwise ops: each is a NumPy reference, a scalar body for generated kernels, and a VJP.

Binary ops broadcast like NumPy; their VJPs return full-shape cotangents and autodiff sums them
back to each input's shape (un-broadcasting lives only in autodiff.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, as_nodes, broadcast_shapes, require_float, same_dtype
from kiln.core.ops.registry import ELEMENTWISE, Example, OpDef, apply, register

_erf = np.frompyfunc(math.erf, 1, 1)


def _c(value: float, like: Node) -> Node:
    """A scalar constant with the dtype of ``like``."""
    from kiln.core.ops.source import constant

    return constant(np.asarray(value, dtype=like.dtype))


def _float(x: Node) -> Node:
    return x if x.dtype in ("float32", "float64") else apply("cast", x, dtype="float32")


# ---- shape rules ---------------------------------------------------------------------------
def _unary_float(name: str):
    def infer(x: TensorType) -> TensorType:
        require_float(name, x)
        return x
    return infer


def _unary_any(name: str):
    def infer(x: TensorType) -> TensorType:
        if x.dtype == "bool":
            raise TypeError(f"{name}: expected a numeric tensor, received bool{x.shape}")
        return x
    return infer


def _binary(name: str, out_dtype: str | None = None, need_float: bool = False):
    def infer(x: TensorType, y: TensorType) -> TensorType:
        dtype = same_dtype(name, x, y)
        if need_float:
            require_float(name, x, y)
        if out_dtype is None and dtype == "bool":
            raise TypeError(f"{name}: expected numeric operands, received bool")
        return TensorType(broadcast_shapes(name, x.shape, y.shape), out_dtype or dtype)
    return infer


def _logical(name: str):
    def infer(*ts: TensorType) -> TensorType:
        for t in ts:
            if t.dtype != "bool":
                raise TypeError(f"{name}: expected bool operands, received {t.dtype}{t.shape}")
        return TensorType(broadcast_shapes(name, *(t.shape for t in ts)), "bool")
    return infer


# ---- examples for the registry tests ---------------------------------------------------------
_UNARY_SHAPES = [(3, 4), (), (2, 1, 3)]
_BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 4), ()),
                  ((1,), (2, 3))]


def _unary_examples(low: float = -2.0, high: float = 2.0, avoid: float | None = None):
    def examples(rng: np.random.Generator, dtype: str) -> list[Example]:
        out = []
        for shape in _UNARY_SHAPES:
            x = rng.uniform(low, high, size=shape)
            if avoid is not None:  # keep finite differences away from kinks
                x = np.where(np.abs(x - avoid) < 0.1, x + 0.3, x)
            out.append(Example((x.astype(dtype),)))
        return out
    return examples


def _binary_examples(low: float = -2.0, high: float = 2.0, low2: float | None = None,
                     high2: float | None = None, separate: bool = False):
    def examples(rng: np.random.Generator, dtype: str) -> list[Example]:
        out = []
        for sx, sy in _BINARY_SHAPES:
            x = rng.uniform(low, high, size=sx)
            y = rng.uniform(low if low2 is None else low2, high if high2 is None else high2,
                            size=sy)
            if separate:  # max/min: keep the operands apart so the derivative is defined
                y = y + np.where(rng.uniform(size=sy) < 0.5, 0.5, -0.5)
                x = x + 0.0
            out.append(Example((x.astype(dtype), y.astype(dtype))))
        return out
    return examples


def _bool_examples(n: int):
    def examples(rng: np.random.Generator, dtype: str) -> list[Example]:
        return [Example(tuple(rng.uniform(size=(3, 4)) < 0.5 for _ in range(n))),
                Example(tuple(rng.uniform(size=s) < 0.5 for s in [(2, 3), (3,)][:n]))]
    return examples


# ---- unary ----------------------------------------------------------------------------------
def _unary(name: str, ref, scalar: str, vjp, infer=None, examples=None, **kw: Any) -> OpDef:
    return register(OpDef(name, ELEMENTWISE, infer or _unary_float(name), ref, vjp,
                          scalar=scalar, examples=examples or _unary_examples(), **kw))


def _sigmoid_ref(x):
    x = np.asarray(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _softplus_ref(x):
    x = np.asarray(x)
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype)


_unary("neg", np.negative, "-{0}", lambda ct, out, x: [-ct], _unary_any("neg"))
_unary("abs", np.abs, "abs({0})", lambda ct, out, x: [ct * apply("sign", x)], _unary_any("abs"),
       _unary_examples(avoid=0.0))
_unary("sign", np.sign, "(1 if {0} > 0 else (-1 if {0} < 0 else {0}))", None, _unary_any("sign"),
       differentiable=False, nondiff_reason="piecewise constant: zero gradient almost everywhere")
_unary("exp", np.exp, "np.exp({0})", lambda ct, out, x: [ct * out])
_unary("expm1", np.expm1, "np.expm1({0})", lambda ct, out, x: [ct * (out + _c(1, out))])
_unary("log", np.log, "np.log({0})", lambda ct, out, x: [ct / x],
       examples=_unary_examples(0.2, 3.0))
_unary("log1p", np.log1p, "np.log1p({0})", lambda ct, out, x: [ct / (x + _c(1, x))],
       examples=_unary_examples(-0.6, 3.0))
_unary("sqrt", np.sqrt, "np.sqrt({0})", lambda ct, out, x: [ct * _c(0.5, x) / out],
       examples=_unary_examples(0.2, 3.0))
_unary("rsqrt", lambda x: (1 / np.sqrt(x)).astype(np.asarray(x).dtype), "1.0 / np.sqrt({0})",
       lambda ct, out, x: [ct * _c(-0.5, x) * out / x], examples=_unary_examples(0.2, 3.0))
_unary("square", np.square, "{0} * {0}", lambda ct, out, x: [ct * _c(2, x) * x],
       _unary_any("square"))
_unary("reciprocal", lambda x: (1 / np.asarray(x)).astype(np.asarray(x).dtype), "1.0 / {0}",
       lambda ct, out, x: [-ct * out * out], examples=_unary_examples(0.3, 3.0))
_unary("sin", np.sin, "np.sin({0})", lambda ct, out, x: [ct * apply("cos", x)])
_unary("cos", np.cos, "np.cos({0})", lambda ct, out, x: [-ct * apply("sin", x)])
_unary("tanh", np.tanh, "np.tanh({0})", lambda ct, out, x: [ct * (_c(1, out) - out * out)])
_unary("sigmoid", _sigmoid_ref,
       "(1.0 / (1.0 + np.exp(-{0})) if {0} >= 0 else np.exp({0}) / (1.0 + np.exp({0})))",
       lambda ct, out, x: [ct * out * (_c(1, out) - out)])
_unary("relu", lambda x: np.maximum(x, 0).astype(np.asarray(x).dtype),
       "(0 if {0} <= 0 else {0})",  # NaN fails the test and stays NaN, as in np.maximum
       # the mask from the output (out > 0 exactly where x > 0; NaN in neither), as
       # TensorFlow's ReluGrad: the pre-activation then has no reader but relu, so a bias add
       # and relu fuse into one kernel (a convolution's epilogue) and x need not be kept
       lambda ct, out, x: [ct * apply("cast", apply("greater", out, _c(0, out)),
                                      dtype=x.dtype)],
       _unary_any("relu"), _unary_examples(avoid=0.0))
_unary("softplus", _softplus_ref, "(max({0}, 0.0) + np.log1p(np.exp(-abs({0}))))",
       lambda ct, out, x: [ct * apply("sigmoid", x)])
_unary("erf", lambda x: np.asarray(_erf(x), dtype=np.asarray(x).dtype), "math.erf({0})",
       lambda ct, out, x: [ct * _c(2 / math.sqrt(math.pi), x) * apply("exp", -(x * x))])
for _name, _ref, _body in [("floor", np.floor, "np.floor({0})"), ("ceil", np.ceil,
                                                                   "np.ceil({0})"),
                           ("round", np.round, "np.rint({0})")]:
    _unary(_name, _ref, _body, None, differentiable=False,
           nondiff_reason="piecewise constant: zero gradient almost everywhere")


# ---- binary ---------------------------------------------------------------------------------
def _bin(name: str, ref, scalar: str, vjp, infer=None, examples=None, **kw: Any) -> OpDef:
    return register(OpDef(name, ELEMENTWISE, infer or _binary(name), ref, vjp, scalar=scalar,
                          examples=examples or _binary_examples(), **kw))


def _pow_ref(x, y):
    return np.power(x, y).astype(np.result_type(x, y))


_bin("add", np.add, "{0} + {1}", lambda ct, out, x, y: [ct, ct])
_bin("sub", np.subtract, "{0} - {1}", lambda ct, out, x, y: [ct, -ct])
_bin("mul", np.multiply, "{0} * {1}", lambda ct, out, x, y: [ct * y, ct * x])
_bin("div", lambda x, y: np.divide(x, y).astype(np.result_type(x, y)), "{0} / {1}",
     lambda ct, out, x, y: [ct / y, -ct * out / y], _binary("div", need_float=True),
     _binary_examples(low2=0.5, high2=2.0))
_bin("pow", _pow_ref, "{0} ** {1}",
     lambda ct, out, x, y: [ct * y * apply("pow", x, y - _c(1, y)), ct * out * apply("log", x)],
     _binary("pow", need_float=True), _binary_examples(0.3, 2.0, -1.5, 1.5))


def _max_vjp(ct, out, x, y):
    pick_x = apply("cast", apply("greater_equal", x, y), dtype=ct.dtype)
    return [ct * pick_x, ct * (_c(1, ct) - pick_x)]


def _min_vjp(ct, out, x, y):
    pick_x = apply("cast", apply("less_equal", x, y), dtype=ct.dtype)
    return [ct * pick_x, ct * (_c(1, ct) - pick_x)]


# NaN in either operand gives NaN, as np.maximum/np.minimum (Python's and numba's max(a, b)
# return a whenever b is NaN, and a CUDA fmax drops NaN).
_MAX = "({1} if ({1} > {0} or {1} != {1}) else {0})"
_MIN = "({1} if ({1} < {0} or {1} != {1}) else {0})"
_bin("maximum", np.maximum, _MAX, _max_vjp, examples=_binary_examples(separate=True))
_bin("minimum", np.minimum, _MIN, _min_vjp, examples=_binary_examples(separate=True))

_CMP = {"equal": (np.equal, "=="), "not_equal": (np.not_equal, "!="), "less": (np.less, "<"),
        "less_equal": (np.less_equal, "<="), "greater": (np.greater, ">"),
        "greater_equal": (np.greater_equal, ">=")}
for _name, (_ref, _sym) in _CMP.items():
    _bin(_name, _ref, f"({{0}} {_sym} {{1}})", None, _binary(_name, out_dtype="bool"),
         differentiable=False, nondiff_reason="boolean output")

register(OpDef("logical_and", ELEMENTWISE, _logical("logical_and"), np.logical_and,
               differentiable=False, scalar="({0} and {1})", examples=_bool_examples(2),
               nondiff_reason="boolean"))
register(OpDef("logical_or", ELEMENTWISE, _logical("logical_or"), np.logical_or,
               differentiable=False, scalar="({0} or {1})", examples=_bool_examples(2),
               nondiff_reason="boolean"))
register(OpDef("logical_not", ELEMENTWISE, _logical("logical_not"), np.logical_not,
               differentiable=False, scalar="(not {0})", examples=_bool_examples(1),
               nondiff_reason="boolean"))


# ---- where, cast, clip ----------------------------------------------------------------------
def _where_infer(c: TensorType, x: TensorType, y: TensorType) -> TensorType:
    if c.dtype != "bool":
        raise TypeError(f"where: condition must be bool, received {c.dtype}{c.shape}")
    dtype = same_dtype("where", x, y)
    return TensorType(broadcast_shapes("where", c.shape, x.shape, y.shape), dtype)


def _where_vjp(ct, out, c, x, y):
    zero = _c(0, ct)
    return [None, apply("where", c, ct, zero), apply("where", c, zero, ct)]


def _where_examples(rng, dtype):
    return [Example((rng.uniform(size=(3, 4)) < 0.5, rng.normal(size=(3, 4)).astype(dtype),
                     rng.normal(size=(4,)).astype(dtype)), wrt=(1, 2))]


register(OpDef("where", ELEMENTWISE, _where_infer,
               lambda c, x, y: np.asarray(np.where(c, x, y)),
               _where_vjp, scalar="({1} if {0} else {2})", examples=_where_examples))


def _cast_infer(x: TensorType, *, dtype: str) -> TensorType:
    return TensorType(x.shape, dtype)


def _cast_vjp(ct, out, x, *, dtype):
    if x.dtype not in ("float32", "float64") or dtype not in ("float32", "float64"):
        return [None]
    return [apply("cast", ct, dtype=x.dtype)]


def _cast_scalar(dtype: str) -> str:
    return "({0} != 0)" if dtype == "bool" else "{0}"


def _cast_examples(rng, dtype):
    x = rng.normal(size=(3, 4)) * 3
    other = "float32" if dtype == "float64" else "float64"
    return [Example((x.astype(other),), {"dtype": dtype}, fd_eps=0.25),
            Example((x.astype(dtype),), {"dtype": "int32"}, wrt=()),
            Example((x.astype(dtype),), {"dtype": "bool"}, wrt=()),
            Example((x > 0,), {"dtype": dtype}, wrt=())]


register(OpDef("cast", ELEMENTWISE, _cast_infer, lambda x, *, dtype: np.asarray(x).astype(dtype),
               _cast_vjp, scalar=_cast_scalar, examples=_cast_examples))  # type: ignore[arg-type]


def _clip_infer(x: TensorType, lo: TensorType, hi: TensorType) -> TensorType:
    dtype = same_dtype("clip", x, lo, hi)
    return TensorType(broadcast_shapes("clip", x.shape, lo.shape, hi.shape), dtype)


def _clip_vjp(ct, out, x, lo, hi):
    inside = apply("logical_and", apply("greater_equal", x, lo), apply("less_equal", x, hi))
    return [ct * apply("cast", inside, dtype=ct.dtype), None, None]


def _clip_examples(rng, dtype):
    x = rng.uniform(-2, 2, size=(3, 4))
    x = np.where(np.abs(np.abs(x) - 1) < 0.1, x * 0.5, x)
    return [Example((x.astype(dtype), np.asarray(-1, dtype), np.asarray(1, dtype)), wrt=(0,))]


register(OpDef("clip", ELEMENTWISE, _clip_infer,
               lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi).astype(np.asarray(x).dtype),
               _clip_vjp, scalar=_MIN.format(_MAX, "{2}"), examples=_clip_examples))


# ---- builders -------------------------------------------------------------------------------
def _unary_builder(name: str):
    def f(x: Any) -> Node:
        return apply(name, as_node(x))
    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}(x)``."
    return f


def _binary_builder(name: str):
    def f(x: Any, y: Any) -> Node:
        a, b = as_nodes(name, x, y)
        return apply(name, a, b)
    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}(x, y)`` with NumPy broadcasting."
    return f


UNARY = ["neg", "abs", "sign", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "square",
         "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu", "softplus", "erf", "floor",
         "ceil", "round", "logical_not"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "equal", "not_equal", "less",
          "less_equal", "greater", "greater_equal", "logical_and", "logical_or"]
BUILDERS = {n: _unary_builder(n) for n in UNARY} | {n: _binary_builder(n) for n in BINARY}


def where(condition: Any, x: Any, y: Any) -> Node:
    """Elementwise ``x if condition else y`` with broadcasting."""
    c = as_node(condition)
    a, b = as_nodes("where", x, y)
    return apply("where", c, a, b)


def cast(x: Any, dtype: str) -> Node:
    """Converts ``x`` to ``dtype`` (float to int truncates toward zero, like NumPy)."""
    from kiln.core.ir import canonical_dtype

    x = as_node(x)
    dtype = canonical_dtype(dtype)
    return x if x.dtype == dtype else apply("cast", x, dtype=dtype)


def clip(x: Any, min_value: Any, max_value: Any) -> Node:
    """Limits ``x`` to ``[min_value, max_value]``; the gradient is zero outside."""
    a, lo, hi = as_nodes("clip", x, min_value, max_value)
    return apply("clip", a, lo, hi)


def ones_like(x: Node) -> Node:
    return apply("broadcast_like", _c(1, x), x)


def zeros_like(x: Node) -> Node:
    return apply("broadcast_like", _c(0, x), x)


__all__ = ["BUILDERS", "where", "cast", "clip", "ones_like", "zeros_like", "_c", "_float"]

register(OpDef("stop_gradient", ELEMENTWISE, lambda x: x, lambda x: np.array(x, copy=True),
               differentiable=False, scalar="{0}", examples=_unary_examples(),
               nondiff_reason="blocks gradients by definition",
               view=lambda node, ins, shape: ins[0]))
register(OpDef("identity", ELEMENTWISE, lambda x, *, uid: x,
               lambda x, *, uid: np.array(x, copy=True), lambda ct, out, x, *, uid: [ct],
               scalar="{0}",
               examples=lambda rng, dt: [Example((rng.normal(size=(3, 2)).astype(dt),),
                                                 {"uid": 1})],
               view=lambda node, ins, shape: ins[0]))


def identity(x: Any) -> Node:
    """A distinct node with the value of ``x`` (the functional API tags layer outputs so each
    layer call has its own tensors); optimization removes it."""
    from kiln.core.ir import fresh_uid

    return apply("identity", as_node(x), uid=fresh_uid())
