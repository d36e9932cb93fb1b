"""Checks that need a real NVIDIA GPU (marked ``cuda``; skipped elsewhere). Run them with
``NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/core/cuda -m cuda``: realistic sizes, so the
GPU's block sizes, block-mode reductions, cuBLAS (when CuPy is installed) and the direct
launch path are exercised. The other test files also run on the GPU then."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba.cuda")
pytest.importorskip("numba_cuda")

import kiln  # noqa: E402
import kiln.ops as K  # noqa: E402
from kiln.core.backends.cuda import _cublas, _jit, _lower  # noqa: E402

pytestmark = pytest.mark.cuda


def _compare(inputs, outputs, feeds, rtol=2e-4, atol=1e-5):
    got = kiln.function(inputs, outputs, backend="cuda")(*feeds)
    want = kiln.function(inputs, outputs, backend="reference")(*feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("blas", ["kiln", "cupy"])
def test_gemm_shapes_and_strides(monkeypatch, blas):
    if blas == "cupy":
        pytest.importorskip("cupy")
    monkeypatch.setenv("KILN_CUDA_BLAS", blas)
    monkeypatch.setattr(_lower, "BLAS", _cublas._Blas())
    rng = np.random.default_rng(0)
    a = kiln.placeholder((None, 300))
    b = kiln.Variable(rng.normal(size=(300, 70)))
    c = kiln.placeholder((3, 1, 33, 17))
    d = kiln.Variable(rng.normal(size=(4, 17, 65)))
    outs = [a @ b, K.transpose(a[:, ::2]) @ a[:, 1::2], c @ d, (a @ b).T @ a[:, :5]]
    _compare([a, c], outs, [rng.normal(size=(130, 300)).astype(np.float32),
                            rng.normal(size=(3, 1, 33, 17)).astype(np.float32)])
    if blas == "cupy":
        assert _lower.BLAS.cp is not None


def test_mlp_and_convnet_training_match_reference():
    rng = np.random.default_rng(1)
    x = kiln.placeholder((None, 28, 28, 1))
    y = kiln.placeholder((None,), "int32")
    key = kiln.placeholder((2,), "int64")

    def build(backend):
        r = np.random.default_rng(2)
        w1 = kiln.Variable(r.normal(size=(3, 3, 1, 8)) * 0.3)
        w2 = kiln.Variable(r.normal(size=(3, 3, 8, 16)) * 0.1)
        w3 = kiln.Variable(r.normal(size=(400, 10)) * 0.05)
        b1, b2, b3 = (kiln.Variable(np.zeros(n)) for n in (8, 16, 10))
        params = [w1, b1, w2, b2, w3, b3]
        h = K.max_pool2d(K.relu(K.conv2d(x, w1) + b1), 2)
        h = K.max_pool2d(K.relu(K.conv2d(h, w2) + b2), 2)
        h = K.dropout(K.reshape(h, (-1, 400)), 0.5, key, salt=1)
        loss = K.mean(K.sparse_softmax_cross_entropy(h @ w3 + b3, y))
        grads = kiln.grad(loss, params)
        updates = [(p, p - 0.05 * g) for p, g in zip(params, grads)]
        return kiln.function([x, y, key], loss, updates=updates, backend=backend), params

    fc, pc = build("cuda")
    fr, pr = build("reference")
    for step in range(3):
        xb = rng.random((64, 28, 28, 1), dtype=np.float32)
        yb = rng.integers(0, 10, 64).astype(np.int32)
        k = np.array([5, step], np.int64)
        np.testing.assert_allclose(fc(xb, yb, k), fr(xb, yb, k), rtol=1e-4)
    for a, b in zip(pc, pr):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)
    assert _jit.stats["direct_launch_fallbacks"] == 0
    assert _jit.stats["direct_launches_bound"] > 0


def test_large_reductions_softmax_and_random():
    rng = np.random.default_rng(3)
    x = kiln.placeholder((None, 1000))
    key = kiln.placeholder((2,), "int64")
    outs = [K.sum(x, axis=1), K.max(x, axis=0), K.logsumexp(x, axis=1), K.argmax(x, axis=1),
            K.mean(x), K.softmax(x), K.log_softmax(x, axis=0),
            K.random_uniform(key, x, salt=9)]
    got = _compare([x, key], outs, [rng.normal(size=(300, 1000)).astype(np.float32),
                                    np.array([3, 4], np.int64)], rtol=1e-4, atol=1e-4)
    ref = kiln.function([x, key], outs[-1], backend="reference")(
        np.zeros((300, 1000), np.float32), np.array([3, 4], np.int64))
    np.testing.assert_array_equal(got[-1], ref)  # bit for bit
