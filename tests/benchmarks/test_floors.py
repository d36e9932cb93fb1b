"""benchmarks/floors.py: a floor's products run on what kiln's plans would run them on (kiln's
Dense kernel where every product of the step takes it, a transposed ``B`` laid out once
beforehand, else the BLAS; the BLAS always with KILN_BENCH_FLOOR_GEMM=blas), and compute the
products they stand for."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import products

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
try:
    import floors
finally:
    sys.path.pop(0)

# kiln's own Dense kernel is chosen with AVX-512 (target.py: the host, or KILN_CPU's cpu)
NATIVE = native.enabled() and target.current().native_matmul


def _calls(m, k, n, transposed=False):
    rng = np.random.default_rng(m + k + n)
    a = rng.normal(size=(k, m) if transposed else (m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    return (a.T if transposed else a), b, np.full((m, n), np.nan, np.float32)


@pytest.mark.parametrize("force_blas", [False, True])
def test_products_follow_kilns_choice_and_compute_the_product(force_blas, monkeypatch):
    if force_blas:
        monkeypatch.setenv("KILN_BENCH_FLOOR_GEMM", "blas")
    calls = [_calls(256, 100, 512), _calls(256, 512, 10), _calls(300, 64, 256, True)]
    fs, native_run = floors.products(calls)
    assert native_run == (NATIVE and not force_blas)
    assert native_run == (not any(isinstance(f, products.MatmulCall) for f in fs))
    for f, (a, b, out) in zip(fs, calls):
        f(a, b, out)
        np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64),
                                   rtol=1e-4, atol=1e-3)


def test_one_product_the_kernel_does_not_take_puts_all_on_blas():
    calls = [_calls(256, 100, 512), _calls(64, 100, 512)]  # 64 rows: the kernel's too few
    fs, native_run = floors.products(calls)
    assert not native_run and all(isinstance(f, products.MatmulCall) for f in fs)


def test_the_mlp_floors_follow_kilns_plans():
    # kiln's training plan takes every product of the MLP step too (d @ W.T after laying W.T
    # out): so does the floor, with W.T laid out once beforehand (the products alone)
    _, predict = floors.mlp_step(1024, predict=True)
    _, train = floors.mlp_step(128, predict=False)
    assert predict["native"] == NATIVE
    assert train["native"] == NATIVE


def test_a_transposed_b_is_laid_out_once():
    rng = np.random.default_rng(5)
    w = rng.normal(size=(512, 256)).astype(np.float32)
    d = rng.normal(size=(128, 256)).astype(np.float32)
    out = np.full((128, 512), np.nan, np.float32)
    fs, native_run = floors.products([(d, w.T, out)])
    assert native_run == NATIVE
    fs[0](d, w.T, out)
    np.testing.assert_allclose(out, d.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-4, atol=1e-3)
