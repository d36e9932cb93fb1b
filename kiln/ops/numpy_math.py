"""``kiln.ops.numpy``, continued: elementwise math the core has no primitive for.

Every function here is a composite of the core's primitives (so its gradient and its kernels
come from theirs): the inverse trigonometric functions are a rational approximation of
``arctan`` with range reduction (Cephes' ``atan``, accurate to the float type's precision),
the inverse hyperbolic ones are ``log1p`` forms that keep precision near 0 and switch to
``log(2x)`` before ``x * x`` overflows. Integer division (``floor_divide``, ``mod``, ``gcd``)
computes in float64 with an exact correction step: exact for int32, and for int64 below 2**53.
Following Keras, integer (and bool) inputs of float functions compute in floatx.
"""

from __future__ import annotations

import math

import numpy as np

import kiln.config
from kiln.ops import _G, _dual

_N = _G.as_node
_FLOATS = ("float32", "float64")
_INTS = ("int32", "int64")


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _f(x):
    """``x`` as a float node (ints and bools in floatx, as Keras does)."""
    x = _N(x)
    return x if x.dtype in _FLOATS else _G.cast(x, kiln.config.floatx())


def _is_node(v):
    return isinstance(v, _G.Node) or hasattr(v, "__kiln_node__")


def _promote(x1, x2):
    """Both operands as nodes of one dtype: a Python number or array takes the symbolic
    operand's dtype; two tensors of different dtypes meet in the wider (float beats int)."""
    if _is_node(x1) and not _is_node(x2) and not isinstance(x2, np.ndarray):
        a = _N(x1)
        return a, _N(x2, a.dtype)
    if _is_node(x2) and not _is_node(x1) and not isinstance(x1, np.ndarray):
        b = _N(x2)
        return _N(x1, b.dtype), b
    a, b = _N(x1), _N(x2)
    if a.dtype == b.dtype:
        return a, b
    order = ["bool", "int32", "int64", "float32", "float64"]
    floats = [d for d in (a.dtype, b.dtype) if d in _FLOATS]
    dtype = max(floats, key=order.index) if floats else max(a.dtype, b.dtype, key=order.index)
    return (a if a.dtype == dtype else _G.cast(a, dtype)), (b if b.dtype == dtype
                                                            else _G.cast(b, dtype))


def _fpair(x1, x2):
    a, b = _promote(x1, x2)
    return _f(a), _f(b)


def _pabs(x):
    """|x| as ``where(x < 0, -x, x)``: its derivative at 0 is 1 (abs's sign() gives 0), so
    odd functions written as ``s * g(|x|)`` keep their derivative at 0."""
    return _G.where(_G.less(x, _c(0, x)), -x, x)


def _psign(x):
    return _G.where(_G.less(x, _c(0, x)), _c(-1, x), _c(1, x))


# ---- trigonometric ------------------------------------------------------------------------------
# Cephes atan: atan(x) = x + x z P(z) / Q(z), z = x*x, on |x| <= 0.66 after range reduction
_ATAN_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1,
           -7.500855792314704667340e1, -1.228866684490136173410e2,
           -6.485021904942025371773e1)
_ATAN_Q = (2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964390e2)
_MOREBITS = 6.123233995736765886130e-17  # pi/2 - float64(pi/2)


def _atan_pos(u):
    """arctan of u >= 0 (u = inf gives pi/2)."""
    big = _G.greater(u, _c(2.414213562373095, u))  # tan(3 pi / 8)
    mid = _G.greater(u, _c(0.66, u))
    one = _c(1, u)
    r = _G.where(big, -one / _G.where(big, u, one),
                 _G.where(mid, (u - one) / (u + one), u))
    y0 = _G.where(big, _c(math.pi / 2, u), _G.where(mid, _c(math.pi / 4, u), _c(0, u)))
    extra = _G.where(big, _c(_MOREBITS, u), _G.where(mid, _c(_MOREBITS / 2, u), _c(0, u)))
    z = r * r
    p = _c(_ATAN_P[0], u)
    for k in _ATAN_P[1:]:
        p = p * z + _c(k, u)
    q = z + _c(_ATAN_Q[0], u)
    for k in _ATAN_Q[1:]:
        q = q * z + _c(k, u)
    return y0 + ((r * z * p / q + extra) + r)


