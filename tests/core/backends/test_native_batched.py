"""Batched small products on kiln's register-blocked kernel (gemm/native_batched.py) against
the float64 product: one and two batch axes (an attention's samples and heads as strided
views), a transposed ``B`` laid out first, a transposed ``A`` read in place, row tails and
column blocks of 1-5 vectors, 16 and 8 lanes, one part or several (the same bits); the
products it leaves to ``MatmulCall``; a plan that calls BLAS runs it on the caller's thread;
and MultiHeadAttention trained on it against the reference backend."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import set_cpu
from step_recorder import StepRecorder

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_batched
from kiln.core.backends.cpu.runtime import threads
from kiln.core.backends.cpu.runtime.threads import SplitCall

pytestmark = pytest.mark.skipif(not native.enabled(), reason="needs the native path")


def _run(x, y, spread=True):
    out = np.full(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]) + (x.shape[-2], y.shape[-1]),
                  np.nan, np.float32)
    rec = StepRecorder()
    assert native_batched.add(rec, x, y, out, spread=spread)
    assert rec.steps[-1][2] == "test:batched"
    rec.run()
    return out, rec


def _check(x, y, out):
    want = np.matmul(x.astype(np.float64), y.astype(np.float64))
    k = x.shape[-1]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))


# (batch, M, K, N): row tails (37, 5 rows), N of 1 to 5 vectors, K of 1 and 200
SHAPES = [((6,), 64, 16, 64), ((5,), 37, 9, 16), ((3,), 5, 200, 80), ((2, 3), 20, 1, 48),
          ((4,), 64, 64, 32)]


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("batch, m, k, n", SHAPES)
def test_contiguous_batches_match_the_float64_product(avx512, parts, batch, m, k, n,
                                                      monkeypatch):
    set_cpu(monkeypatch, avx512)
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    lanes = 16 if avx512 else 8
    n = n // lanes * lanes or lanes
    rng = np.random.default_rng(m * k + n)
    x = rng.normal(size=(*batch, m, k)).astype(np.float32)
    y = rng.normal(size=(*batch, k, n)).astype(np.float32)
    out, _ = _run(x, y)
    _check(x, y, out)


def _heads(rng, b=3, t=32, h=4, d=16):
    """q, k (b, t, h, d) arrays: the layout of an attention layer's projections."""
    return (rng.normal(size=(b, t, h, d)).astype(np.float32) for _ in range(2))


@pytest.mark.parametrize("parts", [1, 2])
def test_attention_views_two_batch_axes(parts, monkeypatch):
    set_cpu(monkeypatch, True)
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    rng = np.random.default_rng(1)
    q, k = _heads(rng)
    # q k^T per sample and head: B is k^T (unit stride along the inner axis): laid out first
    scores, rec = _run(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1))
    assert [s[2] for s in rec.steps] == ["test:pack", "test:batched"]
    _check(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1), scores)
    # p v with p contiguous and v a view; then p^T v (A transposed: read in place)
    p = rng.normal(size=(3, 4, 32, 32)).astype(np.float32)
    for a in (p, p.transpose(0, 1, 3, 2)):
        got, rec = _run(a, q.transpose(0, 2, 1, 3))
        assert len(rec.steps) == 1
        _check(a, q.transpose(0, 2, 1, 3), got)


def test_one_part_or_two_give_the_same_bits(monkeypatch):
    set_cpu(monkeypatch, True)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(7, 3, 40, 33)).astype(np.float32)
    y = rng.normal(size=(7, 3, 33, 64)).astype(np.float32)
    outs = []
    for parts in (1, 2, 3):
        monkeypatch.setattr(threads, "kernel_threads", lambda parts=parts: parts)
        out, rec = _run(x, y)
        assert isinstance(rec.steps[-1][0], SplitCall) == (parts > 1)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    serial, rec = _run(x, y, spread=False)  # a plan with BLAS calls: the caller's thread
    assert not isinstance(rec.steps[-1][0], SplitCall) and np.array_equal(serial, outs[0])


