"""Scalar functions of known accuracy for the CPU's generated float32 loops (see
``spec.FAST_F32``): plain Python here (what ``KILN_JIT=0`` runs, and the source the native
loops expand in place, ``llvm_expr``); ``scalars_numba.py`` registers them with numba
(``register_jitable``: compiled inline, typed once per process for every numba kernel that calls
them), so that a program without numba kernels never imports numba. Generated kernels import
them; their cache key carries a hash of this file, so a change here recompiles those kernels.
tests/core/backends/test_fast_math.py checks them.

* ``tanh32``: numba's ``np.tanh`` is a scalar libm call of ~24 ns; this rational
  approximation (clamped to +-7.9, linear below 4e-4) is within 3.1e-7 of tanh (relative, in
  float64) and ~6 ns; NaN stays NaN.
* ``exp_neg32``: exp of a non-positive float32 by Cephes' expf polynomial with 2^k built from
  its bits (no libm call, so the loop vectorizes: ~2 instead of ~4 ns), exactly 0 below -87.33;
  the float32 softmax rows (``nn.py``) use it;
* ``sigmoid32``: e = exp_neg32(-|x|), r = 1 / (1 + e), e * r for x < 0 (~2-3 instead of ~10
  ns): relative accuracy 1.7e-7 down to 1e-37 (below that the result is 0, within 1.2e-38).
* ``exp32``, ``log32``, ``log1p32``, ``expm1_32``: what every float32 loop calls for
  ``np.exp``, ``np.log``, ``np.log1p`` and ``np.expm1`` (``spec.f32_calls``): libm's are
  scalar calls of 4-13 ns that keep a loop from vectorizing (1M floats: exp 3.7 ms, log 12.5
  ms, NumPy's 0.6 ms). ``exp32``: Cephes' expf polynomial with 2^k in two factors, so that a
  denormal result rounds once (inf above 88.72, 0 below -103.9); ``log32``: Cephes' logf on
  the mantissa and exponent read from the bits (denormals scaled by 2^25 first; 0 -> -inf,
  negative -> NaN); ``log1p32``: Goldberg's rearrangement of it, exact at the small
  arguments where ``1 + x`` rounds; ``expm1_32``: below 0.7 in magnitude x + x^2/2 + x^3
  q(x), q a polynomial fitted for kiln (1e-10 relative in float64), else exp32(x) - 1 (1M
  floats 1.69 -> ~0.8 ms; Kahan's rearrangement of exp32 and log32 before). All within
  2.3 ulp of the float64 result, NaN stays NaN (tests/core/backends/test_fast_math.py).
* ``erf32``: what float32 loops compute ``erf`` (and so the exact GELU) with, where numba
  called libm's scalar erff (1M floats 16 ms against tanh's 0.35): below 1, x (2/sqrt(pi) +
  x^2 q(x^2)) with the leading product exact (12-bit halves); from 1, 1 - exp(-x^2) erfcx(x)
  with x^2 exact as a sum of two floats, erfcx a polynomial in 1/x on [1, 4] (both fitted for
  kiln by least squares, relative error 1e-9 / 2e-8 in float64). Within 1.5 ulp of the
  float64 erf (1.8 on denormal results), erf(+-inf) = +-1, NaN stays NaN.
* ``trig32`` (``sin32``, ``cos32``): what float32 loops compute ``np.sin`` and ``np.cos``
  with, where libm's scalar calls kept them from vectorizing (1M floats 10.8 -> ~3.3 ms;
  NumPy's SIMD sin 0.5-0.9 ms). In float64: below 2^23, k = rint(x 2 / pi) and x - k pi / 2
  with pi / 2 in three parts (Cody and Waite); from 2^23 (an integer m 2^e, e >= 0),
  x 2 / pi mod 4 from five exact products of m with 24-bit chunks of 2 / pi chosen by e
  (Payne and Hanek's reduction without a table: the chunks that would only add multiples of
  4 are skipped), summed so that the cancellation near a multiple of pi / 2 is exact; then
  Taylor's polynomials to degree 13 / 12 on |r| <= pi / 4 (one Horner chain, each lane
  taking the coefficients of its quadrant) and one rounding to float32: within 0.500006 ulp
  of the float64 result (every finite float32 checked), sin(-0.0) = -0.0, inf and NaN give
  NaN. No branch: both reductions are computed.
"""

from __future__ import annotations

import numpy as np


