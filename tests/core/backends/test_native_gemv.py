"""Products of a few rows on kiln's row-vector kernels (gemm/native_gemv.py: the column strips
with register accumulators, and the stream of ``B``'s rows) against the float64 product, per
dtype, on AVX2's and AVX-512's choices (vector width and kernel): column tails (a masked last
vector), an inner dimension of one, a strided ``A``, the bias / ReLU epilogue (kiln's ReLU:
NaN stays NaN), products split over threads; what it refuses; whole models at batch 1..8
(the serving plan takes the kernel with its epilogue, and reads new weights)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import set_cpu
from step_recorder import StepRecorder
from test_native_matmul import _reference  # the float64 product, bias, kiln's ReLU

import kiln
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_gemv
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.backends.cpu.runtime import threads

pytestmark = pytest.mark.skipif(not native.enabled(), reason="needs the native path")

TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-12, atol=1e-12)}
SHAPES = [(784, 512), (512, 10), (37, 100), (1, 64), (5, 3), (300, 1)]


def _run(a, b, out, epilogue=None):
    bld = StepRecorder()
    assert native_gemv.add(bld, a, b, out, epilogue=epilogue)
    bld.run()
    return bld.steps


def _tol(dtype, k):
    t = TOL[dtype]
    return dict(rtol=t["rtol"], atol=t["atol"] * np.sqrt(k))


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k, n", SHAPES)
@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_products_match_the_float64_product(m, k, n, dtype, avx512, stream, monkeypatch,
                                            cpu_options):
    set_cpu(monkeypatch, avx512)
    cpu_options(gemv_stream_rows=4 if stream else 0,
                gemv_stream_vectors=0 if stream else 1 << 30)
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.normal(size=(m, k)).astype(dtype)
    b = rng.normal(size=(k, n)).astype(dtype)
    out = np.full((m, n), np.nan, dtype)
    assert native_gemv.streams(m, n, native_gemv.lanes(dtype)) == stream
    _run(a, b, out)
    np.testing.assert_allclose(out, _reference(a, b), **_tol(dtype, k))


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("m, n", [(1, 512), (1, 10), (2, 100), (4, 70), (3, 16)])
def test_the_bias_and_relu_epilogue(m, n, dtype, avx512, relu, monkeypatch):
    set_cpu(monkeypatch, avx512)
    rng = np.random.default_rng(n + m)
    k = 50
    a = rng.normal(size=(m, k)).astype(dtype)
    if m > 1:
        a[-1, 3] = np.nan  # the last row NaN everywhere: NaN passes kiln's ReLU
    b = rng.normal(size=(k, n)).astype(dtype)
    bias = rng.normal(size=n).astype(dtype)
    out = np.empty((m, n), dtype)
    _run(a, b, out, epilogue=(bias, relu))
    want = _reference(a, b, bias, relu)
    np.testing.assert_allclose(out, want, **_tol(dtype, k))
    if m > 1:
        assert np.isnan(out[-1]).all()
    if relu:
        rows = out[:max(1, m - 1)]
        assert (rows >= 0).all() and (rows == 0).any()


@pytest.mark.parametrize("epilogue", [True, False])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("parts", [2, 3])
def test_a_product_split_over_its_inner_dimension(parts, avx512, m, epilogue, monkeypatch,
                                                  cpu_options):
    """Split, each part takes a block of B's rows (part 0 into the output, the others into
    buffers of their own), then one step adds them in order with the epilogue: the float64
    product's values; the same bits on every engine (a busy machine runs the same parts in
    order); NaN passes."""
    set_cpu(monkeypatch, avx512)
    rng = np.random.default_rng(parts * 10 + m)
    a = rng.normal(size=(m, 300)).astype(np.float32)
    a[-1, 7] = np.nan if m > 1 else a[-1, 7]
    b = rng.normal(size=(300, 1000)).astype(np.float32)  # 1000 columns: a masked tail
    bias = rng.normal(size=1000).astype(np.float32)
    ep = (bias, True) if epilogue else None
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(gemv_split_work=0)
    got = {}
    for engine in ("serial", "spin", "portable"):
        with workers.forced(engine):
            out = np.full((m, 1000), -7.0, np.float32)
            steps = _run(a, b, out, epilogue=ep)
        assert [label for _, _, label in steps] == [
            "test:gemv_parts", "test:gemv_sum" + ("_bias_relu" if epilogue else "")]
        assert getattr(steps[0][0], "parts", 1) == parts
        got[engine] = out
    want = _reference(a, b, *(ep or ()))
    np.testing.assert_allclose(got["serial"], want, rtol=1e-5, atol=1e-4)
    if m > 1:
        assert np.isnan(got["serial"][-1]).all()
    np.testing.assert_array_equal(got["spin"], got["serial"])
    np.testing.assert_array_equal(got["portable"], got["serial"])


def test_a_strided_a_is_read_in_place():
    rng = np.random.default_rng(3)
    big = rng.normal(size=(8, 90)).astype(np.float32)
    a = big[::2, 5:65]  # 4 rows, a row stride of 180 elements
    b = rng.normal(size=(60, 40)).astype(np.float32)
    out = np.empty((4, 40), np.float32)
    _run(a, b, out)
    np.testing.assert_allclose(out, _reference(a, b), rtol=1e-5, atol=1e-4)
    at = np.asfortranarray(rng.normal(size=(3, 60)).astype(np.float32))  # column-major A
    got = np.empty((3, 40), np.float32)
    _run(at, b, got)
    np.testing.assert_allclose(got, _reference(at, b), rtol=1e-5, atol=1e-4)


def test_what_it_refuses():
    suits = native_gemv.suits
    a = np.zeros((1, 64), np.float32)
    w = np.zeros((64, 32), np.float32)
    out = np.zeros((1, 32), np.float32)
    assert suits(a, w, out)
    assert not suits(np.zeros((5, 64), np.float32), w, np.zeros((5, 32), np.float32))  # 5 rows
    assert not suits(a, np.zeros((32, 64), np.float32).T, out)  # B by columns (W.T)
    assert not suits(a.astype(np.int32), w.astype(np.int32), out.astype(np.int32))
    assert not suits(a.astype(np.float64), w, out)  # mixed dtypes
    assert not suits(a, w, np.zeros((32, 2), np.float32)[:, :1].T)  # out not contiguous
    shared = np.zeros((1, 96), np.float32)
    assert not suits(shared[:, :64], w, shared[:, 32:64])  # out overlaps A
    bld = StepRecorder()
    assert not native_gemv.add(bld, a, w, out, epilogue=(np.zeros(31, np.float32), True))
    assert not bld.steps


# ---- whole models -------------------------------------------------------------------------------
def _mlp(dtype="float32"):
    kiln.utils.set_random_seed(0)
    model = kiln.Sequential([kiln.layers.Input((100,), dtype=dtype),
                             kiln.layers.Dense(256, activation="relu", dtype=dtype),
                             kiln.layers.Dense(70, dtype=dtype),
                             kiln.layers.Dense(10, activation="softmax", dtype=dtype)])
    return model


def _forward(model, x):
    h = x.astype(np.float64)
    for i, layer in enumerate(model.layers):
        w, bias = (v.numpy().astype(np.float64) for v in layer.weights)
        h = h @ w + bias
        if i == 0:
            h = np.maximum(h, 0.0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _labels(fn, feeds):
    return [s.label for s in fn.program.plan(feeds).steps]


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("batch", range(1, 9))
def test_serving_batches_match_the_float64_forward(batch, avx512, monkeypatch):
    set_cpu(monkeypatch, avx512)
    model = _mlp()
    x = np.random.default_rng(batch).normal(size=(batch, 100)).astype(np.float32)
    got = model.predict_on_batch(x)
    np.testing.assert_allclose(got, _forward(model, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(model(x)), _forward(model, x), rtol=1e-5, atol=1e-6)
    every = _labels(model.predict_function, [x])
    labels = [s for s in every if s.startswith("matmul")]
    if batch <= native_gemv.MAX_ROWS:
        # the bias add (and ReLU) is each product's epilogue (of its one step, or of the step
        # adding its parts where it is split): no pass after
        assert [s.replace("gemv_sum", "gemv") for s in labels if s != "matmul:gemv_parts"] \
            == ["matmul:gemv_bias_relu", "matmul:gemv_bias", "matmul:gemv_bias"], labels
        assert set(every) <= set(labels) | {"softmax:short_rows"}, every
    else:
        assert not any("gemv" in s for s in labels), labels


def test_a_float64_model_at_batch_1():
    model = _mlp("float64")
    x = np.random.default_rng(0).normal(size=(1, 100))
    got = model.predict_on_batch(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, _forward(model, x), rtol=1e-12, atol=1e-15)
    labels = [s for s in _labels(model.predict_function, [x]) if s.startswith("matmul")]
    assert labels == ["matmul:gemv", "matmul:gemv", "matmul:gemv"], labels  # float32 epilogues


def test_new_weights_reach_the_serving_plan():
    model = _mlp()
    x = np.random.default_rng(1).normal(size=(1, 100)).astype(np.float32)
    first = model.predict_on_batch(x)
    weights = [w * 0.5 for w in model.get_weights()]
    model.set_weights(weights)
    second = model.predict_on_batch(x)
    np.testing.assert_allclose(second, _forward(model, x), rtol=1e-5, atol=1e-6)
    assert not np.allclose(first, second)


def test_one_kernel_serves_every_small_batch_and_training_stays_on_blas():
    from kiln.core.backends.cpu.codegen import jit

    model = _mlp()
    model.compile("sgd", "mse")
    x = np.random.default_rng(5).normal(size=(4, 100)).astype(np.float32)
    model.predict_on_batch(x[:1])
    before = dict(jit.stats)
    for n in (2, 3, 4):  # a new plan each, no new kernel (the rows are a parameter)
        np.testing.assert_allclose(model.predict_on_batch(x[:n]), _forward(model, x[:n]),
                                   rtol=1e-5, atol=1e-6)
    assert jit.stats["compiled"] == before["compiled"]
    assert jit.stats["cache_hits"] == before["cache_hits"]
    y = np.zeros((2, 10), np.float32)
    model.train_on_batch(x[:2], y)
    labels = _labels(model.train_function, [x[:2], y])
    assert not any("gemv" in s for s in labels) and "matmul" in labels


@pytest.mark.parametrize("parts", [2, 3])
def test_a_strided_a_split_over_the_inner_dimension(parts, monkeypatch, cpu_options):
    # each part reads its block of A's columns in place through A's strides
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(gemv_split_work=0)
    rng = np.random.default_rng(parts)
    big = rng.normal(size=(8, 190)).astype(np.float32)
    a = big[::2, 5:165]  # 4 rows, a row stride of 380 elements
    at = np.asfortranarray(rng.normal(size=(3, 160)).astype(np.float32))  # column-major A
    b = rng.normal(size=(160, 40)).astype(np.float32)
    for x in (a, at):
        out = np.full((len(x), 40), np.nan, np.float32)
        steps = _run(x, b, out)
        assert getattr(steps[0][0], "parts", 1) == parts
        np.testing.assert_allclose(out, _reference(x, b), rtol=1e-5, atol=1e-4)