def test_the_products_it_leaves(monkeypatch):
    set_cpu(monkeypatch, True)
    rng = np.random.default_rng(3)

    def arr(*shape, dtype=np.float32):
        return rng.normal(size=shape).astype(dtype)

    out = np.empty((4, 8, 16), np.float32)
    assert native_batched.suits(arr(4, 8, 5), arr(4, 5, 16), out)
    assert not native_batched.suits(arr(4, 8, 5), arr(4, 5, 20), np.empty((4, 8, 20),
                                                                           np.float32))
    assert not native_batched.suits(arr(1, 8, 5), arr(4, 5, 16), out)        # broadcast
    assert not native_batched.suits(arr(4, 8, 5, dtype=np.float64),
                                    arr(4, 5, 16, dtype=np.float64), out.astype(np.float64))
    big = arr(2, 300, 4)
    assert not native_batched.suits(big, arr(2, 4, 16), np.empty((2, 300, 16), np.float32))
    # three batch axes of x that no stride folds (its first two swapped)
    x = arr(3, 2, 4, 8, 5).transpose(1, 0, 2, 3, 4)
    y = arr(2, 3, 4, 5, 16)
    assert not native_batched.suits(x, y, np.empty((2, 3, 4, 8, 16), np.float32))
    assert native_batched.suits(x.copy(), y, np.empty((2, 3, 4, 8, 16), np.float32))


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("parts", [1, 2])
@pytest.mark.parametrize("m, k, n, a_t, b_t", [
    (2048, 64, 64, False, False),  # a transformer's projection: 32 products of 64 rows
    (64, 300, 48, True, False),    # a kernel gradient x.T @ d: A read transposed, 2 x 32 rows
    (37, 5, 16, False, False),     # 37 rows: one product
    (96, 64, 32, False, True),     # d @ W.T: B laid out first
])
def test_2d_products_cut_into_batches_of_rows(avx512, parts, m, k, n, a_t, b_t, monkeypatch):
    set_cpu(monkeypatch, avx512)
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    rng = np.random.default_rng(m + k)
    x = rng.normal(size=(k, m)).astype(np.float32).T if a_t else rng.normal(
        size=(m, k)).astype(np.float32)
    y = rng.normal(size=(n, k)).astype(np.float32).T if b_t else rng.normal(
        size=(k, n)).astype(np.float32)
    out, rec = _run(x, y)
    assert ("test:pack" in [s[2] for s in rec.steps]) == b_t
    _check(x, y, out)


@pytest.mark.parametrize("m, block, rows", [
    (2048, 4, 64), (64, 4, 32), (32, 16, 16), (96, 16, 48), (300, 4, 60), (300, 8, 60),
    (320, 16, 64),
    (37, 4, 37), (8, 4, 4), (7, 4, 7), (1, 4, 1)])
def test_chunk_rows(m, block, rows):
    # the largest divisor up to 64 and half the rows (two products at least), 4 or more, a
    # multiple of the block's rows where one is
    assert native_batched.chunk(m, block) == rows


def test_a_2d_products_kernel_does_not_depend_on_its_rows(monkeypatch):
    # a new batch size must not compile a new kernel: the block is the columns' choice
    names = []
    real = native_batched.native_split

    def record(b, name, *args, **kwargs):
        names.append(name)
        return real(b, name, *args, **kwargs)

    monkeypatch.setattr(native_batched, "native_split", record)
    for avx512 in (True, False):
        set_cpu(monkeypatch, avx512)
        lanes = 16 if avx512 else 8
        del names[:]
        for m in (16, 20, 64, 300, 301, 2048):
            x = np.random.default_rng(m).normal(size=(m, 6)).astype(np.float32)
            y = np.ones((6, 2 * lanes), np.float32)
            out, _ = _run(x, y)
            _check(x, y, out)
        assert len(set(names)) == 1, names


@pytest.mark.parametrize("vecs, lanes, block", [
    (4, 16, (4, 4)), (1, 16, (16, 1)), (2, 16, (8, 2)), (9, 16, (4, 4)), (1, 8, (8, 1)),
    (2, 8, (4, 2))])