def _arctan(x):
    x = _f(x)
    out = _psign(x) * _atan_pos(_pabs(x))
    return _G.where(_G.equal(x, _c(0, x)), x, out)  # keeps -0.0 (derivative 1 at 0)


def _signbit(x):
    x = _N(x)
    if x.dtype == "bool":
        return _G.cast(_G.zeros_like(x), "bool")
    neg = _G.less(x, _c(0, x))
    if x.dtype not in _FLOATS:
        return neg
    zero = _G.equal(x, _c(0, x))
    return _G.logical_or(neg, _G.logical_and(zero, _G.less(_c(1, x) / x, _c(0, x))))


def _arctan2(x1, x2):
    y, x = _fpair(x1, x2)
    pi = _c(math.pi, x)
    one = _c(1, x)
    ysign = _G.where(_signbit(y), -one, one)
    xneg = _signbit(x)
    xzero = _G.equal(x, _c(0, x))
    ratio = _G.where(xzero, one, y / _G.where(xzero, one, x))
    a = _arctan(ratio)
    both_inf = _G.logical_and(_G.equal(_G.abs(x), _c(np.inf, x)),
                              _G.equal(_G.abs(y), _c(np.inf, y)))
    a = _G.where(both_inf, ysign * _G.where(xneg, -one, one) * _c(math.pi / 4, x), a)
    base = _G.where(xneg, a + ysign * pi, a)
    yzero = _G.equal(y, _c(0, y))
    at_x0 = _G.where(yzero, _G.where(xneg, ysign * pi, ysign * _c(0, x)),
                     ysign * _c(math.pi / 2, x))
    out = _G.where(xzero, at_x0, base)
    return _G.where(_G.logical_or(_G.not_equal(x, x), _G.not_equal(y, y)), x + y, out)


def _one_minus_sq(x):
    one = _c(1, x)
    return _G.sqrt((one - x) * (one + x))


def _arcsin(x):
    x = _f(x)
    return _arctan2(x, _one_minus_sq(x))


def _arccos(x):
    x = _f(x)
    return _arctan2(_one_minus_sq(x), x)


def _tan(x):
    x = _f(x)
    return _G.sin(x) / _G.cos(x)


arctan, arctan2 = _dual(_arctan, "arctan"), _dual(_arctan2, "arctan2")
arcsin, arccos, tan = _dual(_arcsin, "arcsin"), _dual(_arccos, "arccos"), _dual(_tan, "tan")
arctan.__doc__ = "Inverse tangent, elementwise (float; ints compute in floatx)."
arctan2.__doc__ = "``arctan(x1 / x2)`` in the quadrant of (x2, x1), with NumPy's signed zeros."
arcsin.__doc__ = "Inverse sine (NaN outside [-1, 1])."
arccos.__doc__ = "Inverse cosine (NaN outside [-1, 1])."
tan.__doc__ = "Tangent, ``sin(x) / cos(x)``."


def _deg2rad(x):
    x = _f(x)
    return x * _c(math.pi / 180, x)


def _rad2deg(x):
    x = _f(x)
    return x * _c(180 / math.pi, x)


deg2rad, rad2deg = _dual(_deg2rad, "deg2rad"), _dual(_rad2deg, "rad2deg")
deg2rad.__doc__ = "Degrees to radians."
rad2deg.__doc__ = "Radians to degrees."


def _sinc(x):
    x = _f(x)
    zero = _G.equal(x, _c(0, x))
    px = _c(math.pi, x) * _G.where(zero, _c(1, x), x)
    return _G.where(zero, _c(1, x), _G.sin(px) / px)


sinc = _dual(_sinc, "sinc")
sinc.__doc__ = "``sin(pi x) / (pi x)``, 1 at 0."


# ---- hyperbolic ---------------------------------------------------------------------------------
def _sinh(x):
    x = _f(x)
    u = _pabs(x)
    cut = _c(20.0, x)  # beyond, exp(-u) is below the precision of exp(u)
    us = _G.minimum(u, cut)
    small = (_G.expm1(us) - _G.expm1(-us)) * _c(0.5, x)
    return _psign(x) * _G.where(_G.greater(u, cut), _half_exp(_G.maximum(u, cut)), small)


