"""``kiln.ops.numpy``, continued: bitwise ops, special functions, ``unique``, ``slogdet``,
``vectorize``.

* Bitwise ops are the core's integer elementwise ops (``kiln/core/ops/bitwise.py``); bools
  take the logical ops, and shift counts outside [0, bits) give NumPy's results.
* ``i0`` sums its power series (|x| <= 30) or its asymptotic series (beyond), in float64.
* ``nextafter`` steps by one unit in the last place, found from the exponent (``log2``
  corrected to the exact power of two).
* ``unique`` on a tensor needs ``size`` (a static output): it sorts, marks the first of each
  run and finds the j-th mark by counting; on arrays without ``size`` it is NumPy's.
* ``pad``'s modes other than "constant" (``pad_by_mode``): a gather of constant indices per
  padded axis, or copies of a statistic of the axis.
* ``slogdet`` is Gaussian elimination with partial pivoting, unrolled over the (static)
  matrix size: O(n) steps of O(n^2) elementwise work; the gradient flows through it.
"""

from __future__ import annotations

# ruff: noqa: A001
import builtins
import math
import re

import numpy as np

from kiln.ops import _G, _dual
from kiln.ops._numpy_shape import _cumsum, _sl, _static
from kiln.ops.numpy_math import _f, _is_node, _promote

_N = _G.as_node
__all__: list[str] = []


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _export(fn, name, doc, first="tensor"):
    op = _dual(fn, name, first=first)
    op.__doc__ = doc
    globals()[name] = op
    __all__.append(name)
    return op


# ---- bitwise ------------------------------------------------------------------------------------
def _int_operands(op, *xs):
    nodes = list(_promote(*xs)) if len(xs) == 2 else [_N(xs[0])]
    if nodes[0].dtype not in ("bool", "int32", "int64"):
        raise TypeError(f"{op}: expected integer or bool tensors, received "
                        f"{', '.join(n.dtype + str(n.shape) for n in nodes)}")
    return nodes


def _bitwise(name, logical):
    def f(x, y):
        a, b = _int_operands(name, x, y)
        if a.dtype == "bool":
            return logical(a, b)
        return _G.apply(name, a, b)
    return f


def _invert(x):
    (a,) = _int_operands("bitwise_invert", x)
    return _G.logical_not(a) if a.dtype == "bool" else _G.apply("bitwise_invert", a)


def _shift(name):
    def f(x, y):
        a, b = _int_operands(name, x, y)
        if a.dtype == "bool":
            a, b = _G.cast(a, "int32"), _G.cast(b, "int32")
        bits = 32 if a.dtype == "int32" else 64
        ok = _G.logical_and(_G.greater_equal(b, _c(0, b)), _G.less(b, _c(bits, b)))
        out = _G.apply(name, a, _G.where(ok, b, _c(0, b)))
        if name == "left_shift":
            return _G.where(ok, out, _c(0, a))
        return _G.where(ok, out, _G.where(_G.less(a, _c(0, a)), _c(-1, a), _c(0, a)))
    return f


_export(_bitwise("bitwise_and", _G.logical_and), "bitwise_and", "Bitwise AND of integers "
        "(logical for bools).")
_export(_bitwise("bitwise_or", _G.logical_or), "bitwise_or", "Bitwise OR of integers.")
_export(_bitwise("bitwise_xor", _G.not_equal), "bitwise_xor", "Bitwise XOR of integers.")
_export(_invert, "bitwise_invert", "Bitwise NOT (``~x``) of integers (logical for bools).")
bitwise_not = globals()["bitwise_invert"]
_export(_shift("left_shift"), "bitwise_left_shift", "``x << y`` (0 for counts >= bits).")
_export(_shift("right_shift"), "bitwise_right_shift", "``x >> y``, arithmetic (sign fill for "
        "counts >= bits).")
left_shift, right_shift = globals()["bitwise_left_shift"], globals()["bitwise_right_shift"]
__all__ += ["bitwise_not", "left_shift", "right_shift"]


# ---- special functions --------------------------------------------------------------------------
_I0_SERIES = [1.0 / math.factorial(k) ** 2 for k in range(61)]  # i0 = sum (x^2/4)^k / k!^2
_I0_ASYM = [1.0]  # i0 ~ e^x / sqrt(2 pi x) * sum c_k x^-k, c_k = ((2k-1)!!)^2 / (k! 8^k)
for _k in range(1, 31):
    _I0_ASYM.append(_I0_ASYM[-1] * (2 * _k - 1) ** 2 / (8 * _k))