def tanh32(x):
    if x != x:
        return x
    v = min(max(x, np.float32(-7.90531110763549805)), np.float32(7.90531110763549805))
    x2 = v * v
    p = np.float32(-2.76076847742355e-16)
    p = p * x2 + np.float32(2.00018790482477e-13)
    p = p * x2 + np.float32(-8.60467152213735e-11)
    p = p * x2 + np.float32(5.12229709037114e-08)
    p = p * x2 + np.float32(1.48572235717979e-05)
    p = p * x2 + np.float32(6.37261928875436e-04)
    p = p * x2 + np.float32(4.89352455891786e-03)
    q = np.float32(1.19825839466702e-06)
    q = q * x2 + np.float32(1.18534705686654e-04)
    q = q * x2 + np.float32(2.26843463243900e-03)
    q = q * x2 + np.float32(4.89352518554385e-03)
    return v if abs(v) < np.float32(0.0004) else np.float32(p * v / q)


def exp_reduced32(v, kf):
    """exp(v) / 2^kf for kf = round(v / ln 2): Cephes' expf polynomial on r = v - kf ln 2
    (|r| <= ln 2 / 2, ln 2 in two parts)."""
    r = v - kf * np.float32(0.693359375) + kf * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    return p * (r * r) + r + np.float32(1.0)


def exp_neg32(d):
    """exp(d) for d <= 0 (a softmax's x - max, a sigmoid's -|x|): Cephes' expf polynomial
    with 2^k built from its bits; exactly 0 below -87.33 (exp underflows there); NaN stays."""
    v = max(d, np.float32(-87.33654))
    kf = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
    e = exp_reduced32(v, kf) * np.int32(
        (np.int32(kf) + np.int32(127)) << np.int32(23)).view(np.float32)
    e = np.float32(0.0) if d < np.float32(-87.33654) else e
    return d if d != d else e


def sigmoid32(x):
    e = exp_neg32(-abs(x))
    s = np.float32(1.0) / (np.float32(1.0) + e)
    s = s if x >= np.float32(0) else np.float32(e * s)
    return x if x != x else s


def exp32(x):
    """exp of a float32 (see the module docstring)."""
    v = min(max(x, np.float32(-104.0)), np.float32(88.7228394))
    kf = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
    e = exp_reduced32(v, kf)
    k1 = np.floor(kf * np.float32(0.5))
    s1 = np.int32((np.int32(k1) + np.int32(127)) << np.int32(23)).view(np.float32)
    s2 = np.int32((np.int32(kf - k1) + np.int32(127)) << np.int32(23)).view(np.float32)
    e = e * s1 * s2
    return x if x != x else e


def log32(x):
    """log of a float32 (see the module docstring)."""
    tiny = x < np.float32(1.17549435e-38)
    scale = np.float32(33554432.0) if tiny else np.float32(1.0)  # denormals: times 2^25
    i = np.float32(x * scale).view(np.int32)
    e0 = np.float32((i >> np.int32(23)) - np.int32(126))
    e1 = e0 - np.float32(25.0) if tiny else e0
    m0 = np.int32((i & np.int32(8388607)) | np.int32(1056964608)).view(np.float32)
    low = m0 < np.float32(0.707106781186547524)
    ef = e1 - np.float32(1.0) if low else e1
    m = m0 + m0 - np.float32(1.0) if low else m0 - np.float32(1.0)
    z = m * m
    y = np.float32(7.0376836292e-2)
    y = y * m + np.float32(-1.1514610310e-1)
    y = y * m + np.float32(1.1676998740e-1)
    y = y * m + np.float32(-1.2420140846e-1)
    y = y * m + np.float32(1.4249322787e-1)
    y = y * m + np.float32(-1.6668057665e-1)
    y = y * m + np.float32(2.0000714765e-1)
    y = y * m + np.float32(-2.4999993993e-1)
    y = y * m + np.float32(3.3333331174e-1)
    y = y * m * z
    y = y + ef * np.float32(-2.12194440e-4)
    y = y - np.float32(0.5) * z
    r = m + y + ef * np.float32(0.693359375)
    if x != x:
        return x
    if x < np.float32(0.0):
        return np.float32(np.nan)
    if x == np.float32(0.0):
        return np.float32(-np.inf)
    if x == np.float32(np.inf):
        return x
    return r


def log1p32(x):
    """log(1 + x) of a float32: log32(1 + x) * x / ((1 + x) - 1), x where 1 + x rounds to 1."""
    u = np.float32(1.0) + x
    d = u - np.float32(1.0)
    r = log32(u) * (x / d)
    if x != x:
        return x
    if d == np.float32(0.0):
        return x
    if x == np.float32(np.inf):
        return x
    return r