def _half_exp(u):
    """exp(u) / 2 without overflowing before the result does: exp(u/2) * (exp(u/2) / 2)."""
    h = _G.exp(u * _c(0.5, u))
    return h * (h * _c(0.5, u))


def _cosh(x):
    x = _f(x)
    u = _pabs(x)
    cut = _c(20.0, x)
    us = _G.minimum(u, cut)
    small = (_G.exp(us) + _G.exp(-us)) * _c(0.5, x)
    return _G.where(_G.greater(u, cut), _half_exp(_G.maximum(u, cut)), small)


def _big(x):
    """Where ``x * x`` is about to lose the 1 in ``1 + x * x``: log(2x) is then exact."""
    return _c(1e8 if x.dtype == "float64" else 1e4, x)


def _arcsinh(x):
    x = _f(x)
    u = _pabs(x)
    big = _big(x)
    one = _c(1, x)
    us = _G.minimum(u, big)
    small = _G.log1p(us + us * us / (one + _G.sqrt(one + us * us)))
    large = _G.log(_G.maximum(u, big)) + _c(math.log(2), x)
    return _psign(x) * _G.where(_G.less(u, big), small, large)


def _arccosh(x):
    x = _f(x)
    big = _big(x)
    one = _c(1, x)
    xs = _G.minimum(x, big)
    t = xs - one
    small = _G.log1p(t + _G.sqrt(t) * _G.sqrt(t + _c(2, x)))
    large = _G.log(_G.maximum(x, big)) + _c(math.log(2), x)
    return _G.where(_G.less(x, big), small, large)


def _arctanh(x):
    x = _f(x)
    u = _pabs(x)  # odd: log1p near -1 would lose the precision of 2x / (1 - x)
    return _psign(x) * _c(0.5, x) * _G.log1p(_c(2, x) * u / (_c(1, x) - u))


sinh, cosh = _dual(_sinh, "sinh"), _dual(_cosh, "cosh")
arcsinh, arccosh, arctanh = (_dual(_arcsinh, "arcsinh"), _dual(_arccosh, "arccosh"),
                             _dual(_arctanh, "arctanh"))
sinh.__doc__ = "Hyperbolic sine, ``(expm1(x) - expm1(-x)) / 2`` (precise near 0)."
cosh.__doc__ = "Hyperbolic cosine."
arcsinh.__doc__ = "Inverse hyperbolic sine (log1p form; log(2|x|) for large |x|)."
arccosh.__doc__ = "Inverse hyperbolic cosine (NaN below 1)."
arctanh.__doc__ = "Inverse hyperbolic tangent (+-inf at +-1, NaN outside)."


# ---- exponents and logarithms -------------------------------------------------------------------
def _exp2(x):
    x = _f(x)
    return _G.exp(x * _c(math.log(2), x))


def _log2(x):
    x = _f(x)
    return _G.log(x) * _c(1 / math.log(2), x)


def _log10(x):
    x = _f(x)
    return _G.log(x) * _c(1 / math.log(10), x)


def _cbrt(x):
    x = _f(x)
    u = _pabs(x)
    ok = _G.logical_and(_G.greater(u, _c(0, x)), _G.less(u, _c(np.inf, x)))
    us = _G.where(ok, u, _c(1, x))
    y = _G.pow(us, _c(1 / 3, x))  # pow's 1/3 is inexact: one Newton step to within an ulp
    y = y - (y * y * y - us) / (_c(3, x) * y * y)
    return _psign(x) * _G.where(ok, y, u)


def _logaddexp(x1, x2):
    a, b = _fpair(x1, x2)
    m = _G.maximum(a, b)
    same = _G.equal(a, b)  # both -inf (or both inf): a - b is NaN
    d = _G.where(same, _c(0, a), a - b)
    return _G.where(same, a + _c(math.log(2), a), m + _G.log1p(_G.exp(-_G.abs(d))))


def _logaddexp2(x1, x2):
    a, b = _fpair(x1, x2)
    ln2 = _c(math.log(2), a)
    return _logaddexp(a * ln2, b * ln2) / ln2


