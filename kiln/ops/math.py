"""``kiln.ops.math``: Keras 3's math ops (graph and eager: see ``kiln.ops``), as composites.

Complex values are ``(real, imag)`` pairs, Keras' convention; the transforms are products
with constant DFT matrices (O(n^2) per axis, exact to rounding, differentiable), so they suit
the short axes of audio frames and small images, not long signals. Segment reductions take
``num_segments`` statically (from the ids when they are concrete arrays) and build a
(segments x rows) mask. ``view_as_complex`` / ``view_as_real`` (complex arrays: kiln has
no complex dtype in graphs) are in :mod:`kiln.ops.complex_more` (top-level names, as Keras).
"""

from __future__ import annotations

import math

import numpy as np

from kiln.ops import _G, _dual
from kiln.ops import _numpy_shape as _S
from kiln.ops import linalg as _linalg
from kiln.ops import numpy as _knp

_N = _G.as_node


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _float(x):
    x = _N(x)
    return x if x.dtype in ("float32", "float64") else _G.cast(x, "float32")


# ---- segment reductions --------------------------------------------------------------------------
def _segment(op, kind):
    def f(data, segment_ids, num_segments=None, sorted=False):
        x = _N(data)
        ids = _N(segment_ids)
        if num_segments is None:
            raise ValueError(f"{op}: num_segments must be given for symbolic segment_ids "
                             "(a static graph needs the output size)")
        if ids.ndim != 1 or x.ndim < 1:
            raise ValueError(f"{op}: expected 1-D segment_ids and data of rank >= 1, received "
                             f"{ids.shape} and {x.shape}")
        n = int(num_segments)
        seg = _G.constant(np.arange(n, dtype=ids.dtype if ids.dtype != "bool" else "int32"))
        hot = _G.equal(_G.expand_dims(ids, 0), _G.expand_dims(seg, 1))  # (S, N); id -1: none
        rest = x.shape[1:]
        if kind == "sum":
            flat = _G.reshape(x, (-1, int(np.prod(rest, dtype=np.int64))))
            out = _G.matmul(_G.cast(hot, x.dtype), flat) if x.dtype in (
                "float32", "float64") else _G.sum(_G.expand_dims(_G.cast(
                    hot, x.dtype), -1) * _G.expand_dims(flat, 0), axis=1)
            return _G.reshape(out, (n,) + tuple(rest))
        mask = _G.reshape(hot, (n, -1) + (1,) * len(rest))
        xe = _G.expand_dims(x, 0)
        if kind == "prod":
            return _G.prod(_G.where(mask, xe, _c(1, x)), axis=1)
        fill = -np.inf if kind == "max" else np.inf
        if x.dtype not in ("float32", "float64"):
            info = np.iinfo(x.dtype)
            fill = info.min if kind == "max" else info.max
        red = _G.max if kind == "max" else _G.min
        return red(_G.where(mask, xe, _c(fill, x)), axis=1)
    f.__name__ = op
    return f


def _segment_public(op, kind):
    graph = _dual(_segment(op, kind), op)

    def public(data, segment_ids, num_segments=None, sorted=False):
        if num_segments is None and isinstance(segment_ids, np.ndarray | list | tuple):
            ids = np.asarray(segment_ids)
            num_segments = int(ids.max()) + 1 if ids.size else 0
        return graph(data, segment_ids, num_segments=num_segments, sorted=sorted)
    public.__name__ = op
    public.__doc__ = (f"``{kind}`` of the rows of ``data`` sharing a segment id (an id of -1 "
                      "is dropped); empty segments give the reduction's identity.")
    public.graph = graph.graph
    return public


segment_sum = _segment_public("segment_sum", "sum")
segment_max = _segment_public("segment_max", "max")
segment_min = _segment_public("segment_min", "min")
segment_prod = _segment_public("segment_prod", "prod")


# ---- top-k membership, distances, sequences ------------------------------------------------------
def _in_top_k(targets, predictions, k):
    p = _N(predictions)
    t = _G.cast(_N(targets), "int32")
    values, _ = _S.top_k(p, k)
    kth = _G.slice(values, ((None, None, 1), (k - 1, k, 1)))
    tv = _S.take_along_axis(p, _G.expand_dims(t, -1), axis=-1)
    return _G.squeeze(_G.greater_equal(tv, kth), -1)