def expm1_32(x):
    """exp(x) - 1 of a float32: below 0.7 in magnitude x + x^2 / 2 + x^3 q(x), else
    exp32(x) - 1 (no cancellation left there to amplify its error by more than ~2)."""
    t = x * x
    q = np.float32(2.7359029e-06)
    q = q * x + np.float32(2.5079658e-05)
    q = q * x + np.float32(0.00019844728)
    q = q * x + np.float32(0.001388802)
    q = q * x + np.float32(0.008333322)
    q = q * x + np.float32(0.041666675)
    q = q * x + np.float32(0.16666667)
    small = x + (np.float32(0.5) * t + t * x * q)
    big = exp32(x) - np.float32(1.0)
    r = small if abs(x) < np.float32(0.7) else big
    return x if x != x or x == np.float32(0.0) else r  # NaN; -0.0 keeps its sign


def erf32(x):
    """erf of a float32 (see the module docstring)."""
    a = abs(x)
    t = x * x
    # |x| < 1: x (c0 + t q(t)), c0 = 2 / sqrt(pi); x c0 as an exact sum hi + lo of 12-bit halves
    q = np.float32(7.847259e-05)
    q = q * t + np.float32(-0.0008008189)
    q = q * t + np.float32(0.005188099)
    q = q * t + np.float32(-0.026853692)
    q = q * t + np.float32(0.112835824)
    q = q * t + np.float32(-0.37612626)
    xh = np.int32(np.float32(x).view(np.int32) & np.int32(-4096)).view(np.float32)
    xl = x - xh
    hi = x * np.float32(1.1283791)
    lo = ((xh * np.float32(1.1279297) - hi) + xh * np.float32(0.00044941902)
          + xl * np.float32(1.1279297)) + xl * np.float32(0.00044941902)
    small = hi + (lo + (x * np.float32(5.9167718e-08) + (x * t) * q))
    # 1 <= |x|: 1 - exp(-v^2) erfcx(v), v = |x| clamped to [1, 4] (erf rounds to 1 from 3.92),
    # v^2 = h + sq_lo exactly, erfcx(v) = erfc(v) exp(v^2) a polynomial in 1 / v
    v = min(max(a, np.float32(1.0)), np.float32(4.0))
    vh = np.int32(np.float32(v).view(np.int32) & np.int32(-4096)).view(np.float32)
    vl = v - vh
    h = v * v
    sq_lo = ((vh * vh - h) + np.float32(2.0) * vh * vl) + vl * vl
    e = exp_neg32(-h) * (np.float32(1.0) - sq_lo)
    u = np.float32(1.0) / v
    r = np.float32(0.029677236)
    r = r * u + np.float32(-0.17400144)
    r = r * u + np.float32(0.42458844)
    r = r * u + np.float32(-0.518395)
    r = r * u + np.float32(0.2225583)
    r = r * u + np.float32(0.23908538)
    r = r * u + np.float32(-0.37896076)
    r = r * u + np.float32(0.021224173)
    r = r * u + np.float32(0.5616815)
    r = r * u + np.float32(0.00012575778)
    big = np.float32(1.0) - e * r
    big = big if x >= np.float32(0.0) else -big
    out = small if a < np.float32(1.0) else big
    return x if x != x or x == np.float32(0.0) else out  # NaN; -0.0 keeps its sign


def trig_pick(e, v0, v1, v2, v3, v4):
    """``v[j0]`` for the chunk offset j0 = max(0, floor((e - 2) / 24)) of :func:`trig32`."""
    return v4 if e >= 98 else v3 if e >= 74 else v2 if e >= 50 else v1 if e >= 26 else v0