def _ldexp(x1, x2):
    x2 = _N(x2) if _is_node(x2) else _N(np.asarray(x2))
    if x2.dtype not in _INTS:
        raise TypeError(f"ldexp: the exponents must be integers, received {x2.dtype}")
    x1 = _f(x1)
    return x1 * _G.pow(_c(2.0, x1), _G.cast(x2, x1.dtype))


exp2, log2, log10, cbrt = (_dual(_exp2, "exp2"), _dual(_log2, "log2"), _dual(_log10, "log10"),
                           _dual(_cbrt, "cbrt"))
logaddexp, logaddexp2 = _dual(_logaddexp, "logaddexp"), _dual(_logaddexp2, "logaddexp2")
ldexp = _dual(_ldexp, "ldexp")
exp2.__doc__ = "``2 ** x``."
log2.__doc__ = "Base-2 logarithm."
log10.__doc__ = "Base-10 logarithm."
cbrt.__doc__ = "Real cube root (negative for negative x)."
logaddexp.__doc__ = "``log(exp(x1) + exp(x2))``, stable (``max + log1p(exp(-|x1 - x2|))``)."
logaddexp2.__doc__ = "``log2(2 ** x1 + 2 ** x2)``, stable."
ldexp.__doc__ = "``x1 * 2 ** x2`` for integer exponents ``x2``."


# ---- rounding and division ----------------------------------------------------------------------
def _trunc(x):
    x = _N(x)
    if x.dtype not in _FLOATS:
        return x
    return _G.where(_G.less(x, _c(0, x)), _G.ceil(x), _G.floor(x))


def _fabs(x):
    return _G.abs(_f(x))


def _int_floordiv(a, b):
    """Floor division of integer tensors through float64 with an exact correction (0 where
    b == 0, as NumPy)."""
    fa, fb = _G.cast(a, "float64"), _G.cast(b, "float64")
    bzero = _G.equal(fb, _c(0, fb))
    fb1 = _G.where(bzero, _c(1, fb), fb)
    q = _G.floor(fa / fb1)
    r = fa - q * fb1  # exact in float64 for |a|, |b| < 2**53; fix q by one where rounding hit
    q = _G.where(_G.logical_and(_G.greater(fb1, _c(0, fb)), _G.less(r, _c(0, r))),
                 q - _c(1, q), q)
    q = _G.where(_G.logical_and(_G.less(fb1, _c(0, fb)), _G.greater(r, _c(0, r))),
                 q - _c(1, q), q)
    r = fa - q * fb1
    q = _G.where(_G.logical_and(_G.greater(fb1, _c(0, fb)), _G.greater_equal(r, fb1)),
                 q + _c(1, q), q)
    q = _G.where(_G.logical_and(_G.less(fb1, _c(0, fb)), _G.less_equal(r, fb1)),
                 q + _c(1, q), q)
    return _G.cast(_G.where(bzero, _c(0, q), q), a.dtype)


def _floor_divide(x1, x2):
    a, b = _promote(x1, x2)
    if a.dtype == "bool":
        a, b = _G.cast(a, "int32"), _G.cast(b, "int32")
    if a.dtype in _INTS:
        return _int_floordiv(a, b)
    return _G.floor(a / b)


def _mod(x1, x2):
    a, b = _promote(x1, x2)
    if a.dtype == "bool":
        a, b = _G.cast(a, "int32"), _G.cast(b, "int32")
    if a.dtype in _INTS:
        return _G.where(_G.equal(b, _c(0, b)), _c(0, a), a - _int_floordiv(a, b) * b)
    r = a - _G.floor(a / b) * b
    # the sign of the divisor, as np.mod; a result that rounded onto b is 0
    r = _G.where(_G.equal(r, b), _c(0, r), r)
    return r


def _fmod(x1, x2):
    a, b = _promote(x1, x2)
    if a.dtype == "bool":
        a, b = _G.cast(a, "int32"), _G.cast(b, "int32")
    if a.dtype in _INTS:
        r = _mod(_pabs(a), _pabs(b))
        return _G.where(_G.less(a, _c(0, a)), -r, r)
    return a - _trunc(a / b) * b