def _i0(x):
    x = _N(x)
    out_dtype = "float64" if x.dtype in ("int64", "float64") else _f(x).dtype
    x = _G.cast(x, "float64") if x.dtype != "float64" else x
    a = _G.where(_G.less(x, _c(0, x)), -x, x)
    cut = _c(30.0, x)
    xs = _G.minimum(a, cut)
    t = xs * xs * _c(0.25, x)
    series = _c(_I0_SERIES[-1], x)
    for ck in _I0_SERIES[-2::-1]:
        series = series * t + _c(ck, x)
    xl = _G.maximum(a, cut)
    u = _c(1, x) / xl
    asym = _c(_I0_ASYM[-1], x)
    for ck in _I0_ASYM[-2::-1]:
        asym = asym * u + _c(ck, x)
    asym = asym * _G.exp(xl) / _G.sqrt(_c(2 * math.pi, x) * xl)
    out = _G.where(_G.greater(a, cut), asym, series)
    return out if out_dtype == "float64" else _G.cast(out, out_dtype)


def _nextafter(x1, x2):
    a, b = _promote(x1, x2)
    a, b = _f(a), _f(b)
    if a.dtype != b.dtype:
        a, b = _promote(a, b)
    info = np.finfo(a.dtype)
    p, emin = info.nmant, info.minexp
    mag = _G.abs(a)
    safe = _G.where(_G.logical_and(_G.greater(mag, _c(0, a)), _G.less(mag, _c(np.inf, a))),
                    mag, _c(1, a))
    e = _G.floor(_G.log(safe) * _c(1 / math.log(2), a))
    two = _c(2.0, a)
    e = _G.where(_G.greater(_G.pow(two, e), safe), e - _c(1, a), e)  # 2**e <= safe < 2**(e+1)
    e = _G.where(_G.less_equal(_G.pow(two, e + _c(1, a)), safe), e + _c(1, a), e)
    e = _G.maximum(e, _c(emin, a))
    ulp = _G.pow(two, e - _c(p, a))
    power = _G.logical_and(_G.equal(safe, _G.pow(two, e)), _G.greater(e, _c(emin, a)))
    ulp_down = _G.where(power, ulp * _c(0.5, a), ulp)
    up = _G.greater(b, a)
    away = _G.equal(up, _G.greater(a, _c(0, a)))  # moving away from zero
    step = _G.where(away, mag + ulp, mag - ulp_down)
    step = _G.where(_G.equal(mag, _c(np.inf, a)), _c(info.max, a), step)
    out = _G.where(_G.less(a, _c(0, a)), -step, step)
    tiny = _c(info.smallest_subnormal, a)
    out = _G.where(_G.equal(a, _c(0, a)), _G.where(up, tiny, -tiny), out)
    out = _G.where(_G.equal(a, b), b, out)
    nan = _G.logical_or(_G.not_equal(a, a), _G.not_equal(b, b))
    return _G.where(nan, _c(np.nan, a), out)


_export(_i0, "i0", "The modified Bessel function of the first kind, order 0.")
_export(_nextafter, "nextafter", "The next representable float after ``x1`` toward ``x2``.")


# ---- unique -------------------------------------------------------------------------------------
def _unique_graph(x, return_index, return_inverse, return_counts, size, fill_value):
    x = _N(x)
    f = _G.reshape(x, (-1,))
    n = _static("unique", f, 0)
    order = _G.argsort(f, 0)
    s = _G.take(f, order, axis=0)
    new = _G.not_equal(_sl(s, 0, 1, n), _sl(s, 0, 0, n - 1))  # NaNs are all distinct
    first = _G.concatenate([_G.constant(np.array([True])), new], axis=0)
    c = _cumsum(_G.cast(first, "int32"), 0)  # inclusive count of run starts
    total = _sl(c, 0, n - 1, n)
    j = _G.constant(np.arange(size + 1, dtype=np.int32))
    starts = _G.sum(_G.cast(_G.less_equal(_G.expand_dims(c, 0), _G.expand_dims(j, 1)),
                            "int32"), axis=1)  # index of the j-th run start (n if none)
    pos = _sl(starts, 0, 0, size)
    have = _G.less(_G.constant(np.arange(size, dtype=np.int32)), total)
    at = _G.minimum(pos, _G.constant(np.int32(n - 1)))
    fill = 0 if fill_value is None else fill_value
    out = [_G.where(have, _G.take(s, at, axis=0), _c(fill, s))]
    if return_index:
        out.append(_G.where(have, _G.cast(_G.take(order, at, axis=0), "int32"),
                            _G.constant(np.int32(1))))
    if return_inverse:
        rank = _G.take(c - _G.constant(np.int32(1)), _G.argsort(order, 0), axis=0)
        out.append(_G.reshape(rank, x.shape) if None not in x.shape else rank)
    if return_counts:
        out.append(_G.where(have, _sl(starts, 0, 1, size + 1) - pos, _G.constant(np.int32(0))))
    return out[0] if len(out) == 1 else tuple(out)