def test_block_shapes(vecs, lanes, block):
    # 16 accumulators of 32 registers (AVX-512), 8 of 16 (AVX2): the columns' choice alone
    assert native_batched.block(vecs, lanes) == block


def test_overlapping_operands_are_left_to_matmul_call(monkeypatch):
    set_cpu(monkeypatch, True)
    buf = np.random.default_rng(8).normal(size=(4, 16, 16)).astype(np.float32)
    assert not native_batched.suits(buf, buf, buf)  # out is an operand
    assert native_batched.suits(buf, buf, np.empty_like(buf))


def _attention_model():
    kiln.utils.set_random_seed(0)
    inputs = kiln.Input((16, 32))
    x = kiln.layers.MultiHeadAttention(4, 16)(inputs, inputs)
    outputs = kiln.layers.Dense(3)(kiln.layers.GlobalAveragePooling1D()(x))
    return kiln.Model(inputs, outputs)


def test_multi_head_attention_trains_on_it_as_on_the_reference_backend(monkeypatch):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 16, 32)).astype(np.float32)
    y = rng.normal(size=(8, 3)).astype(np.float32)
    losses, weights = [], []
    for backend in ("cpu", "reference"):
        monkeypatch.setenv("KILN_BACKEND", backend)
        model = _attention_model()
        model.compile(kiln.optimizers.SGD(0.1), "mse")
        losses.append(model.fit(x, y, batch_size=8, epochs=3, verbose=0).history["loss"])
        weights.append([w.numpy() for w in model.weights])
        if backend == "cpu":
            labels = [s.label for s in model.train_function.program.plan([x, y]).steps]
            # the attention's six products per step at least (and the projections')
            assert sum(label == "matmul:batched" for label in labels) >= 6, labels
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def _plan_steps(fn, feeds):
    return {s.label: s for s in fn.program.plan(feeds).steps}


def test_a_plan_calling_blas_runs_it_on_the_callers_thread(monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    px, py = kiln.placeholder((1024, 64)), kiln.placeholder((6, 16, 16))
    w = np.random.default_rng(5).normal(size=(64, 36)).astype(np.float32)
    # 36 columns (not whole vectors of 8 or 16), 2.4 M multiply-adds: BLAS's, on its threads
    fn = kiln.function([px, py], [K.matmul(px, K.constant(w)), K.matmul(py, py)])
    feeds = [np.ones((1024, 64), np.float32), np.ones((6, 16, 16), np.float32)]
    steps = _plan_steps(fn, feeds)
    assert "matmul" in steps and not isinstance(steps["matmul:batched"].fn, SplitCall)
    np.testing.assert_allclose(fn(*feeds)[1], np.full((6, 16, 16), 16.0))


@pytest.mark.parametrize("head_columns, blas", [(3, False), (36, True)])
def test_a_small_head_product_leaves_a_plan_free_of_blas(head_columns, blas, monkeypatch):
    # a batch of products on the kernel, then a head of 120 rows: with 3 columns (23,040
    # multiply-adds, under 4 x 65,536) NumPy's OpenBLAS computes it on the calling thread (no
    # threads to spin), so the plan's kernels split; with 36 (276,480) BLAS's threads wake:
    # the batch then runs on the caller's thread
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    rng = np.random.default_rng(6)
    px = kiln.placeholder((120, 4, 64, 64))
    w = rng.normal(size=(64, head_columns)).astype(np.float32)
    fn = kiln.function([px], K.matmul(K.mean(K.matmul(px, px), axis=(1, 2)), K.constant(w)))
    x = rng.normal(size=(120, 4, 64, 64)).astype(np.float32)
    steps = _plan_steps(fn, [x])
    assert isinstance(steps["matmul:batched"].fn, SplitCall) == (not blas)
    x64 = x.astype(np.float64)
    want = np.matmul(x64, x64).mean(axis=(1, 2)) @ w
    np.testing.assert_allclose(fn(x), want, rtol=1e-4, atol=1e-4)
