"""``kiln.ops.numpy``, continued: statistics, NaN-ignoring reductions, counting and searching.

Quantiles sort along the axis (the ``argsort`` primitive: NaN last) and gather the two
neighbours of each position with ``take_along_axis``, whose indices are computed in the
graph (so the NaN-ignoring forms count the valid entries at run time); the gradient flows
back through the gathers. Counting ops (``bincount``, ``histogram``, ``searchsorted``,
``digitize``, ``isin``) compare or one-hot encode: O(n * bins) work, static output shapes.
``nonzero`` and ``unique`` without ``size`` have data-dependent shapes: on NumPy arrays they
run NumPy's; on tensors ``unique`` needs ``size`` and ``nonzero`` is refused.
"""

from __future__ import annotations

# ruff: noqa: A001
import builtins

import numpy as np

import kiln.config
from kiln.ops import _G, _dual
from kiln.ops._numpy_shape import _ax, _sl, _static
from kiln.ops.numpy_math import _FLOATS, _f, _is_node, _promote

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


def _axes(op, axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    return tuple(sorted(_ax(op, a, ndim) for a in axes))


def _isnan(x):
    return _G.not_equal(x, x)


def _count(mask, axis=None, keepdims=False, dtype="int32"):
    return _G.sum(_G.cast(mask, dtype), axis=axis, keepdims=keepdims)


# ---- simple reductions --------------------------------------------------------------------------
def _count_nonzero(x, axis=None):
    x = _N(x)
    nz = x if x.dtype == "bool" else _G.not_equal(x, _c(0, x))
    return _count(nz, axis)


def _ptp(x, axis=None, keepdims=False):
    x = _N(x)
    return _G.max(x, axis=axis, keepdims=keepdims) - _G.min(x, axis=axis, keepdims=keepdims)


def _average(x, axis=None, weights=None):
    x = _f(x)
    if weights is None:
        return _G.mean(x, axis=axis)
    w = _N(weights, x.dtype) if not _is_node(weights) else _N(weights)
    if w.dtype != x.dtype:
        x, w = _promote(x, w)
    if w.ndim == 1 and x.ndim > 1:
        if axis is None or not isinstance(axis, int | np.integer):
            raise ValueError(f"average: 1-D weights {w.shape} need an int axis for a tensor "
                             f"of shape {x.shape}")
        a = _ax("average", axis, x.ndim)
        w = _G.reshape(w, tuple(-1 if i == a else 1 for i in range(x.ndim)))
    w = _G.broadcast_to(w, x.shape) if None not in x.shape else w + _G.zeros_like(x)
    return _G.sum(x * w, axis=axis) / _G.sum(w, axis=axis)


_export(_count_nonzero, "count_nonzero", "The number of nonzero entries over ``axis`` (int32).")
_export(_ptp, "ptp", "``max - min`` over ``axis`` (peak to peak).")
_export(_average, "average", "Weighted mean over ``axis`` (``weights`` of x's shape, or 1-D "
        "along an int axis).")


# ---- NaN-ignoring reductions --------------------------------------------------------------------
def _nanfill(x, value):
    x = _N(x)
    if x.dtype not in _FLOATS:
        return x
    return _G.where(_isnan(x), _c(value, x), x)


def _nansum(x, axis=None, keepdims=False):
    return _G.sum(_nanfill(x, 0), axis=axis, keepdims=keepdims)


def _nanprod(x, axis=None, keepdims=False):
    return _G.prod(_nanfill(x, 1), axis=axis, keepdims=keepdims)


def _nanmean(x, axis=None, keepdims=False):
    x = _f(x)
    n = _count(_G.logical_not(_isnan(x)), axis, keepdims, x.dtype)
    return _nansum(x, axis, keepdims) / n


def _nanvar(x, axis=None, keepdims=False):
    x = _f(x)
    valid = _G.logical_not(_isnan(x))
    n = _count(valid, axis, True, x.dtype)
    m = _nansum(x, axis, True) / n
    d = _G.where(valid, x - m, _c(0, x))
    return _G.sum(d * d, axis=axis, keepdims=keepdims) / _count(valid, axis, keepdims, x.dtype)


def _nanstd(x, axis=None, keepdims=False):
    return _G.sqrt(_nanvar(x, axis, keepdims))


def _nanextreme(name):
    def f(x, axis=None, keepdims=False):
        x = _N(x)
        red = _G.max if name == "nanmax" else _G.min
        if x.dtype not in _FLOATS:
            return red(x, axis=axis, keepdims=keepdims)
        fill = -np.inf if name == "nanmax" else np.inf
        out = red(_nanfill(x, fill), axis=axis, keepdims=keepdims)
        none = _G.equal(_count(_G.logical_not(_isnan(x)), axis, keepdims), _G.constant(
            np.int32(0)))
        return _G.where(none, _c(np.nan, out), out)
    return f


def _nanarg(name):
    def f(x, axis=None, keepdims=False):
        x = _N(x)
        if axis is None:
            flat = _G.reshape(x, (-1,))
            out = f(flat, 0)
            return _G.reshape(out, (1,) * x.ndim) if keepdims else out
        fn = _G.argmax if name == "nanargmax" else _G.argmin
        if x.dtype not in _FLOATS:
            return _G.cast(fn(x, axis=axis, keepdims=keepdims), "int32")
        fill = -np.inf if name == "nanargmax" else np.inf
        idx = _G.cast(fn(_nanfill(x, fill), axis=axis, keepdims=keepdims), "int32")
        none = _G.equal(_count(_G.logical_not(_isnan(x)), axis, keepdims), _G.constant(
            np.int32(0)))
        return _G.where(none, _c(-1, idx), idx)
    return f


def _nancum(name):
    def f(x, axis=None, dtype=None):
        from kiln.ops._numpy_shape import _cumprod, _cumsum
        return (_cumsum if name == "nancumsum" else _cumprod)(
            _nanfill(x, 0 if name == "nancumsum" else 1), axis, dtype)
    return f


_export(_nansum, "nansum", "Sum over ``axis`` treating NaN as 0.")
_export(_nanprod, "nanprod", "Product over ``axis`` treating NaN as 1.")
_export(_nanmean, "nanmean", "Mean of the non-NaN entries over ``axis`` (NaN if none).")
_export(_nanvar, "nanvar", "Variance of the non-NaN entries over ``axis``.")
_export(_nanstd, "nanstd", "Standard deviation of the non-NaN entries over ``axis``.")
_export(_nanextreme("nanmax"), "nanmax", "Maximum ignoring NaN (NaN where all are NaN).")
_export(_nanextreme("nanmin"), "nanmin", "Minimum ignoring NaN (NaN where all are NaN).")
_export(_nanarg("nanargmax"), "nanargmax", "Index (int32) of the maximum ignoring NaN; -1 "
        "where all are NaN (Keras).")
_export(_nanarg("nanargmin"), "nanargmin", "Index (int32) of the minimum ignoring NaN; -1 "
        "where all are NaN (Keras).")
_export(_nancum("nancumsum"), "nancumsum", "Cumulative sum treating NaN as 0.")
_export(_nancum("nancumprod"), "nancumprod", "Cumulative product treating NaN as 1.")


# ---- quantiles ----------------------------------------------------------------------------------
_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_impl(op, x, q, axis, method, keepdims, ignore_nan):
    if method not in _METHODS:
        raise ValueError(f"{op}: method must be one of {_METHODS}, received {method!r}")
    x = _N(x)
    if x.dtype == "int64":
        x = _G.cast(x, kiln.config.floatx())
    x = _f(x)
    axes = _axes(op, axis, x.ndim)
    keep = [a for a in range(x.ndim) if a not in axes]
    y = _G.transpose(x, tuple(keep + list(axes)))
    batch = tuple(x.shape[a] for a in keep)
    n = 1
    for a in axes:
        n *= _static(op, x, a)
    y = _G.reshape(y, batch + (n,)) if len(axes) != 1 else y
    s = _G.take_along_axis(y, _G.argsort(y, -1), -1)  # NaN last
    qn = _N(q, x.dtype) if not _is_node(q) else _G.cast(_N(q), x.dtype)
    qshape = qn.shape
    qf = _G.reshape(qn, (-1,))
    nan = _isnan(y)
    valid = _G.logical_not(nan) if ignore_nan else _G.logical_or(nan, _G.logical_not(nan))
    m = _count(valid, -1, True, x.dtype)  # (batch..., 1): the entries counted per row
    p = (m - _c(1, y)) * qf  # (batch..., Q): each quantile's position among them
    lo = _G.cast(_G.clip(_G.floor(p), 0.0, float(n - 1)), "int32")
    hi = _G.cast(_G.clip(_G.ceil(p), 0.0, float(n - 1)), "int32")
    v_lo, v_hi = _G.take_along_axis(s, lo, -1), _G.take_along_axis(s, hi, -1)
    if method == "linear":
        t = p - _G.floor(p)
        out = _G.where(_G.equal(v_lo, v_hi), v_lo, v_lo + (v_hi - v_lo) * t)
    elif method == "lower":
        out = v_lo
    elif method == "higher":
        out = v_hi
    elif method == "midpoint":
        out = (v_lo + v_hi) * _c(0.5, y)
    else:
        near = _G.cast(_G.clip(_G.round(p), 0.0, float(n - 1)), "int32")
        out = _G.take_along_axis(s, near, -1)
    bad = _G.equal(m, _c(0, y)) if ignore_nan else _G.greater(_count(nan, -1, True),
                                                              _G.constant(np.int32(0)))
    out = _G.where(bad, _c(np.nan, out), out)
    # (batch..., Q) -> q's shape + the kept axes (the reduced ones as 1 with keepdims)
    nb = len(batch)
    out = _G.transpose(out, (nb,) + tuple(range(nb)))
    if keepdims:
        out = _G.expand_dims(out, tuple(a + 1 for a in axes))
    if not qshape:
        return _G.squeeze(out, 0)
    if len(qshape) == 1:
        return out
    if None in out.shape[1:]:
        raise ValueError(f"{op}: q of rank {len(qshape)} needs static shapes, received "
                         f"{x.shape}")
    return _G.reshape(out, qshape + out.shape[1:])


def _quantile(op, scale, ignore_nan):
    def f(x, q, axis=None, method="linear", keepdims=False):
        if scale != 1:
            q = q * _c(1 / scale, _N(q)) if _is_node(q) else np.asarray(q, np.float64) / scale
        return _quantile_impl(op, x, q, axis, method, keepdims, ignore_nan)
    return f


def _median(ignore_nan):
    def f(x, axis=None, keepdims=False):
        return _quantile_impl("nanmedian" if ignore_nan else "median", x, 0.5, axis, "linear",
                              keepdims, ignore_nan)
    return f


_export(_quantile("quantile", 1, False), "quantile", "The ``q``-th quantiles over ``axis`` "
        "(``method`` linear, lower, higher, midpoint, nearest; NaN if a NaN is present).")
_export(_quantile("percentile", 100, False), "percentile", "The ``q``-th percentiles over "
        "``axis`` (see quantile).")
_export(_quantile("nanquantile", 1, True), "nanquantile", "Quantiles of the non-NaN entries.")
_export(_quantile("nanpercentile", 100, True), "nanpercentile", "Percentiles of the non-NaN "
        "entries.")
_export(_median(False), "median", "The median over ``axis`` (NaN if a NaN is present).")
_export(_median(True), "nanmedian", "The median of the non-NaN entries over ``axis``.")


# ---- correlation and integration ----------------------------------------------------------------
def _corrcoef(x):
    x = _N(x)
    dtype = "float64" if x.dtype in ("int64", "float64") else kiln.config.floatx()
    x = _G.cast(x, dtype) if x.dtype != dtype else x
    if x.ndim == 1:
        x = _G.reshape(x, (1, -1))
    if x.ndim != 2:
        raise ValueError(f"corrcoef: needs a 1-D or 2-D tensor, received shape {x.shape}")
    xm = x - _G.mean(x, axis=1, keepdims=True)
    c = _G.matmul(xm, _G.transpose(xm))
    d = _G.sqrt(_G.sum(xm * xm, axis=1))
    r = c / (_G.expand_dims(d, 1) * _G.expand_dims(d, 0))
    r = _G.clip(r, -1.0, 1.0)
    return _G.reshape(r, ()) if x.shape[0] == 1 else r


def _trapezoid(y, x=None, dx=1.0, axis=-1):
    y = _f(y)
    axis = _ax("trapezoid", axis, y.ndim)
    n = _static("trapezoid", y, axis)
    mid = (_sl(y, axis, 1, n) + _sl(y, axis, 0, n - 1)) * _c(0.5, y)
    if x is None:
        d = _N(dx, y.dtype) if not _is_node(dx) else _G.cast(_N(dx), y.dtype)
    else:
        xv = _G.cast(_N(x), y.dtype) if _is_node(x) else _N(x, y.dtype)
        if xv.ndim == 1:
            xv = _G.reshape(xv, tuple(-1 if a == axis else 1 for a in range(y.ndim)))
            d = _sl(xv, axis, 1, n) - _sl(xv, axis, 0, n - 1)
        else:
            xa = _ax("trapezoid", axis - y.ndim, xv.ndim)
            d = _sl(xv, xa, 1, n) - _sl(xv, xa, 0, n - 1)
    return _G.sum(mid * d, axis=axis)


_export(_corrcoef, "corrcoef", "Pearson correlation coefficients of the rows of ``x``.")
_export(_trapezoid, "trapezoid", "Integral of ``y`` along ``axis`` by the trapezoidal rule "
        "(sample points ``x`` or spacing ``dx``).")


# ---- counting and searching ---------------------------------------------------------------------
def _searchsorted(sorted_sequence, values, side="left"):
    a, v = _promote(sorted_sequence, values)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: needs a 1-D sorted sequence, received shape {a.shape}")
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', received {side!r}")
    ve = _G.expand_dims(v, -1)
    before = _G.less(a, ve) if side == "left" else _G.less_equal(a, ve)
    out = _count(before, -1)
    if a.dtype in _FLOATS:  # NaN sorts last: a NaN value goes after every number
        n_num = _count(_G.logical_not(_isnan(a)))
        at_nan = _G.constant(np.int32(_static("searchsorted", a, 0))) if side == "right" else \
            n_num
        out = _G.where(_isnan(v), at_nan, out)
    return out


def _digitize(x, bins):
    xv, b = _promote(x, bins)
    if b.ndim != 1:
        raise ValueError(f"digitize: bins must be 1-D, received shape {b.shape}")
    n = _static("digitize", b, 0)
    if n == 0:
        return _G.cast(_G.zeros_like(xv), "int32")
    xe = _G.expand_dims(xv, -1)
    inc = _count(_G.less_equal(b, xe), -1)
    dec = _count(_G.greater(b, xe), -1)
    if xv.dtype in _FLOATS:
        inc = _G.where(_isnan(xv), _G.constant(np.int32(n)), inc)
        dec = _G.where(_isnan(xv), _G.constant(np.int32(0)), dec)
    decreasing = _G.greater(_sl(b, 0, 0, 1), _sl(b, 0, n - 1, n))
    return _G.where(_G.reshape(decreasing, ()), dec, inc)


def _isin(x1, x2, assume_unique=False, invert=False):
    a, b = _promote(x1, x2)
    hit = _G.greater(_count(_G.equal(_G.expand_dims(a, -1), _G.reshape(b, (-1,))), -1),
                     _G.constant(np.int32(0)))
    return _G.logical_not(hit) if invert else hit


def _bincount(x, weights=None, minlength=0, sparse=False, length=None):
    if sparse:
        raise ValueError("bincount: sparse=True is not supported (kiln tensors are dense)")
    x = _N(x)
    if x.dtype not in ("int32", "int64"):
        raise TypeError(f"bincount: expected integer values, received {x.dtype}{x.shape}")
    if x.ndim not in (1, 2):
        raise ValueError(f"bincount: needs a 1-D or 2-D tensor, received shape {x.shape}")
    length = int(minlength) if length is None else int(length)
    if length <= 0:
        raise ValueError("bincount: on a symbolic tensor the number of bins must be static: "
                         f"pass minlength > 0 (received minlength={minlength})")
    hot = _G.one_hot(x, length, "float64" if weights is None else "float32")
    if weights is None:
        return _G.cast(_G.sum(hot, axis=-2), "int32")
    w = _N(weights)
    if w.dtype not in _FLOATS:
        w = _G.cast(w, kiln.config.floatx())
    hot = _G.cast(hot, w.dtype)
    return _G.sum(hot * _G.expand_dims(w, -1), axis=-2)


_bincount_op = _dual(_bincount, "bincount")


def bincount(x, weights=None, minlength=0, sparse=False):
    """Counts of each value of non-negative ints ``x`` (1-D, or 2-D: per row), summed
    ``weights`` when given. On arrays the length is ``max(x) + 1`` (at least ``minlength``);
    on tensors it must be static: ``minlength`` (larger values are not counted)."""
    if _is_node(x) or _is_node(weights):
        return _bincount_op(x, weights, minlength, sparse)
    arr = np.asarray(x)
    if arr.size and arr.min() < 0:
        raise ValueError(f"bincount: values must be non-negative, received min {arr.min()}")
    length = builtins.max(int(minlength), int(arr.max()) + 1 if arr.size else 0, 1)
    return _bincount_op(x, weights, minlength, sparse, length=length)


def _histogram(x, bins=10, range=None):
    x = _N(x)
    if x.ndim != 1:
        raise ValueError(f"histogram: needs a 1-D tensor, received shape {x.shape}")
    bins = int(bins)
    xf = _f(x)
    x64 = _G.cast(xf, "float64")
    if range is None:
        lo, hi = _G.min(x64), _G.max(x64)
    else:
        lo, hi = (_G.constant(np.float64(v)) for v in range)
    same = _G.equal(lo, hi)
    lo = _G.where(same, lo - 0.5, lo)
    hi = _G.where(same, hi + 0.5, hi)
    steps = _G.constant(np.arange(bins + 1, dtype=np.float64) / bins)
    edges = lo + (hi - lo) * steps
    edges = _G.concatenate([_sl(edges, 0, 0, bins), _G.reshape(hi, (1,))], axis=0)
    edges = _G.cast(edges, xf.dtype)
    inner = _sl(edges, 0, 1, bins)
    idx = _count(_G.less_equal(inner, _G.expand_dims(xf, -1)), -1)
    inside = _G.logical_and(_G.greater_equal(xf, _sl(edges, 0, 0, 1)),
                            _G.less_equal(xf, _sl(edges, 0, bins, bins + 1)))
    hot = _G.one_hot(idx, bins, "float64") * _G.expand_dims(_G.cast(inside, "float64"), -1)
    return _G.cast(_G.sum(hot, axis=0), "int64"), edges


__all__ += ["bincount"]
_export(_searchsorted, "searchsorted", "Insertion indices (int32) of ``values`` in a sorted "
        "1-D sequence (``side`` 'left' or 'right').")
_export(_digitize, "digitize", "The bin (int32) of each value (``np.digitize``, increasing or "
        "decreasing bins).")
_export(_isin, "isin", "Whether each element of ``x1`` is in ``x2``.")
_export(_histogram, "histogram", "Counts (int64, as NumPy) of ``x`` in ``bins`` equal bins over "
        "``range`` (default: min to max) and the bin edges.")


# ---- data-dependent shapes ----------------------------------------------------------------------
def nonzero(x):
    """The indices (int32) of the nonzero entries, one array per axis. Their number depends
    on the values: NumPy arrays only."""
    if _is_node(x):
        x = _N(x)
        raise ValueError(f"nonzero: the result's shape depends on the values; kiln's static "
                         f"graphs cannot build it for a tensor of shape {x.shape} (use "
                         "where(condition, x1, x2) or a mask)")
    return tuple(i.astype("int32") for i in np.nonzero(np.asarray(x)))


def _argpartition(x, kth, axis=-1):
    x = _N(x)
    # a full stable sort partitions around every kth at once
    return _G.cast(_G.argsort(x, _ax("argpartition", axis, x.ndim)), "int32")


_export(_argpartition, "argpartition", "Indices (int32) that partition ``x`` around ``kth`` "
        "along ``axis`` (kiln sorts fully: a valid partition for every kth).")
__all__ += ["nonzero"]