def _cdist(x, y):
    x = _float(x)
    y = _G.cast(_N(y), x.dtype)
    if x.ndim < 2 or y.ndim < 2 or x.shape[-1] != y.shape[-1]:
        raise ValueError(f"cdist: inputs must have rank >= 2 and the same last dim, received "
                         f"{x.shape} and {y.shape}")
    diff = _G.expand_dims(x, -2) - _G.expand_dims(y, -3)
    return _G.sqrt(_G.sum(diff * diff, axis=-1))


def _extract_sequences(x, sequence_length, sequence_stride):
    x = _N(x)
    n = x.shape[-1]
    if n is None:
        raise ValueError(f"extract_sequences: the last axis must be static, received {x.shape}")
    count = (n - (sequence_length - sequence_stride)) // sequence_stride
    frames = []
    for i in range(count):
        lo = i * sequence_stride
        spec = [(None, None, 1)] * (x.ndim - 1) + [(lo, lo + sequence_length, 1)]
        frames.append(_G.slice(x, spec))
    return _G.stack(frames, x.ndim - 1)


# ---- transforms ----------------------------------------------------------------------------------
def _pair(op, x):
    if not isinstance(x, tuple | list) or len(x) != 2:
        raise ValueError(f"{op}: expected a tuple (real, imag), received {type(x).__name__}")
    re = _float(x[0])
    im = _G.cast(_N(x[1]), re.dtype)
    if re.shape != im.shape:
        raise ValueError(f"{op}: real and imaginary parts must have the same shape, received "
                         f"{re.shape} and {im.shape}")
    return re, im


def _dft(n, m, dtype, sign=-1.0, rows=None):
    """cos and sign * sin of ``2 pi k t / n`` for rows ``t < m`` and columns ``k``."""
    t = np.arange(m)[:, None]
    k = np.arange(n if rows is None else rows)[None, :]
    ang = 2 * np.pi * ((t * k) % n) / n
    return np.cos(ang).astype(dtype), (sign * np.sin(ang)).astype(dtype)


def _last_axis(x, axis):
    return x if axis == -1 else _G.transpose(x, _swap(x.ndim, axis))


def _swap(ndim, axis):
    perm = list(range(ndim))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return perm


def _cdft(re, im, axis, inverse):
    """The complex DFT of ``(re, im)`` along ``axis`` (static)."""
    re, im = _last_axis(re, axis), _last_axis(im, axis)
    n = re.shape[-1]
    if n is None:
        raise ValueError(f"fft: the transformed axes must be static, received {re.shape}")
    cos, sin = _dft(n, n, re.dtype, 1.0 if inverse else -1.0)
    c, s = _G.constant(cos), _G.constant(sin)
    out_re = _G.matmul(re, c) - _G.matmul(im, s)
    out_im = _G.matmul(re, s) + _G.matmul(im, c)
    if inverse:
        out_re, out_im = out_re * _c(1.0 / n, re), out_im * _c(1.0 / n, re)
    return _last_axis(out_re, axis), _last_axis(out_im, axis)


def _fft(x):
    re, im = _pair("fft", x)
    return _cdft(re, im, -1, False)


def _fft2(x):
    re, im = _pair("fft2", x)
    re, im = _cdft(re, im, re.ndim - 2, False)
    return _cdft(re, im, -1, False)


def _ifft2(x):
    re, im = _pair("ifft2", x)
    re, im = _cdft(re, im, re.ndim - 2, True)
    return _cdft(re, im, -1, True)


def _fit(x, n):
    """``x``'s last axis cut or zero-padded to ``n`` (NumPy's ``n`` argument)."""
    m = x.shape[-1]
    if m > n:
        return _G.slice(x, [(None, None, 1)] * (x.ndim - 1) + [(0, n, 1)])
    if m < n:
        return _G.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n - m)])
    return x


