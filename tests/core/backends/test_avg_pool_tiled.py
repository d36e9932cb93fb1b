"""kiln/core/backends/cpu/kernels/pool/avg_tiled.py: average pooling over windows that tile the
input, few channels (LeNet-5's pooling), forward and gradient: against the float64 NumPy
reference, against a closed form of the gradient, the same bits as the generic kernels, and
the plan runs the tiled kernels where they apply (and only there)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.pool import avg_tiled
from kiln.core.ops import all_ops
from kiln.core.ops.registry import apply

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite unusable here")

# (x shape, pool): 28x28x6 (LeNet layer 1), 10x10x16 (layer 2), odd sizes whose last row and
# column lie past the last window, 3x3 windows, one channel, 32 channels (the most unrolled)
CASES = [((3, 28, 28, 6), 2), ((2, 10, 10, 16), 2), ((2, 7, 9, 5), 2), ((2, 9, 11, 3), 3),
         ((1, 6, 6, 1), 2), ((2, 4, 6, 32), 2)]


def _labels(fn) -> list[str]:
    """The labels of the plan steps of ``fn`` (called once)."""
    return [s.label for p in fn.program._plans.values() for s in p.steps]


def _forward(x: np.ndarray, pool: int):
    p = kiln.placeholder(x.shape, x.dtype.name)
    return kiln.function([p], apply("avg_pool2d", p, pool_size=(pool, pool),
                                    strides=(pool, pool), padding="valid"),
                         backend="cpu", optimize=False)


def _gradient(ct: np.ndarray, hw: tuple[int, int], pool: int):
    p = kiln.placeholder(ct.shape, ct.dtype.name)
    return kiln.function([p], apply("avg_pool2d_grad", p, input_shape=hw,
                                    pool_size=(pool, pool), strides=(pool, pool),
                                    padding="valid"), backend="cpu", optimize=False)


def _closed_form_gradient(ct: np.ndarray, hw: tuple[int, int], pool: int) -> np.ndarray:
    """d/dx of sum(ct * avg_pool(x)): ct / pool^2 over each window, zero past the windows."""
    n, oh, ow, c = ct.shape
    dx = np.zeros((n, *hw, c))
    dx[:, :oh * pool, :ow * pool] = np.repeat(np.repeat(ct / pool ** 2, pool, 1), pool, 2)
    return dx


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, pool", CASES)
def test_tiled_average_pooling_matches_the_reference(shape, pool, dtype):
    x = np.random.default_rng(sum(shape)).normal(size=shape)
    fn = _forward(x.astype(dtype), pool)
    got = fn(x.astype(dtype))
    assert f"avg_pool2d:avg_pool_tiled_{pool}x{pool}c{shape[3]}" in _labels(fn)
    want = all_ops()["avg_pool2d"].ref(x, pool_size=(pool, pool), strides=(pool, pool),
                                       padding="valid")
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, pool", CASES)
def test_tiled_average_pooling_gradient_is_the_closed_form(shape, pool, dtype):
    n, h, w, c = shape
    ct = np.random.default_rng(h * w).normal(size=(n, h // pool, w // pool, c))
    fn = _gradient(ct.astype(dtype), (h, w), pool)
    got = fn(ct.astype(dtype))
    tiled = f"avg_pool2d_grad:avg_pool_grad_tiled_{pool}x{pool}c{c}" in _labels(fn)
    assert tiled == (c <= options.CpuOptions.avg_pool_max_grad_channels)
    want = _closed_form_gradient(ct, (h, w), pool)
    tol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    ref = all_ops()["avg_pool2d_grad"].ref(ct, input_shape=(h, w), pool_size=(pool, pool),
                                           strides=(pool, pool), padding="valid")
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_gradient_through_autodiff_matches_finite_differences():
    # d/dx sum(v * avg_pool(x)) in float64, central differences (the op is linear: exact)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 6, 7, 6))
    v = rng.normal(size=(2, 3, 3, 6))
    p = kiln.placeholder(x.shape, "float64")
    loss = K.sum(apply("avg_pool2d", p, pool_size=(2, 2), strides=(2, 2), padding="valid") * v)
    fn = kiln.function([p], kiln.grad(loss, [p])[0], backend="cpu")
    got = fn(x)
    f = kiln.function([p], loss, backend="cpu")
    eps = 1e-6
    for idx in [(0, 0, 0, 0), (1, 5, 6, 5), (0, 3, 4, 2), (1, 1, 5, 3)]:
        d = np.zeros_like(x)
        d[idx] = eps
        fd = (float(f(x + d)) - float(f(x - d))) / (2 * eps)
        assert abs(got[idx] - fd) < 1e-8, (idx, got[idx], fd)


@pytest.mark.parametrize("shape, pool", CASES[:3])
def test_same_bits_as_the_generic_kernels(shape, pool, monkeypatch, cpu_options):
    x = np.random.default_rng(2).normal(size=shape).astype(np.float32)
    ct = np.random.default_rng(3).normal(
        size=(shape[0], shape[1] // pool, shape[2] // pool, shape[3])).astype(np.float32)
    tiled = (_forward(x, pool)(x), _gradient(ct, shape[1:3], pool)(ct))
    cpu_options(avg_pool_max_taps=0)  # the generic kernels
    fns = (_forward(x, pool), _gradient(ct, shape[1:3], pool))
    generic = (fns[0](x), fns[1](ct))
    assert not any("tiled" in label for fn in fns for label in _labels(fn))
    for a, b in zip(tiled, generic):
        np.testing.assert_array_equal(a, b)


def test_usable_only_for_tiling_windows():
    p = np.array([2, 2, 2, 2, 0, 0])
    assert avg_tiled.usable(p, (1, 28, 28, 6), (1, 14, 14, 6), np.float32)
    assert not avg_tiled.usable(np.array([3, 3, 2, 2, 0, 0]), (1, 9, 9, 6), (1, 4, 4, 6),
                                np.float32)  # overlapping windows
    assert not avg_tiled.usable(np.array([2, 2, 2, 2, 0, 1]), (1, 7, 7, 6), (1, 4, 4, 6),
                                np.float32)  # "same" padding before
    assert not avg_tiled.usable(p, (1, 8, 8, 64), (1, 4, 4, 64), np.float32)  # many channels
    assert not avg_tiled.usable(p, (1, 8, 8, 6), (1, 4, 4, 6), np.int32)
