"""The Winograd convolutions' batched products (winograd.products: the register-blocked
native kernel of native_gemm.py, else kiln's BLAS) against the float64 product: both lane
counts, row tails (M not a multiple of the block height) and column tails (N a multiple of
the lanes but not of the block width), the kernel gradient's transposed A, block-strided tile
buffers, split over threads or not, and the shapes the kernel leaves to BLAS."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import set_cpu
from step_recorder import StepRecorder

from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import products
from kiln.core.backends.cpu.kernels.conv import winograd
from kiln.core.backends.cpu.runtime import threads

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native path")


def _tiles(rng, blocks, rows, cols):
    t = winograd.Tiles(blocks, rows, cols)
    t.view[...] = rng.normal(size=(blocks, rows, cols)).astype(np.float32)
    return t


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("parts", [1, 3])
@pytest.mark.parametrize("blocks, m, k, n", [
    (4, 37, 19, 48),    # rows: 6 blocks of 6 + 1; columns: one 32-wide block + 16 (or 16 + 16 + 16)
    (3, 64, 32, 32),
    (2, 5, 7, 8),       # fewer rows than a block, 8 columns: the 8-lane column tail only
    (5, 32, 40, 128),
])
def test_products_match_the_float64_product(avx512, parts, blocks, m, k, n, monkeypatch):
    set_cpu(monkeypatch, avx512)
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    rng = np.random.default_rng(m * n + k)
    v = _tiles(rng, blocks, m, k)
    u = rng.normal(size=(blocks, k, n)).astype(np.float32)
    out = winograd.Tiles(blocks, m, n)
    out.view[...] = np.nan
    b = StepRecorder()
    winograd.products(b, (v.flat, v.view), u, (out.flat, out.view))
    assert not isinstance(b.steps[0][0], products.MatmulCall)  # the native kernel
    b.run()
    want = np.matmul(v.view.astype(np.float64), u.astype(np.float64))
    np.testing.assert_allclose(out.view, want, rtol=0, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("m", [32, 30, 7])  # 8-row blocks, 6-row blocks, a tail only
def test_the_kernel_gradients_transposed_products(m, monkeypatch):
    """``du[x] = V[x]^T @ Z[x]``: A read through the tile buffer's strides, few rows."""
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    rng = np.random.default_rng(m)
    v = _tiles(rng, 6, 500, m)
    z = _tiles(rng, 6, 500, 16)
    du = np.full((6, m, 16), np.nan, np.float32)
    b = StepRecorder()
    winograd.products(b, (v.flat, v.view.transpose(0, 2, 1)), (z.flat, z.view), du)
    b.run()
    want = np.matmul(v.view.transpose(0, 2, 1).astype(np.float64), z.view.astype(np.float64))
    np.testing.assert_allclose(du, want, rtol=0, atol=4e-6 * np.abs(want).max())


@pytest.mark.parametrize("n, native_kernel", [(1, True), (3, False)])
def test_a_kernel_gradient_into_one_column_runs_transposed(n, native_kernel, monkeypatch):
    """``du (Cin x 1) = V^T Z`` (a Conv2D(1) output layer) as ``du^T = Z^T V``, whose Cin
    columns fill the vectors; 3 columns are not unit-stride rows of ``du^T``: BLAS."""
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    rng = np.random.default_rng(n)
    v = _tiles(rng, 4, 300, 32)
    z = _tiles(rng, 4, 300, n)
    du = np.full((4, 32, n), np.nan, np.float32)
    b = StepRecorder()
    winograd.products(b, (v.flat, v.view.transpose(0, 2, 1)), (z.flat, z.view), du)
    assert (not isinstance(b.steps[0][0], products.MatmulCall)) == native_kernel
    b.run()
    want = np.matmul(v.view.transpose(0, 2, 1).astype(np.float64), z.view.astype(np.float64))
    np.testing.assert_allclose(du, want, rtol=0, atol=4e-6 * np.abs(want).max())


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("k", [8, 19, 32, 40])  # tails of 8- and 16-lane vectors
def test_a_forward_into_one_column_runs_as_dot_products(k, avx512, monkeypatch):
    """``out (M x 1) = V U`` (a Conv2D(1) output layer's forward): dot products along K."""
    set_cpu(monkeypatch, avx512)
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    rng = np.random.default_rng(k)
    v = _tiles(rng, 5, 301, k)
    u = rng.normal(size=(5, k, 1)).astype(np.float32)
    out = winograd.Tiles(5, 301, 1)
    out.view[...] = np.nan
    b = StepRecorder()
    winograd.products(b, (v.flat, v.view), u, (out.flat, out.view))
    assert not isinstance(b.steps[0][0], products.MatmulCall)
    b.run()
    want = np.matmul(v.view.astype(np.float64), u.astype(np.float64))
    np.testing.assert_allclose(out.view, want, rtol=0, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("n", [12, 20])  # not a multiple of 8: BLAS
def test_columns_that_do_not_fill_a_vector_go_to_blas(n):
    rng = np.random.default_rng(n)
    v = _tiles(rng, 3, 40, 16)
    u = rng.normal(size=(3, 16, n)).astype(np.float32)
    out = winograd.Tiles(3, 40, n)
    b = StepRecorder()
    winograd.products(b, (v.flat, v.view), u, (out.flat, out.view))
    assert isinstance(b.steps[0][0], products.MatmulCall)
    b.run()
    np.testing.assert_allclose(out.view, np.matmul(v.view, u), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lanes, rows, vecs", [(16, 6, 2), (16, 8, 2), (8, 4, 2)])
def test_the_accumulating_kernel_adds_into_c(lanes, rows, vecs):
    # gemm_ir(accumulate=True): C[b] += A[b] @ B[b] (the Winograd kernel gradient's chunks),
    # with a row tail (M = 13) and a column tail (N = 3 L: one wide block of 2 L, then L)
    from kiln.core.backends.cpu.gemm import native_gemm

    rng = np.random.default_rng(lanes + rows)
    blocks, m, k, n = 3, 13, 11, lanes * 3
    a = rng.normal(size=(blocks, m, k)).astype(np.float32)
    bm = rng.normal(size=(blocks, k, n)).astype(np.float32)
    c0 = rng.normal(size=(blocks, m, n)).astype(np.float32)
    c = c0.copy()
    found = native.try_kernel(
        f"test_gemm_l{lanes}r{rows}v{vecs}a float32", (c, a, bm),
        [c.size, a.size, bm.size, m, k, n, m * k, k, 1, k * n, n, m * n, n, 0, blocks],
        lambda s: native_gemm.gemm_ir(s, "float32", lanes, rows, vecs, accumulate=True))
    assert found is not None
    entry, args = found
    entry(*args)
    want = c0.astype(np.float64) + np.matmul(a.astype(np.float64), bm.astype(np.float64))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    entry(*args)  # twice: the sum again
    np.testing.assert_allclose(c, want + (want - c0), rtol=1e-5, atol=1e-4)
