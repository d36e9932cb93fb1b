"""Scalar functions of known accuracy for the CPU's generated float32 loops (see
``codegen.FAST_F32``): plain Python here (what ``KILN_JIT=0`` runs, and the source the native
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


def exp_neg32(d):
    """exp(d) for d <= 0 (a softmax's x - max, a sigmoid's -|x|): Cephes' expf polynomial
    with 2^k built from its bits; exactly 0 below -87.33 (exp underflows there); NaN stays."""
    v = max(d, np.float32(-87.33654))
    kf = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
    r = v - kf * np.float32(0.693359375) + kf * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    e = (p * (r * r) + r + np.float32(1.0)) * np.int32(
        (np.int32(kf) + np.int32(127)) << np.int32(23)).view(np.float32)
    e = np.float32(0.0) if d < np.float32(-87.33654) else e
    return d if d != d else e


def sigmoid32(x):
    e = exp_neg32(-abs(x))
    s = np.float32(1.0) / (np.float32(1.0) + e)
    s = s if x >= np.float32(0) else np.float32(e * s)
    return x if x != x else s
