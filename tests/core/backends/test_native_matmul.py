"""Dense layers' products on kiln's register-blocked kernel (native_matmul.py, chosen by
linalg.dense where every product of a plan takes it) against the float64 product: row tails
(M not a multiple of the block height or the chunk), column tails (wide blocks, 16-column
blocks, a masked last vector, the narrow kernel under 16 columns), a transposed ``A``, the
bias / ReLU epilogue (NaN and infinities as kiln's ReLU treats them), one thread or two
(the same bits), the products it leaves to BLAS, and whole models: which plans take it and
what they compute; then the training step's parts (the transpose kernel, ``d @ W.T``, the
``gemm`` update with and without SGD momentum's ``w += v``, the ReLU gradient epilogue) and
an MLP trained on it against the same MLP on OpenBLAS."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import set_cpu
from in_threads import run_in_threads
from step_recorder import StepRecorder

import kiln
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_matmul, products
from kiln.core.backends.cpu.runtime import threads

pytestmark = pytest.mark.skipif(not native.enabled(), reason="needs the native path")


@pytest.fixture(autouse=True)
def _avx512_choices(monkeypatch):
    # the kernel is AVX-512's choice (target.py); its 16-lane code runs on any x86 host
    set_cpu(monkeypatch, avx512=True)


def _run(a, b, out, epilogue=None):
    bld = StepRecorder()
    assert native_matmul.add(bld, a, b, out, epilogue=epilogue)
    assert not isinstance(bld.steps[0][0], products.MatmulCall)
    bld.run()
    return bld.steps[0][2]


def _reference(a, b, bias=None, relu=False):
    want = a.astype(np.float64) @ b.astype(np.float64)
    if bias is not None:
        want = want + bias.astype(np.float64)
    if relu:
        want = np.where(want <= 0, 0.0, want)  # NaN stays NaN
    return want


SHAPES = [
    (128, 784, 512),   # the MLP's first layer at batch 128
    (131, 100, 272),   # rows: blocks of 4 + 3; columns: 4 wide blocks of 64 + one of 16
    (200, 37, 1024),   # 200 rows: 3 chunks of 64 + 8
    (257, 64, 10),     # the narrow kernel: one masked vector of 10 columns, rows 16 x 16 + 1
    (129, 5, 15),
    (160, 3, 1),
    (130, 1, 256),     # an inner dimension of one
]


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_products_match_the_float64_product(parts, m, k, n, monkeypatch, cpu_options):
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(matmul_serial_work=0)  # split even the small ones
    rng = np.random.default_rng(m * n + k)
    a = rng.normal(size=(m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    _run(a, b, out)
    np.testing.assert_allclose(out, _reference(a, b), rtol=1e-5, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("n, parts, by_columns, cuts", [
    (512, 2, True, [0, 256, 512]),
    (272, 2, True, [0, 128, 272]),            # at a multiple of the 64-column block
    (272, 3, True, [0, 64, 192, 272]),
    (272, 5, True, [0, 48, 112, 160, 224, 272]),  # parts under 64 columns: multiples of 16
    (10, 2, False, [0, 128, 257]),            # the narrow kernel: rows, in blocks of 16
])
def test_how_a_product_is_split(n, parts, by_columns, cuts, monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    got, ranges = native_matmul._ranges(257, 2000, n)
    assert got == by_columns
    assert [lo for lo, _ in ranges] + [ranges[-1][1]] == cuts


def test_a_small_product_is_one_part_and_a_tall_one_is_split_by_rows(monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    assert native_matmul._ranges(128, 10, 256) == (False, [(0, 128)])
    tall = options.CpuOptions.matmul_column_rows
    assert native_matmul._ranges(tall, 784, 512) == (False, [(0, tall // 2), (tall // 2, tall)])
    # an update (a weight's velocity, and the weight) keeps its columns with one thread
    assert native_matmul._ranges(tall, 784, 512, update=True) == (True, [(0, 256), (256, 512)])


@pytest.mark.parametrize("m, k, n", [(131, 100, 272), (257, 64, 10)])
def test_one_thread_or_two_give_the_same_bits(m, k, n, monkeypatch, cpu_options):
    cpu_options(matmul_serial_work=0)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    outs = []
    for parts in (1, 2):
        monkeypatch.setattr(threads, "kernel_threads", lambda parts=parts: parts)
        outs.append(np.empty((m, n), np.float32))
        _run(a, b, outs[-1])
    assert np.array_equal(outs[0], outs[1])


def test_a_transposed_a_is_read_through_its_strides():
    # the kernel gradient's x.T: a view, no copy
    rng = np.random.default_rng(4)
    x = rng.normal(size=(64, 300)).astype(np.float32)
    d = rng.normal(size=(64, 256)).astype(np.float32)
    out = np.empty((300, 256), np.float32)
    _run(x.T, d, out)
    np.testing.assert_allclose(out, _reference(x.T, d), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("n", [272, 10])
@pytest.mark.parametrize("parts", [1, 2, 3])
def test_the_bias_and_relu_epilogue(relu, n, parts, monkeypatch, cpu_options):
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(matmul_serial_work=0)
    rng = np.random.default_rng(5)
    a = rng.normal(size=(140, 33)).astype(np.float32)
    b = rng.normal(size=(33, n)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    bias[1], bias[2], bias[3] = np.nan, np.inf, -np.inf
    a[7] = 0.0  # row 7 of the product is 0: the bias alone
    out = np.empty((140, n), np.float32)
    label = _run(a, b, out, epilogue=(bias, relu))
    assert label.endswith("_bias_relu" if relu else "_bias")
    want = _reference(a, b, bias, relu)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)  # NaN where want is NaN
    assert np.isnan(out[:, 1]).all()
    if relu:
        assert (out[:, 3] == 0).all() and (out[7] == np.where(bias <= 0, 0, bias)).sum() == n - 1
    else:
        assert (out[:, 3] == -np.inf).all()


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("m, k, n", [(131, 100, 272), (257, 64, 10), (130, 33, 1024),
                                     (150, 17, 5), (128, 784, 512)])
@pytest.mark.parametrize("parts", [1, 2])
def test_inner_blocks_give_the_one_blocks_bits(m, k, n, parts, relu, monkeypatch, cpu_options):
    # the sums kept in C between blocks of the inner dimension are the float32 values the
    # registers held: the same bits as one block, whatever the block (one longer than k, a
    # last block of one, blocks of 16), with the epilogue (NaN, infinities) after the last
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    rng = np.random.default_rng(m + k + n)
    a = rng.normal(size=(m, k)).astype(np.float32)
    b = rng.normal(size=(k, n)).astype(np.float32)
    bias = rng.normal(size=n).astype(np.float32)
    bias[:3] = np.nan, np.inf, -np.inf
    outs = {}
    for block in (0, k - 1, 16, 7):
        if block < 1 and outs:
            continue
        cpu_options(matmul_serial_work=0, matmul_inner_block=block)
        out = np.full((m, n), np.nan, np.float32)
        _run(a, b, out, epilogue=(bias, relu))
        outs[block] = out
        assert (native_matmul._inner(k, False, False, False) > 0) == (0 < block < k)
    want = _reference(a, b, bias, relu)
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-4 * np.sqrt(k))
    for block, out in outs.items():
        np.testing.assert_array_equal(out, outs[0], err_msg=f"inner blocks of {block}")


def test_inner_blocks_are_not_used_where_an_epilogue_reads_c(cpu_options):
    cpu_options(matmul_inner_block=16)
    assert native_matmul._inner(100, False, False, False) == 16
    assert native_matmul._inner(16, False, False, False) == 0  # one block: none
    for flags in ((True, False, False), (True, True, False), (False, False, True)):
        assert native_matmul._inner(100, *flags) == 0
    from kiln.core.backends.cpu.codegen.spec import CodegenError
    from kiln.core.backends.cpu.gemm import native_gemm
    with pytest.raises(CodegenError, match="inner blocks"):
        native_gemm.matmul_ir("x", "float32", 16, 4, 4, 64, update=True, inner=16)


def test_the_products_it_leaves_to_blas():
    suits = native_matmul.suits
    rng = np.random.default_rng(6)
    a = rng.normal(size=(256, 512)).astype(np.float32)
    w = rng.normal(size=(512, 256)).astype(np.float32)
    out = np.empty((256, 256), np.float32)
    assert suits(a, w, out)
    assert not suits(a.astype(np.float64), w.astype(np.float64), np.empty((256, 256)))
    assert not suits(a[:127], w, out[:127])                # under 128 rows
    assert not suits(a, w[:, :200], np.empty((256, 200), np.float32))  # 16 < N, N % 16
    big = np.zeros((256, 1025), np.float32)
    assert not suits(big, np.zeros((1025, 256), np.float32), out)      # inner over 1024
    assert not suits(a[:, :256], np.ascontiguousarray(w[:256]).T, out)  # B by columns
    assert not suits(a, w, np.empty((256, 512), np.float32)[:, :256])  # out not contiguous
    shared = np.zeros((256, 768), np.float32)
    assert not suits(shared[:, :512], w, shared[:, 512:])  # out overlaps A


# ---- whole models -------------------------------------------------------------------------------
def _mlp(activation="relu", use_bias=True):
    kiln.utils.set_random_seed(0)
    model = kiln.Sequential([kiln.layers.Input((100,)),
                             kiln.layers.Dense(256, activation=activation, use_bias=use_bias),
                             kiln.layers.Dense(10)])
    model.compile("sgd", "mse")
    return model


def _forward(model, x, activation):
    h = x.astype(np.float64)
    for i, layer in enumerate(model.layers):
        ws = [w.numpy().astype(np.float64) for w in layer.weights]
        h = h @ ws[0] + (ws[1] if len(ws) > 1 else 0.0)
        if i == 0 and activation == "relu":
            h = np.maximum(h, 0.0)
    return h


def _labels(fn, feeds):
    return [s.label for s in fn.program.plan(feeds).steps]


@pytest.mark.parametrize("activation, use_bias, first", [
    ("relu", True, "matmul:dense_bias_relu"),
    (None, True, "matmul:dense_bias"),
    ("relu", False, "matmul:dense"),  # no bias add to fuse: the ReLU stays a pass
])
def test_a_dense_stacks_predict_runs_on_the_kernel(activation, use_bias, first):
    model = _mlp(activation, use_bias)
    x = np.random.default_rng(7).normal(size=(300, 100)).astype(np.float32)
    got = model.predict(x, batch_size=150, verbose=0)
    np.testing.assert_allclose(got, _forward(model, x, activation), rtol=1e-4, atol=1e-4)
    labels = _labels(model.predict_function, [x[:150]])
    products = [s for s in labels if s.startswith("matmul")]
    assert products[0] == first and products[1] == "matmul:dense_bias", labels
    # new inputs in the same (bound) feed: the kernel reads them
    got = model.predict(x[::-1].copy(), batch_size=150, verbose=0)
    np.testing.assert_allclose(got[::-1], _forward(model, x, activation), rtol=1e-4, atol=1e-4)


def test_a_batch_under_128_rows_and_a_training_step_with_a_small_product_stay_on_blas():
    model = _mlp()
    x = np.random.default_rng(8).normal(size=(256, 100)).astype(np.float32)
    y = np.zeros((256, 10), np.float32)
    got = model.predict(x, batch_size=100, verbose=0)  # batches of 100 and 56 rows
    np.testing.assert_allclose(got, _forward(model, x, "relu"), rtol=1e-4, atol=1e-4)
    assert not any("dense" in s for s in _labels(model.predict_function, [x[:100]]))
    model.fit(x, y, batch_size=128, epochs=1, verbose=0)
    # the kernel gradient x.T @ d has 100 rows (the kernel takes 128 or more): the plan
    # calls BLAS for it, so its products all do
    labels = _labels(model.train_function, [x[:128], y[:128]])
    assert any(s == "matmul" for s in labels) and not any("dense" in s for s in labels)


def test_threads_predicting_at_once_get_the_serial_results():
    # each call takes a plan of its own (spares: docs/architecture.md "Threads"), its kernel
    # parts on the shared pool

    model = _mlp()
    rng = np.random.default_rng(9)
    xs = [rng.normal(size=(256, 100)).astype(np.float32) for _ in range(4)]
    wants = [model.predict_on_batch(x) for x in xs]
    assert any("dense" in s for s in _labels(model.predict_function, [xs[0]]))
    bad = []

    def work(k):
        for j in range(15):
            v = (j + k) % 4
            if not np.array_equal(model.predict_on_batch(xs[v]), wants[v]):
                bad.append((k, j))

    run_in_threads(work)
    assert not bad


# ---- training steps: d @ W.T, the gemm update, the weights' update -----------------------------
@pytest.mark.parametrize("r, c", [(512, 256), (37, 53), (16, 16), (1, 300), (300, 1), (130, 10)])
@pytest.mark.parametrize("parts", [1, 2])
def test_the_transpose_kernel(r, c, parts, monkeypatch, cpu_options):
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(transpose_split=0)
    src = np.random.default_rng(r * c).normal(size=(r, c)).astype(np.float32)
    dst = np.full((c, r), np.nan, np.float32)
    bld = StepRecorder()
    assert native_matmul.add_transpose(bld, src, dst)
    bld.run()
    assert np.array_equal(dst, src.T)


@pytest.mark.parametrize("m, k, n", [(128, 256, 512), (131, 37, 272), (256, 100, 5),
                                     (128, 1, 256)])
def test_a_transposed_b_is_laid_out_first(m, k, n, monkeypatch, cpu_options):
    # d @ W.T (an input gradient): W.T is copied into the kernel's layout by a step before
    cpu_options(matmul_serial_work=0)
    rng = np.random.default_rng(m + k + n)
    w = rng.normal(size=(n, k)).astype(np.float32)
    d = rng.normal(size=(m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    assert not native_matmul.suits(d, w.T, out) and native_matmul.suits(d, w.T, out, True)
    bld = StepRecorder()
    assert native_matmul.add(bld, d, w.T, out)
    assert [s[2] for s in bld.steps] == ["test:transpose", "test:dense"]
    bld.run()
    np.testing.assert_allclose(out, _reference(d, w.T), rtol=1e-5, atol=1e-4 * np.sqrt(k))
    w[:] = rng.normal(size=w.shape)  # a new W (the next step's weights): copied again
    bld.run()
    np.testing.assert_allclose(out, _reference(d, w.T), rtol=1e-5, atol=1e-4 * np.sqrt(k))


def _gemm_reference(a, b, c, alpha, beta):
    return float(alpha) * (a.astype(np.float64) @ b.astype(np.float64)) + float(beta) * c


@pytest.mark.parametrize("m, k, n, parts", [(784, 128, 512, 2), (256, 128, 10, 2),
                                            (131, 7, 272, 2), (131, 7, 272, 3)])
@pytest.mark.parametrize("apply", [False, True])
def test_the_gemm_update_epilogue(m, k, n, parts, apply, monkeypatch, cpu_options):
    # v = alpha * (h.T @ d) + beta * v in place, alpha and beta read at each call; with
    # ``apply`` then w += v (SGD momentum's weights), one rounded add: the same bits as the
    # add kernel it replaces; split over the threads by the columns (by the rows under 16)
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(matmul_serial_work=0)
    rng = np.random.default_rng(m * k + n)
    h = rng.normal(size=(k, m)).astype(np.float32)
    d = rng.normal(size=(k, n)).astype(np.float32)
    v = rng.normal(size=(m, n)).astype(np.float32)
    w = rng.normal(size=(m, n)).astype(np.float32)
    alpha, beta = np.array(-0.01, np.float32), np.array(0.9, np.float32)
    bld = StepRecorder()
    update = (alpha, beta, w) if apply else (alpha, beta)
    assert native_matmul.add(bld, h.T, d, v, update=update)
    assert bld.steps[-1][2] == ("test:dense_update_apply" if apply else "test:dense_update")
    for a_, b_ in ((-0.01, 0.9), (0.5, 1.0), (-1.0, 0.0)):
        alpha[...], beta[...] = a_, b_
        want = _gemm_reference(h.T, d, v.astype(np.float64), a_, b_)
        w0 = w.copy()
        bld.run()
        np.testing.assert_allclose(v, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
        if apply:
            assert np.array_equal(w, w0 + v)
        else:
            assert np.array_equal(w, w0)


def test_the_gemm_update_keeps_nan_and_infinities():
    # beta * NaN is NaN, 0 * inf is NaN: the reference's order (no term is skipped)
    rng = np.random.default_rng(12)
    h = rng.normal(size=(64, 256)).astype(np.float32)
    d = rng.normal(size=(64, 256)).astype(np.float32)
    v = np.zeros((256, 256), np.float32)
    v[0, 0], v[1, 1], v[2, 2] = np.nan, np.inf, -np.inf
    alpha, beta = np.array(1.0, np.float32), np.array(0.0, np.float32)
    bld = StepRecorder()
    assert native_matmul.add(bld, h.T, d, v, update=(alpha, beta))
    bld.run()
    assert np.isnan(v[0, 0]) and np.isnan(v[1, 1]) and np.isnan(v[2, 2])
    assert np.isfinite(v[3:]).all()


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("m, k, n, parts", [(128, 256, 512, 2), (131, 10, 272, 2),
                                            (131, 10, 272, 3), (257, 64, 10, 2)])
def test_the_relu_gradient_epilogue(m, k, n, parts, in_place, monkeypatch, cpu_options):
    # out = (d @ W.T) * float(g > t): the ReLU's output g may be out's own storage (the
    # gradient written over it); x * 0 keeps NaN and infinities NaN, as the separate kernel
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(matmul_serial_work=0)
    rng = np.random.default_rng(m + n)
    d = rng.normal(size=(m, k)).astype(np.float32)
    w = rng.normal(size=(n, k)).astype(np.float32)
    g = np.maximum(rng.normal(size=(m, n)), 0).astype(np.float32)
    d[0, :] = np.inf  # row 0 of the product: +-inf or NaN
    t = np.array(0.0, np.float32)
    with np.errstate(invalid="ignore"):
        want = (d.astype(np.float64) @ w.T.astype(np.float64)) * (g > 0)
    out = g if in_place else np.full((m, n), np.nan, np.float32)
    bld = StepRecorder()
    assert native_matmul.add(bld, d, w.T, out, gate=(g, t))
    assert bld.steps[-1][2] == "test:dense_gate"
    with np.errstate(invalid="ignore"):
        bld.run()
    np.testing.assert_array_equal(np.isnan(out[0]), np.isnan(want[0]))
    np.testing.assert_allclose(out[1:], want[1:], rtol=1e-5, atol=1e-4 * np.sqrt(k))


def test_the_relu_gradient_epilogue_refuses_partial_overlaps():
    rng = np.random.default_rng(14)
    d = rng.normal(size=(128, 64)).astype(np.float32)
    w = rng.normal(size=(64, 256)).astype(np.float32)
    big = np.zeros((129, 256), np.float32)
    out, g = big[1:], big[:-1]  # g overlaps out one row off: not the same storage
    assert not native_matmul.add(StepRecorder(), d, w, out, gate=(g, np.array(0, np.float32)))


def _train_mlp(optimizer, native_on, cpu_options, steps=2):
    # two steps: the second updates with a velocity (a third may already flip a ReLU whose
    # input is within rounding of 0, after which any two correct implementations differ)
    cpu_options(native_matmul=native_on)
    kiln.utils.set_random_seed(1)
    model = kiln.Sequential([kiln.layers.Input((160,)),
                             kiln.layers.Dense(512, activation="relu"),
                             kiln.layers.Dense(256, activation="relu"),
                             kiln.layers.Dense(10)])
    model.compile(optimizer(), "sparse_categorical_crossentropy")
    rng = np.random.default_rng(13)
    x = (0.3 * rng.normal(size=(128 * steps, 160))).astype(np.float32)
    y = rng.integers(0, 10, size=128 * steps).astype(np.int32)
    model.fit(x, y, batch_size=128, epochs=1, verbose=0, shuffle=False)
    labels = _labels(model.train_function, [x[:128], y[:128]])
    return [w.numpy().copy() for w in model.weights], labels


@pytest.mark.parametrize("optimizer, fused", [
    (lambda: kiln.optimizers.SGD(0.001, momentum=0.9), True),
    (lambda: kiln.optimizers.SGD(0.001), False),
])
def test_a_dense_stacks_training_step_runs_on_the_kernel(optimizer, fused, cpu_options):
    got, labels = _train_mlp(optimizer, True, cpu_options)
    want, blas_labels = _train_mlp(optimizer, False, cpu_options)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert not any("dense" in s for s in blas_labels)
    # every product on the kernel: forward with its epilogues, d @ W.T after a transpose,
    # the kernel gradients as gemm updates; no BLAS call (no axpy) in the plan
    assert "matmul:dense_bias_relu" in labels and "matmul:transpose" in labels, labels
    assert not any(s in ("matmul", "gemm", "add(axpy)") for s in labels), labels
    updates = [s for s in labels if s.startswith("gemm:dense")]
    # with momentum each w += v is the epilogue of its velocity's gemm: nothing reads W1
    # after it; d2 @ W2.T after W2's gemm reads the copy of W2.T laid out before that gemm
    # (right after the forward product read W2)
    assert updates.count("gemm:dense_update_apply") == (2 if fused else 0), labels
    assert ("gemm:transpose" in labels) == fused, labels
    assert len(updates) == 2, labels  # the 256 x 10 kernel's is too small for a gemm
    # the ReLU gradients are the input gradients' epilogues (with momentum W2's w += v sits
    # between d2 @ W2.T and its ReLU gradient: it touches neither); plain SGD's W2 gemm
    # reads h1 there, which that gradient overwrites: it stays a kernel of its own
    gates = labels.count("matmul:dense_gate")
    relus = sum(s.startswith("fused[greater") for s in labels)
    assert (gates, relus) == ((2, 0) if fused else (1, 1)), labels