def _divide_no_nan(x1, x2):
    a, b = _fpair(x1, x2)
    zero = _G.equal(b, _c(0, b))
    return _G.where(zero, _c(0, a), a / _G.where(zero, _c(1, b), b))


trunc, fabs = _dual(_trunc, "trunc"), _dual(_fabs, "fabs")
floor_divide, mod, fmod = (_dual(_floor_divide, "floor_divide"), _dual(_mod, "mod"),
                           _dual(_fmod, "fmod"))
divide_no_nan = _dual(_divide_no_nan, "divide_no_nan")
trunc.__doc__ = "Rounds toward zero (ints unchanged)."
fabs.__doc__ = "Absolute value as a float."
floor_divide.__doc__ = "``floor(x1 / x2)`` (ints: exact integer floor division, 0 by 0)."
mod.__doc__ = "Remainder with the sign of the divisor (``np.mod``; ints: 0 for a 0 divisor)."
fmod.__doc__ = "Remainder with the sign of the dividend (``np.fmod``)."
divide_no_nan.__doc__ = "``x1 / x2``, 0 where ``x2`` is 0."


def _gcd(x1, x2):
    a, b = _promote(x1, x2)
    if a.dtype not in _INTS:
        raise TypeError(f"gcd: expected integer tensors, received {a.dtype} and {b.dtype}")
    a, b = _pabs(a), _pabs(b)
    # Euclid: the worst case (consecutive Fibonacci numbers) takes 46 steps below 2**31
    for _ in range(47 if a.dtype == "int32" else 78):
        bzero = _G.equal(b, _c(0, b))
        a, b = _G.where(bzero, a, b), _G.where(bzero, _c(0, b), _mod(a, _G.where(bzero,
                                                                               _c(1, b), b)))
    return a


def _lcm(x1, x2):
    a, b = _promote(x1, x2)
    g = _gcd(a, b)
    zero = _G.equal(g, _c(0, g))
    return _pabs(_int_floordiv(a, _G.where(zero, _c(1, g), g)) * b)


gcd, lcm = _dual(_gcd, "gcd"), _dual(_lcm, "lcm")
gcd.__doc__ = "Greatest common divisor of integers (non-negative; exact below 2**53)."
lcm.__doc__ = "Least common multiple of integers (non-negative)."


# ---- comparisons and selections -----------------------------------------------------------------
def _hypot(x1, x2):
    a, b = _fpair(x1, x2)
    a, b = _G.abs(a), _G.abs(b)
    hi, lo = _G.maximum(a, b), _G.minimum(a, b)
    zero = _G.equal(hi, _c(0, hi))
    inf = _G.logical_or(_G.equal(a, _c(np.inf, a)), _G.equal(b, _c(np.inf, b)))
    r = lo / _G.where(zero, _c(1, hi), hi)
    out = hi * _G.sqrt(_c(1, r) + r * r)
    return _G.where(inf, _c(np.inf, a), _G.where(zero, _c(0, hi), out))


def _heaviside(x1, x2):
    a, b = _fpair(x1, x2)
    out = _G.where(_G.less(a, _c(0, a)), _c(0, a),
                   _G.where(_G.greater(a, _c(0, a)), _c(1, a), b))
    return _G.where(_G.not_equal(a, a), a, out)


def _fextreme(name):
    pick = _G.maximum if name == "fmax" else _G.minimum

    def f(x1, x2):
        a, b = _promote(x1, x2)
        if a.dtype not in _FLOATS:
            return pick(a, b)
        return _G.where(_G.not_equal(a, a), b, _G.where(_G.not_equal(b, b), a, pick(a, b)))
    f.__name__ = name
    return f


hypot, heaviside = _dual(_hypot, "hypot"), _dual(_heaviside, "heaviside")
fmax, fmin = _dual(_fextreme("fmax"), "fmax"), _dual(_fextreme("fmin"), "fmin")
signbit = _dual(_signbit, "signbit")
hypot.__doc__ = "``sqrt(x1**2 + x2**2)`` without overflow (scaled by the larger)."
heaviside.__doc__ = "0 where x1 < 0, 1 where x1 > 0, x2 where x1 == 0."
fmax.__doc__ = "Elementwise maximum that ignores NaN (NaN only if both are)."
fmin.__doc__ = "Elementwise minimum that ignores NaN (NaN only if both are)."
signbit.__doc__ = "Whether the sign bit is set (``-0.0`` included), as bool."