_unique_op = _dual(_unique_graph, "unique")


def unique(x, sorted=True, return_index=False, return_inverse=False, return_counts=False,
           axis=None, size=None, fill_value=None):
    """The sorted unique values of ``x`` (flattened), and optionally the index of each's first
    occurrence, the inverse indices and the counts. On a tensor ``size`` is required (a
    static length: truncated, or padded with ``fill_value``, default 0) and ``axis`` must be
    None; on arrays without ``size`` the length is the number of unique values."""
    if not _is_node(x) and size is None:
        out = np.unique(np.asarray(x), return_index=return_index,
                        return_inverse=return_inverse, return_counts=return_counts, axis=axis,
                        equal_nan=False)
        return out
    if axis is not None:
        raise ValueError(f"unique: axis={axis} is supported on NumPy arrays only; on tensors "
                         "the values are flattened (axis=None)")
    if size is None:
        raise ValueError("unique: the number of unique values of a tensor is known only when "
                         "the graph runs; pass size= (a static output length)")
    return _unique_op(x, bool(return_index), bool(return_inverse), bool(return_counts),
                      int(size), fill_value)


__all__ += ["unique"]


# ---- slogdet ------------------------------------------------------------------------------------
def _slogdet(x):
    a = _f(x)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.shape[-1] is None:
        raise ValueError(f"slogdet: needs square matrices of static size, received {a.shape}")
    n = a.shape[-1]
    one, zero = _c(1, a), _c(0, a)
    sign = _G.sum(_G.zeros_like(a), axis=(-2, -1)) + one
    logdet = _G.sum(_G.zeros_like(a), axis=(-2, -1))
    singular = _G.less(logdet, zero)
    rows = np.arange(n)
    for k in range(n):
        col = _G.squeeze(_sl(a, a.ndim - 1, k, k + 1), -1)  # (..., n)
        below = _G.constant(rows >= k)
        p = _G.argmax(_G.where(below, _G.abs(col), _c(-1, a)), axis=-1)  # pivot row
        ep = _G.one_hot(p, n, a.dtype)  # (..., n)
        ek = _G.constant(np.eye(n, dtype=a.dtype)[k])
        rk = _G.squeeze(_sl(a, a.ndim - 2, k, k + 1), -2)
        rp = _G.sum(_G.expand_dims(ep, -1) * a, axis=-2)
        d = _G.expand_dims(rp - rk, -2)
        a = a + _G.expand_dims(ek, -1) * d - _G.expand_dims(ep, -1) * d  # swap rows k, p
        swapped = _G.not_equal(p, _G.constant(np.asarray(k, np.int64)))
        sign = _G.where(swapped, -sign, sign)
        pivot = _G.squeeze(_sl(_G.squeeze(_sl(a, a.ndim - 2, k, k + 1), -2), a.ndim - 2, k,
                               k + 1), -1)
        zero_pivot = _G.equal(pivot, zero)
        singular = _G.logical_or(singular, zero_pivot)
        safe = _G.where(zero_pivot, one, pivot)
        sign = sign * _G.where(_G.less(pivot, zero), -one, one)
        logdet = logdet + _G.log(_G.abs(safe))
        if k + 1 < n:
            colk = _G.squeeze(_sl(a, a.ndim - 1, k, k + 1), -1)
            factors = _G.where(_G.constant(rows > k), colk / _G.expand_dims(safe, -1), zero)
            rowk = _G.squeeze(_sl(a, a.ndim - 2, k, k + 1), -2)
            a = a - _G.expand_dims(factors, -1) * _G.expand_dims(rowk, -2)
    return (_G.where(singular, zero, sign),
            _G.where(singular, _c(-np.inf, logdet), logdet))


_export(_slogdet, "slogdet", "``(sign, log|det|)`` of square matrices (Gaussian elimination "
        "with partial pivoting; a singular matrix gives (0, -inf)).")


