"""The loop op on the cuda backend (simulator unless NUMBA_ENABLE_CUDASIM=0): forward and
gradient of a reversed RNN-style loop with a hoisted projection and consts, against the CPU
backend; the body's consts stay valid across steps (its arena never reuses a feed's slot)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("numba.cuda")
pytest.importorskip("numba_cuda")

import kiln  # noqa: E402
import kiln.ops as K  # noqa: E402


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_forward_and_gradient_match_the_cpu(reverse):
    x = kiln.placeholder((None, 2, 3))
    h0 = kiln.placeholder((2, 4))
    w = kiln.placeholder((3, 4))
    u = kiln.placeholder((4, 4))

    def step(h, xt):
        h = K.tanh(K.matmul(xt, w) + K.matmul(h, u))
        return h, h * h

    hT, ys = K.scan(step, h0, x, reverse=reverse)
    loss = K.sum(ys) + K.sum(hT * hT)
    outs = [hT, ys, loss] + kiln.grad(loss, [x, h0, w, u])
    rng = np.random.default_rng(0)
    args = [rng.normal(size=s).astype("float32") * 0.5 for s in ((5, 2, 3), (2, 4), (3, 4),
                                                                 (4, 4))]
    want = kiln.function([x, h0, w, u], outs, backend="cpu")(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no host fallback
        got = kiln.function([x, h0, w, u], outs, backend="cuda")(*args)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