def _isclose(x1, x2, rtol=1e-5, atol=1e-8, equal_nan=False):
    a, b = _promote(x1, x2)
    if a.dtype not in _FLOATS:
        a, b = _G.cast(a, "float64"), _G.cast(b, "float64")
    same = _G.equal(a, b)  # equal infinities
    finite = _G.less(_G.abs(a - b), _c(np.inf, a))
    close = _G.less_equal(_G.abs(a - b), _c(atol, a) + _c(rtol, a) * _G.abs(b))
    out = _G.logical_or(same, _G.logical_and(finite, close))
    if equal_nan:
        out = _G.logical_or(out, _G.logical_and(_G.not_equal(a, a), _G.not_equal(b, b)))
    return out


def _allclose(x1, x2, rtol=1e-5, atol=1e-8, equal_nan=False):
    ok = _isclose(x1, x2, rtol, atol, equal_nan)
    return _G.greater(_G.min(_G.cast(ok, "float32")), 0.0)


def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    x = _N(x)
    if x.dtype not in _FLOATS:
        return x
    info = np.finfo(x.dtype)
    hi = info.max if posinf is None else posinf
    lo = info.min if neginf is None else neginf
    x = _G.where(_G.not_equal(x, x), _c(nan, x), x)
    x = _G.where(_G.equal(x, _c(np.inf, x)), _c(hi, x), x)
    return _G.where(_G.equal(x, _c(-np.inf, x)), _c(lo, x), x)


def _isposinf(x):
    x = _N(x)
    if x.dtype not in _FLOATS:
        return _G.cast(_G.zeros_like(x), "bool")
    return _G.equal(x, _c(np.inf, x))


def _isneginf(x):
    x = _N(x)
    if x.dtype not in _FLOATS:
        return _G.cast(_G.zeros_like(x), "bool")
    return _G.equal(x, _c(-np.inf, x))


isclose, allclose = _dual(_isclose, "isclose"), _dual(_allclose, "allclose")
nan_to_num = _dual(_nan_to_num, "nan_to_num")
isposinf, isneginf = _dual(_isposinf, "isposinf"), _dual(_isneginf, "isneginf")
isclose.__doc__ = "``|x1 - x2| <= atol + rtol * |x2|`` elementwise (equal infinities close)."
allclose.__doc__ = "Whether :func:`isclose` holds everywhere (a bool scalar)."
nan_to_num.__doc__ = "NaN -> ``nan``, +-inf -> ``posinf``/``neginf`` (the dtype's extremes)."
isposinf.__doc__ = "Whether x is +inf."
isneginf.__doc__ = "Whether x is -inf."


# ---- complex parts of real tensors --------------------------------------------------------------
def _real(x):
    return _G.identity(_N(x))


def _imag(x):
    return _G.zeros_like(_N(x))


def _isreal(x):
    return _G.cast(_G.ones_like(_N(x)), "bool")


def _angle(x):
    x = _f(x)
    out = _G.where(_signbit(x), _c(math.pi, x), _c(0, x))
    return _G.where(_G.not_equal(x, x), x, out)


real, imag, isreal = _dual(_real, "real"), _dual(_imag, "imag"), _dual(_isreal, "isreal")
conj = conjugate = _dual(_real, "conj")
angle = _dual(_angle, "angle")
real.__doc__ = "The real part: kiln's tensors are real, so ``x`` itself."
imag.__doc__ = "The imaginary part of a real tensor: zeros."
isreal.__doc__ = "True everywhere (kiln's tensors are real)."
conj.__doc__ = "The complex conjugate of a real tensor: ``x`` itself."
angle.__doc__ = "The argument of a real number: pi where the sign bit is set, else 0."

__all__ = [n for n in list(globals()) if not n.startswith("_") and n not in (
    "annotations", "math", "np", "kiln")]
