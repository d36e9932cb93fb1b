"""Canonical loop kernels: a generated loop over one element (e.g. the update of a Dense(1)
bias) classifies its operands as the same program over many elements does, so both use one
kernel (kiln/core/backends/cpu/kernels/elementwise.py), with the right values."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.core.backends.cpu.kernels import elementwise


def _update_kernels(shape_w: tuple, shape_b: tuple, seed: int):
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=shape_w).astype(np.float32)
    b0 = rng.normal(size=shape_b).astype(np.float32)
    xw = rng.normal(size=shape_w).astype(np.float32)
    xb = rng.normal(size=shape_b).astype(np.float32)
    w, b = kiln.Variable(w0.copy()), kiln.Variable(b0.copy())
    pw = kiln.placeholder(shape_w)
    pb = kiln.placeholder(shape_b)
    # the same program on both: p <- p * 0.75 + x (in place)
    f = kiln.function([pw, pb], [], updates=[(w, w * 0.75 + pw), (b, b * 0.75 + pb)],
                      backend="cpu")
    before = set(elementwise._kernels)
    f(xw, xb)
    new = set(elementwise._kernels) - before
    np.testing.assert_allclose(w.numpy(), w0 * 0.75 + xw, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 * 0.75 + xb, rtol=1e-6)
    return new


def test_a_one_element_update_shares_the_many_element_kernel():
    new = _update_kernels((5, 3), (1,), seed=0)
    specs = [s for s in new if s.extra_dtypes == () and s.reduce is None]
    assert len(specs) == 1, [s.signature() for s in specs]
    assert specs[0].classes == ("O", "S", "N")  # p (in place), 0.75, x


def test_a_one_element_loop_of_a_broadcast_scalar_keeps_it_a_scalar():
    # b (1,) <- b * s + x, s a () placeholder: s stays "S" in both loops
    rng = np.random.default_rng(1)
    for shape in ((4,), (1,)):
        v0 = rng.normal(size=shape).astype(np.float32)
        x = rng.normal(size=shape).astype(np.float32)
        v = kiln.Variable(v0.copy())
        ps, px = kiln.placeholder(()), kiln.placeholder(shape)
        f = kiln.function([ps, px], [], updates=[(v, v * ps + px)], backend="cpu")
        before = set(elementwise._kernels)
        f(np.float32(1.5), x)
        np.testing.assert_allclose(v.numpy(), v0 * 1.5 + x, rtol=1e-6)
        for spec in set(elementwise._kernels) - before:
            assert "S" in spec.classes