def trig32(x, cosine):
    """sin (``cosine`` 0) or cos (``cosine`` 1) of a float32, computed in float64 without a
    libm call or a branch, so that a loop of it vectorizes (see the module docstring)."""
    a = abs(x)
    bits = np.int64(np.float32(a).view(np.int32))
    ef = bits >> 23
    mant = bits & 8388607
    m = np.float64(mant + 8388608 if ef > 0 else mant)
    e = max(ef, 1) - 150  # a = m 2^e, m an integer below 2^24
    # a < 2^23: k = rint(a 2 / pi), a - k pi / 2 with pi / 2 in three parts, the first two of
    # 30 bits (k times them is exact for k < 2^23)
    xd = np.float64(a)
    k = np.rint(xd * 0.6366197723675814)
    r_small = (((xd - k * 1.5707963276654482) + k * 8.705515692000731e-10)
               + k * 3.50343439808993e-19)
    # a >= 2^23 (e >= 0): a 2 / pi mod 4 from the 24-bit chunks CH[j] of 2 / pi (2 / pi =
    # sum CH[j] 2^(-24 (j + 1))): the terms j < j0 are multiples of 4 and drop out, the next
    # five t_i = m CH[j0 + i] 2^(sh - 24 (i + 1)), sh = e - 24 j0 in [0, 25], are exact
    # products; t0, t1 mod 4 and their sum s are exact, and s - rint(s + t2) + t2 is exact
    # where it cancels (x near a multiple of pi / 2), so f keeps its relative precision
    j0 = trig_pick(e, 0, 1, 2, 3, 4)
    pw = np.int64((e - 24 * j0 + 1023) << 52).view(np.float64)  # 2^sh
    # c_i = CH[j0 + i] 2^(-24 (i + 1)) (exact), CH = 0xa2f983, 0x6e4e44, 0x1529fc, 0x2757d1,
    # 0xf534dd, 0xc0db62, 0x95993c, 0x439041, 0xfe5163
    c0 = trig_pick(e, 0.6366197466850281, 0.4308817386627197,
                   0.0826718807220459, 0.15368372201919556, 0.9578378796577454)
    c1 = trig_pick(e, 2.5682552973194106e-08, 4.92762808335101e-09,
                   9.16026365871403e-09, 5.7091586569413266e-08, 4.490301108717176e-08)
    c2 = trig_pick(e, 2.937095214933759e-16, 5.459942614265698e-16,
                   3.40292373713334e-15, 2.6764280251962997e-15, 2.076097235478077e-15)
    c3 = trig_pick(e, 3.2543794001732456e-23, 2.0283006054957748e-22,
                   1.5952754170872567e-22, 1.2374503823984128e-22, 5.588721055095536e-23)
    c4 = trig_pick(e, 1.2089613708828537e-29, 9.508582455439906e-30,
                   7.375779047002869e-30, 3.331137332377157e-30, 1.2538841382255167e-29)
    mp = m * pw
    t0 = mp * c0
    t1 = mp * c1
    t2 = mp * c2
    t3 = mp * c3
    t4 = mp * c4
    s = (t0 - 4.0 * np.floor(t0 * 0.25)) + (t1 - 4.0 * np.floor(t1 * 0.25))
    kb = np.rint(s + t2)
    f = (((s - kb) + t2) + t3) + t4
    big = a >= np.float32(8388608.0)
    r = f * 1.5707963267948966 if big else r_small
    q = (np.int64(kb if big else k) + cosine) & 3
    # |r| <= pi / 4 (and a hair), z = r^2: sin r = r + r z S(z), cos r = 1 + z C(z) (Taylor's
    # series to r^13 / r^12: truncated below 1e-11) as one Horner chain, each lane taking the
    # coefficients of its quadrant's parity; the quadrant's sign (and an odd sine's) last
    z = r * r
    odd = (q & 1) == 1
    p = 2.08767569878681e-09 if odd else 1.6059043836821613e-10
    p = (-2.755731922398589e-07 if odd else -2.505210838544172e-08) + z * p
    p = (2.48015873015873e-05 if odd else 2.7557319223985893e-06) + z * p
    p = (-0.001388888888888889 if odd else -0.0001984126984126984) + z * p
    p = (0.041666666666666664 if odd else 0.008333333333333333) + z * p
    p = (-0.5 if odd else -0.16666666666666666) + z * p
    u = 1.0 if odd else r
    v = u + u * z * p
    flip = (q >= 2) != (cosine == 0 and np.float32(x).view(np.int32) < 0)  # sin(-0.0) = -0.0
    out = np.float32(-v if flip else v)
    if x != x:
        return x
    if a == np.float32(np.inf):
        return np.float32(np.nan)
    return out


def sin32(x):
    """sin of a float32 (:func:`trig32`)."""
    return trig32(x, 0)


def cos32(x):
    """cos of a float32 (:func:`trig32`)."""
    return trig32(x, 1)


def _own_source() -> str:
    """This module's source as it was imported, or "" (no source file)."""
    try:
        with open(__file__, encoding="utf-8") as f:
            return f.read()
    except (OSError, NameError):
        return ""


# The native loops expand these functions from their source text (llvm_expr.function_tree):
# read with the import, and looked up by name, so that a file edited or upgraded under a
# running process cannot hand it another function's lines (inspect.getsource reads the file
# again at the code's old line numbers: cos32's kernel once computed sin).
SOURCE = _own_source()