def _rfft(x, fft_length=None):
    x = _float(x)
    n = int(fft_length or x.shape[-1])
    x = _fit(x, n)
    cos, sin = _dft(n, n, x.dtype, -1.0, rows=n // 2 + 1)
    return _G.matmul(x, _G.constant(cos)), _G.matmul(x, _G.constant(sin))


def _irfft(x, fft_length=None):
    re, im = _pair("irfft", x)
    m = re.shape[-1]
    n = int(fft_length or 2 * (m - 1))
    bins = n // 2 + 1
    re, im = _fit(re, bins), _fit(im, bins)
    t = np.arange(n)[None, :]
    k = np.arange(bins)[:, None]
    w = np.full((bins, 1), 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    ang = 2 * np.pi * ((k * t) % n) / n
    cos = (w * np.cos(ang) / n).astype(re.dtype)
    sin = (-w * np.sin(ang) / n).astype(re.dtype)
    return _G.matmul(re, _G.constant(cos)) + _G.matmul(im, _G.constant(sin))


def _window(op, window, length, dtype):
    if window is None:
        return np.ones(length, dtype)
    if isinstance(window, str):
        if window not in ("hann", "hamming"):
            raise ValueError(f"{op}: window must be 'hann', 'hamming', None or an array, "
                             f"received {window!r}")
        a = 0.5 if window == "hann" else 0.54
        return (a - (1 - a) * np.cos(2 * np.pi * np.arange(length) / length)).astype(dtype)
    win = np.asarray(window, dtype)  # a tensor window must be concrete here
    if win.shape != (length,):
        raise ValueError(f"{op}: the window must have shape ({length},), received {win.shape}")
    return win


def _padded_window(op, window, sequence_length, fft_length, dtype):
    win = _window(op, window, sequence_length, dtype)
    lo = (fft_length - sequence_length) // 2
    return np.pad(win, (lo, fft_length - sequence_length - lo))


def _reflect(x, p):
    """NumPy's ``reflect`` padding of the last axis by ``p`` on each side."""
    n = x.shape[-1]
    head = [(None, None, 1)] * (x.ndim - 1)
    left = _G.slice(x, head + [(p, 0, -1)])
    right = _G.slice(x, head + [(n - 2, n - 2 - p, -1)])
    return _G.concatenate([left, x, right], x.ndim - 1)


def _stft(x, sequence_length, sequence_stride, fft_length, window="hann", center=True):
    x = _N(x)
    if x.dtype not in ("float32", "float64"):
        raise TypeError(f"stft: expected a float32 or float64 input, received {x.dtype}")
    if fft_length < sequence_length:
        raise ValueError(f"stft: fft_length {fft_length} must be >= sequence_length "
                         f"{sequence_length}")
    if center:
        x = _reflect(x, fft_length // 2)
    win = _padded_window("stft", window, sequence_length, fft_length, x.dtype)
    frames = _extract_sequences(x, fft_length, sequence_stride)
    return _rfft(frames * _G.constant(win), fft_length)


def _istft(x, sequence_length, sequence_stride, fft_length, length=None, window="hann",
           center=True):
    re, im = _pair("istft", x)
    count = re.shape[-2]
    if count is None:
        raise ValueError(f"istft: the number of frames must be static, received {re.shape}")
    win = _padded_window("istft", window, sequence_length, fft_length, re.dtype)
    frames = _irfft((re, im), fft_length) * _G.constant(win)  # (..., count, fft_length)
    total = fft_length + sequence_stride * (count - 1)
    head = [(None, None, 1)] * (re.ndim - 2)
    out = None
    norm = np.zeros(total)
    for i in range(count):
        f = _G.squeeze(_G.slice(frames, head + [(i, i + 1, 1), (None, None, 1)]), re.ndim - 2)
        lo = i * sequence_stride
        f = _G.pad(f, [(0, 0)] * (re.ndim - 2) + [(lo, total - lo - fft_length)])
        out = f if out is None else out + f
        norm[lo:lo + fft_length] += win ** 2
    # scipy's istft divides by the summed squared window where it is not ~0
    scale = np.where(norm > 1e-10, 1.0 / np.where(norm > 1e-10, norm, 1.0), 1.0)
    out = out * _G.constant(scale.astype(re.dtype))
    start = fft_length // 2 if center else 0
    if length is not None:
        end = start + length
    elif center:
        end = total - fft_length // 2
    else:
        end = total
    return _G.slice(out, head + [(start, end, 1)])


# ---- special functions ---------------------------------------------------------------------------
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
         -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erfc(x):
    """``1 - erf(x)`` without the cancellation: Numerical Recipes' Chebyshev fit (relative
    error below 1.2e-7 everywhere)."""
    x = _float(x)
    z = _G.abs(x)
    t = _c(1.0, x) / (_c(1.0, x) + _c(0.5, x) * z)
    poly = _c(_ERFC[-1], x)
    for a in _ERFC[-2::-1]:
        poly = poly * t + _c(a, x)
    ans = t * _G.exp(_G.neg(z * z) + poly)
    return _G.where(_G.greater_equal(x, _c(0.0, x)), ans, _c(2.0, x) - ans)


_GILES_LOW = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
              0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_GILES_HIGH = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
               0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(coeffs, w):
    p = _c(coeffs[0], w)
    for a in coeffs[1:]:
        p = p * w + _c(a, w)
    return p


def _erfinv(x):
    """Giles' approximation, two Newton steps on ``erf`` (float64 accuracy), and a last step
    whose derivative is the exact ``1 / erf'(erfinv(x))``; +-inf at +-1, NaN outside."""
    x = _float(x)
    one = _c(1.0, x)
    inside = _G.less(_G.abs(x), one)
    xs = _G.where(inside, x, _c(0.0, x))
    w = _G.neg(_G.log((one - xs) * (one + xs)))
    low = _horner(_GILES_LOW, w - _c(2.5, x))
    high = _horner(_GILES_HIGH, _G.sqrt(w) - _c(3.0, x))
    y = _G.where(_G.less(w, _c(5.0, x)), low, high) * xs
    k = _c(2.0 / math.sqrt(math.pi), x)

    def newton(y):
        return y - (_G.erf(y) - xs) / (k * _G.exp(_G.neg(y * y)))
    y = _G.apply("stop_gradient", newton(newton(y)))
    y = newton(y)
    edge = _G.where(_G.equal(x, one), _c(np.inf, x),
                    _G.where(_G.equal(x, _G.neg(one)), _c(-np.inf, x), _c(np.nan, x)))
    return _G.where(inside, y, edge)


def _logdet(x):
    return _G.log(_G.abs(_linalg._det(x)))


in_top_k = _dual(_in_top_k, "in_top_k")
in_top_k.__doc__ = ("Whether each target's prediction is at least the ``k``-th largest "
                    "(ties count as in).")
cdist = _dual(_cdist, "cdist")
cdist.__doc__ = "Euclidean distances between the rows of ``x`` and ``y``."
extract_sequences = _dual(_extract_sequences, "extract_sequences")
extract_sequences.__doc__ = "Frames of the last axis: (..., count, sequence_length)."
fft = _dual(_fft, "fft", first="value")
fft.__doc__ = "DFT of ``(real, imag)`` along the last axis."
fft2 = _dual(_fft2, "fft2", first="value")
fft2.__doc__ = "2-D DFT of ``(real, imag)`` along the last two axes."
ifft2 = _dual(_ifft2, "ifft2", first="value")
ifft2.__doc__ = "Inverse 2-D DFT of ``(real, imag)``."
rfft = _dual(_rfft, "rfft")
rfft.__doc__ = "DFT of a real signal: ``(real, imag)`` of the ``n // 2 + 1`` bins."
irfft = _dual(_irfft, "irfft", first="value")
irfft.__doc__ = "Inverse of ``rfft`` (``fft_length`` default ``2 * (bins - 1)``)."
stft = _dual(_stft, "stft")
stft.__doc__ = "Short-time Fourier transform ``(real, imag)``, Keras' framing and windows."
istft = _dual(_istft, "istft", first="value")
istft.__doc__ = "Inverse STFT by windowed overlap-add (scipy's normalization)."
erfc = _dual(_erfc, "erfc")
erfc.__doc__ = _erfc.__doc__
erfinv = _dual(_erfinv, "erfinv")
erfinv.__doc__ = _erfinv.__doc__
logdet = _dual(_logdet, "logdet")
logdet.__doc__ = "``log |det(x)|`` of each matrix."
top_k = _S.top_k
logsumexp = _knp.logsumexp
rsqrt = _knp.rsqrt
erf = _knp.erf

__all__ = ["segment_sum", "segment_max", "segment_min", "segment_prod", "in_top_k", "cdist",
           "extract_sequences", "fft", "fft2", "ifft2", "rfft", "irfft", "stft", "istft",
           "erfc", "erfinv", "logdet", "top_k", "logsumexp", "rsqrt", "erf"]