# ---- vectorize ----------------------------------------------------------------------------------
def _core_dims(signature):
    if signature is None:
        return None
    m = re.fullmatch(r"\s*(.*?)\s*->\s*(.*?)\s*", signature)
    if not m:
        raise ValueError(f"vectorize: signature {signature!r} is not of the form '(n),(n)->()'")
    return [len([d for d in g.split(",") if d.strip()]) for g in re.findall(r"\(([^)]*)\)",
                                                                           m.group(1))]


def vectorize(pyfunc, *, excluded=None, signature=None):
    """``pyfunc`` mapped over the leading (loop) dimensions of its arguments, NumPy's
    ``np.vectorize``: on arrays NumPy's; on tensors the loop is unrolled over the static
    broadcast loop shape (one call of ``pyfunc`` per element) and the results stacked."""
    excluded = set(excluded or ())
    np_fn = np.vectorize(pyfunc, excluded=excluded or None, signature=signature)
    core = _core_dims(signature)

    def wrapped(*args):
        if not builtins.any(_is_node(a) for i, a in enumerate(args) if i not in excluded):
            return np_fn(*args)
        mapped = [i for i in range(len(args)) if i not in excluded]
        nodes = {i: _N(args[i]) for i in mapped}
        ncore = {i: (core[k] if core else 0) for k, i in enumerate(mapped)}
        loops = [nodes[i].shape[:nodes[i].ndim - ncore[i]] for i in mapped]
        if builtins.any(None in s for s in loops):
            raise ValueError(f"vectorize: the loop dimensions must be static, received {loops}")
        loop = np.broadcast_shapes(*loops)
        for i in mapped:
            nodes[i] = _G.broadcast_to(nodes[i], loop + nodes[i].shape[nodes[i].ndim -
                                                                     ncore[i]:])
        results = []
        for idx in np.ndindex(*loop):
            call = list(args)
            for i in mapped:
                call[i] = nodes[i][idx] if idx else nodes[i]
            results.append(_N(pyfunc(*call)))
        if not loop:
            return results[0]
        out = _G.stack(results, axis=0)
        return _G.reshape(out, loop + out.shape[1:])
    return wrapped


__all__ += ["vectorize"]


# ---- pad modes (kiln.ops.pad's modes other than "constant") ---------------------------------
_PAD_MODES = ("edge", "wrap", "reflect", "symmetric", "maximum", "minimum", "mean", "median")


def _pad_index(n, lo, hi, mode):
    i = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return np.mod(i, n)
    if mode == "reflect":
        if n == 1:
            return np.zeros_like(i)
        j = np.mod(i, 2 * n - 2)
        return np.where(j >= n, 2 * n - 2 - j, j)
    j = np.mod(i, 2 * n)  # symmetric: the edge repeated
    return np.where(j >= n, 2 * n - 1 - j, j)


def pad_by_mode(x, pad_width, mode):
    """``np.pad`` with an indexed mode (edge, wrap, reflect, symmetric: one gather of constant
    indices per padded axis) or a statistic of the whole axis (maximum, minimum, mean,
    median); ``pad_width`` is one (before, after) pair per axis."""
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad: mode {mode!r} is not supported; kiln has 'constant', "
                                  f"{', '.join(repr(m) for m in _PAD_MODES)}")
    for axis, (lo, hi) in enumerate(pad_width):
        lo, hi = int(lo), int(hi)
        if lo == hi == 0:
            continue
        n = _static("pad", x, axis)
        if n == 0:
            raise ValueError(f"pad: mode {mode!r} cannot pad the empty axis {axis} of {x.shape}")
        if mode in ("edge", "wrap", "reflect", "symmetric"):
            x = _G.take(x, _pad_index(n, lo, hi, mode).astype(np.int32), axis=axis)
            continue
        if mode == "median":
            from kiln.ops.numpy_stats import _median
            stat = _median(False)(x, axis=axis, keepdims=True)
            stat = stat if stat.dtype == x.dtype else _G.cast(stat, x.dtype)
        else:
            red = {"maximum": _G.max, "minimum": _G.min, "mean": _G.mean}[mode]
            stat = red(x, axis=axis, keepdims=True)
        parts = ([_G.concatenate([stat] * lo, axis=axis)] if lo else []) + [x] + (
            [_G.concatenate([stat] * hi, axis=axis)] if hi else [])
        x = _G.concatenate(parts, axis=axis)
    return x
