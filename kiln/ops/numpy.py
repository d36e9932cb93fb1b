"""``kiln.ops.numpy``: Keras 3's NumPy-like ops (graph and eager: see ``kiln.ops``).

The ops the core has no primitive for are composites of primitives, so their gradients come
from the primitives' (docs/ops.md lists their costs): ``cumsum``/``cumprod`` are log-depth
scans (Hillis-Steele: ceil(log2 n) shifted adds/products), ``sort``/``top_k`` gather with
the ``take_along_axis`` op at the indices of the ``argsort`` op (stable, NaN last),
``tile``/``repeat`` concatenate copies, ``tril``/``triu`` mask with a constant.
"""

from __future__ import annotations

# ruff: noqa: A001
import builtins

import numpy as np

import kiln.config
from kiln.ops import _G, _dual, _symbolic
from kiln.ops._shapes import created

_N = _G.as_node


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _ax(op, axis, ndim):
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim


def _static(op, x, axis):
    n = x.shape[axis]
    if n is None:
        raise ValueError(f"{op}: axis {axis} of a tensor of shape {x.shape} must have a known "
                         "size")
    return n


def _flat(x):
    return _G.reshape(x, (-1,))


# ---- creation ------------------------------------------------------------------------------------
def _float_default(dtype):
    return dtype or kiln.config.floatx()


def eye(N, M=None, k=0, dtype=None):
    """The identity-like matrix of shape (N, M) with ones on diagonal ``k`` (a NumPy array)."""
    return created(np.eye(int(N), None if M is None else int(M), int(k),
                          dtype=_float_default(dtype)))


def arange(start, stop=None, step=None, dtype=None):
    """Evenly spaced values in [start, stop) (a NumPy array, a constant node inside a traced
    step; ints give int32, else floatx)."""
    step = 1 if step is None else step
    if dtype is None:
        ints = builtins.all(isinstance(v, int | np.integer) for v in (start, stop, step)
                            if v is not None)
        dtype = "int32" if ints else kiln.config.floatx()
    if stop is None:
        start, stop = 0, start
    return created(np.arange(start, stop, step, dtype=dtype))


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """``num`` evenly spaced values from start to stop (a NumPy array; dtype floatx)."""
    out = np.linspace(start, stop, int(num), endpoint=endpoint, retstep=retstep, axis=axis)
    if retstep:
        return created(out[0].astype(_float_default(dtype))), out[1]
    return created(out.astype(_float_default(dtype)))


def identity(n, dtype=None):
    """Keras' ``identity(n)``: the n x n identity matrix (a NumPy array). Given a tensor, kiln's
    tagging op: a distinct node with the value of ``n`` (the functional API uses it)."""
    if isinstance(n, int | np.integer) and not isinstance(n, bool):
        return eye(n, dtype=dtype)
    return _identity_op(n)


_identity_op = _dual(_G.identity, "identity")


def _like(op, fill):
    def f(x, dtype=None):
        x = _N(x)
        out = _G.ones_like(x) if fill == 1 else _G.zeros_like(x)
        return out if dtype is None else _G.cast(out, dtype)
    f.__name__ = op
    f.__doc__ = f"{'Ones' if fill else 'Zeros'} of the shape (and dtype, or ``dtype``) of ``x``."
    return _dual(f)


ones_like = _like("ones_like", 1)
zeros_like = _like("zeros_like", 0)


def _full_like(x, fill_value, dtype=None):
    x = _N(x)
    dtype = dtype or x.dtype
    if _symbolic((fill_value,)):  # an array fill value (a placeholder on the eager path)
        fill = _G.cast(_N(fill_value), dtype)
    else:
        fill = _G.constant(np.asarray(fill_value, dtype))
    return _G.broadcast_like(fill, _G.cast(x, dtype))


full_like = _dual(_full_like, "full_like")
full_like.__doc__ = "``fill_value`` in the shape of ``x`` (dtype of ``x`` unless given)."


# ---- elementwise ---------------------------------------------------------------------------------
def _ew(name):
    return _dual(getattr(_G, name), name)


abs = absolute = _ew("abs")
negative = neg = _ew("neg")
sign, exp, expm1, log, log1p = (_ew(n) for n in ("sign", "exp", "expm1", "log", "log1p"))
sqrt, rsqrt, square, reciprocal = (_ew(n) for n in ("sqrt", "rsqrt", "square", "reciprocal"))
sin, cos, tanh, erf, floor, ceil = (_ew(n) for n in ("sin", "cos", "tanh", "erf", "floor", "ceil"))


def _ew2(name, public):
    """A binary elementwise op with Keras' argument names ``(x1, x2)``."""
    fn = getattr(_G, name)

    def f(x1, x2):
        return fn(x1, x2)
    f.__name__, f.__doc__ = public, fn.__doc__
    return _dual(f, name)


add, subtract, multiply, divide = (_ew2(n, p) for n, p in (
    ("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("div", "divide")))
sub, mul, div, true_divide = subtract, multiply, divide, divide
power = pow = _ew2("pow", "power")
maximum, minimum = _ew2("maximum", "maximum"), _ew2("minimum", "minimum")
equal, not_equal, less, less_equal = (_ew2(n, n) for n in ("equal", "not_equal", "less",
                                                            "less_equal"))
greater, greater_equal = _ew2("greater", "greater"), _ew2("greater_equal", "greater_equal")
logical_and, logical_or = _ew2("logical_and", "logical_and"), _ew2("logical_or", "logical_or")
logical_not = _ew("logical_not")


def _logical_xor(x1, x2):
    return _G.not_equal(_G.cast(_N(x1), "bool"), _G.cast(_N(x2), "bool"))


logical_xor = _dual(_logical_xor, "logical_xor")
cast = _dual(_G.cast, "cast")


def _round(x, decimals=0):
    x = _N(x)
    if decimals == 0:
        return _G.round(x)
    scale = _c(10.0 ** decimals, x)
    return _G.round(x * scale) / scale


round = _dual(_round, "round")
round.__doc__ = "Rounds half to even (``np.round``), to ``decimals`` digits."


def _clip(x, x_min, x_max):
    return _G.clip(x, x_min, x_max)


clip = _dual(_clip, "clip")
clip.__doc__ = "``x`` limited to [x_min, x_max]; the gradient is zero outside."


def _where(condition, x1=None, x2=None):
    if x1 is None or x2 is None:
        raise ValueError("where: kiln needs both x1 and x2 (the one-argument form, nonzero(), "
                         "has a data-dependent shape)")
    return _G.where(condition, x1, x2)


where = _dual(_where, "where")
where.__doc__ = "Elementwise ``x1 if condition else x2`` with broadcasting."


def _isnan(x):
    x = _N(x)
    if x.dtype not in ("float32", "float64"):
        return _G.cast(_G.zeros_like(x), "bool")
    return _G.not_equal(x, x)


def _isinf(x):
    x = _N(x)
    if x.dtype not in ("float32", "float64"):
        return _G.cast(_G.zeros_like(x), "bool")
    return _G.equal(_G.abs(x), _c(np.inf, x))


def _isfinite(x):
    x = _N(x)
    if x.dtype not in ("float32", "float64"):
        return _G.cast(_G.ones_like(x), "bool")
    return _G.less(_G.abs(x), _c(np.inf, x))


isnan, isinf, isfinite = _dual(_isnan, "isnan"), _dual(_isinf, "isinf"), \
    _dual(_isfinite, "isfinite")


# ---- reductions ----------------------------------------------------------------------------------
def _reducer(name):
    fn = getattr(_G, name)

    def f(x, axis=None, keepdims=False, initial=None):
        out = fn(x, axis=axis, keepdims=keepdims)
        if initial is not None:
            out = (_G.maximum if name == "max" else _G.minimum)(out, _c(initial, out))
        return out
    f.__name__ = name
    f.__doc__ = fn.__doc__
    return _dual(f, name)


sum, mean, logsumexp = (_dual(getattr(_G, n), n) for n in ("sum", "mean", "logsumexp"))
max, min = _reducer("max"), _reducer("min")


def _prod(x, axis=None, keepdims=False, dtype=None):
    x = _N(x)
    return _G.prod(x if dtype is None or x.dtype == dtype else _G.cast(x, dtype), axis=axis,
                   keepdims=keepdims)


prod = _dual(_prod, "prod")
prod.__doc__ = "Product of ``x`` over ``axis`` (all when None), computed in ``dtype`` if given."


def _no_initial(name, reducer):
    def f(x, axis=None, keepdims=False):
        return reducer.graph(x, axis=axis, keepdims=keepdims)
    f.__name__, f.__doc__ = name, reducer.__doc__
    return _dual(f, name)


amax, amin = _no_initial("amax", max), _no_initial("amin", min)


def _arg(name):
    fn = getattr(_G, name)

    def f(x, axis=None, keepdims=False):
        x = _N(x)
        if axis is None:
            out = fn(_flat(x), axis=0)
            return _G.reshape(out, (1,) * x.ndim) if keepdims else out
        return fn(x, axis=axis, keepdims=keepdims)
    f.__name__ = name
    f.__doc__ = f"Index (int64) of the {name[3:]}imum along ``axis`` (None: of the flat array)."
    return _dual(f, name)


argmax, argmin = _arg("argmax"), _arg("argmin")


def _var(x, axis=None, keepdims=False):
    x = _N(x)
    if x.dtype not in ("float32", "float64"):
        x = _G.cast(x, kiln.config.floatx())
    m = _G.mean(x, axis=axis, keepdims=True)
    return _G.mean(_G.square(x - m), axis=axis, keepdims=keepdims)


def _std(x, axis=None, keepdims=False):
    return _G.sqrt(_var(x, axis, keepdims))


var = _dual(_var, "var")
var.__doc__ = "Population variance (``ddof=0``) over ``axis``."
std = _dual(_std, "std")
std.__doc__ = "Population standard deviation (``ddof=0``) over ``axis``."


def _truthy(x):
    x = _N(x)
    return x if x.dtype == "bool" else _G.not_equal(x, _c(0, x))


def _any(x, axis=None, keepdims=False):
    return _G.greater(_G.max(_G.cast(_truthy(x), "float32"), axis=axis, keepdims=keepdims),
                      0.0)


def _all(x, axis=None, keepdims=False):
    return _G.greater(_G.min(_G.cast(_truthy(x), "float32"), axis=axis, keepdims=keepdims),
                      0.0)


any, all = _dual(_any, "any"), _dual(_all, "all")
any.__doc__ = "Whether any element along ``axis`` is true (nonzero; NaN counts), as bool."
all.__doc__ = "Whether every element along ``axis`` is true (nonzero; NaN counts), as bool."


def _norm(x, ord=None, axis=None, keepdims=False):
    x = _N(x)
    if x.dtype not in ("float32", "float64"):
        x = _G.cast(x, kiln.config.floatx())
    if axis is None and (ord is None or x.ndim == 1):
        out = _vector_norm(_flat(x), ord, 0)
        return _G.reshape(out, (1,) * x.ndim) if keepdims else out
    if axis is None:
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    axes = tuple(_ax("norm", int(a), x.ndim) for a in axes)
    if len(axes) == 1:
        out = _vector_norm(x, ord, axes[0], keepdims=True)
    elif len(axes) == 2:
        out = _matrix_norm(x, ord, axes)
    else:
        raise ValueError(f"norm: axis must be an int or a pair, received {axis!r}")
    return out if keepdims else _G.squeeze(out, axes)


def _vector_norm(x, ord, axis, keepdims=False):
    a = _G.abs(x)
    if ord is None or ord == 2:
        return _G.sqrt(_G.sum(_G.square(x), axis=axis, keepdims=keepdims))
    if ord == np.inf:
        return _G.max(a, axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return _G.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _G.sum(_G.cast(_G.not_equal(x, _c(0, x)), x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _G.sum(a, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"norm: ord={ord!r} is a matrix norm; pass a pair of axes")
    p = _c(float(ord), x)
    return _G.pow(_G.sum(_G.pow(a, p), axis=axis, keepdims=keepdims), _c(1.0 / float(ord), x))


def _matrix_norm(x, ord, axes):
    r, c = axes
    a = _G.abs(x)
    if ord in (None, "fro"):
        return _G.sqrt(_G.sum(_G.square(x), axis=axes, keepdims=True))
    if ord in (1, -1):
        col = _G.sum(a, axis=r, keepdims=True)
        return (_G.max if ord == 1 else _G.min)(col, axis=c, keepdims=True)
    if ord in (np.inf, -np.inf):
        row = _G.sum(a, axis=c, keepdims=True)
        return (_G.max if ord == np.inf else _G.min)(row, axis=r, keepdims=True)
    raise NotImplementedError(f"norm: the matrix norm ord={ord!r} (singular values) is not "
                              "supported; kiln has 'fro', 1, -1, inf, -inf")


norm = _dual(_norm, "norm")
norm.__doc__ = ("Vector (one axis) or matrix (two axes) norm, ``np.linalg.norm``'s "
                "conventions (``ord`` None/2, 1, inf, -inf, 0, p; matrices 'fro', 1, -1, inf, "
                "-inf).")

from kiln.ops._numpy_shape import *  # noqa: E402, F403
from kiln.ops._numpy_shape import __all__ as _shape_all  # noqa: E402
from kiln.ops.numpy_more import *  # noqa: E402, F403
from kiln.ops.numpy_more import __all__ as _more_all  # noqa: E402

__all__ = [n for n in list(globals()) if not n.startswith("_") and n not in (
    "annotations", "builtins", "math", "np", "kiln")] + list(_shape_all) + list(_more_all)
