"""kiln's GEMMs (kiln/core/backends/cpu/gemm/blas.py): the choice of a private OpenBLAS instance,
the instance itself (loaded here with the kernels NumPy's already runs, so on any host with
NumPy's OpenBLAS), and its GEMMs against the float64 product, with every operand layout
the backend passes and every case that must fall back to ``np.matmul``."""

from __future__ import annotations

import os

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from kiln.core.backends.cpu.gemm import blas, products

AVX2 = {"avx": True, "avx2": True, "fma": True}
AVX512 = {**AVX2, **{f: True for f in blas.CORES["Cooperlake"]}}


@pytest.mark.parametrize("numpy_core, features, setting, want", [
    ("Haswell", AVX512, "auto", "SkylakeX"),   # NumPy's AVX2 kernels on an AVX-512 CPU
    ("Zen", AVX512, "auto", "SkylakeX"),
    ("Haswell", AVX2, "auto", "Haswell"),      # the right kernels already: the same ones
    ("SkylakeX", AVX512, "auto", "SkylakeX"),
    ("Cooperlake", AVX512, "auto", "Cooperlake"),
    ("Haswell", AVX512, "numpy", None),        # KILN_BLAS=numpy: no copy
    (None, AVX512, "auto", None),              # NumPy's BLAS is not OpenBLAS
    ("SkylakeX", AVX512, "Haswell", "Haswell"),  # asked for
    ("Haswell", {**AVX512, "avx512dq": False}, "auto", "Haswell"),  # one subset missing
])
def test_the_copys_kernels_are_numpys_unless_numpys_are_slower(numpy_core, features, setting,
                                                               want):
    assert blas.wanted_core(numpy_core, features, setting) == want


def test_a_users_own_coretype_is_kept():
    """OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU (the test machine's environment): the copy
    runs Haswell's kernels too, unless KILN_BLAS names others."""
    assert blas.wanted_core("Haswell", AVX512, "auto", user_core="Haswell") == "Haswell"
    assert blas.wanted_core("Haswell", AVX512, "SkylakeX", user_core="Haswell") == "SkylakeX"


def test_a_core_the_cpu_cannot_run_is_refused():
    with pytest.raises(ValueError, match="KILN_BLAS=SkylakeX: this CPU lacks avx512f"):
        blas.wanted_core("Haswell", AVX2, "SkylakeX")


@pytest.mark.parametrize("env, want", [("", "auto"), ("auto", "auto"), ("numpy", "numpy"),
                                       ("NumPy", "numpy"), ("skylakex", "SkylakeX")])
def test_the_setting(env, want, monkeypatch):
    monkeypatch.setenv("KILN_BLAS", env)
    assert blas.mode() == want


def test_a_bad_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("KILN_BLAS", "fastest")
    with pytest.raises(ValueError, match="KILN_BLAS must be 'auto', 'numpy' or an OpenBLAS "
                                         "core name .*got 'fastest'"):
        blas.mode()


def test_numpy_setting_keeps_numpys_blas(monkeypatch):
    monkeypatch.setenv("KILN_BLAS", "numpy")
    monkeypatch.setattr(blas, "_state", {})
    assert blas.library() is None
    assert blas.matmul(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32),
                       np.empty((64, 64), np.float32)) is False


@pytest.fixture(scope="module")
def copy(numpy_core):
    """A private instance with NumPy's own kernels (every host can run them)."""
    lib = blas.load_copy(numpy_core)
    assert lib is not None and lib.core.lower() == numpy_core.lower()
    found = blas._numpy_openblas()
    assert blas._corename(found[1], found[2]) == numpy_core  # NumPy's instance is untouched
    return lib


def test_copies_loaded_one_after_another_are_distinct_instances(copy):
    again = blas.load_copy(copy.core)
    assert again is not None and again.core == copy.core
    assert again.handle._handle != copy.handle._handle


@pytest.mark.parametrize("sendfile", [True, False])
def test_the_library_file_is_copied_byte_for_byte(tmp_path, sendfile, monkeypatch):
    """The copy's bytes (blas._copy_file): by sendfile, or through Python where it fails."""
    if not sendfile:
        def refuse(*args):
            raise OSError("no sendfile here")
        monkeypatch.setattr(os, "sendfile", refuse)
    src = tmp_path / "lib.so"
    data = np.random.default_rng(0).integers(0, 256, 3 * 2 ** 20 + 17, np.uint8).tobytes()
    src.write_bytes(data)
    target = tmp_path / "copy"
    fd = os.open(target, os.O_RDWR | os.O_CREAT)
    try:
        blas._copy_file(str(src), fd)
    finally:
        os.close(fd)
    assert target.read_bytes() == data


@pytest.fixture
def using(copy, monkeypatch, cpu_options):
    """The copy in use, for GEMMs of any size (the layouts are what is tested)."""
    monkeypatch.setattr(blas, "_state", {"lib": copy})
    cpu_options(blas_min_work=0)
    cpu_options(blas_placed_min_work=0)
    return copy


def _rand(rng, shape, dtype):
    return rng.normal(size=shape).astype(dtype)


def _blocks(flat_len, shape, block_stride):
    """A (blocks, rows, cols) view with blocks ``block_stride`` floats apart (the Winograd
    tile buffers' layout)."""
    flat = np.zeros(flat_len, np.float32)
    return as_strided(flat, shape, (block_stride * 4, shape[2] * 4, 4), writeable=True)


@pytest.mark.parametrize("case, dtype", [
    (c, d) for c in ("nn", "tn", "nt", "tt", "ld", "batched", "batched_tn", "blocks", "blocks_tn")
    for d in (np.float32, np.float64) if d == np.float32 or not c.startswith("blocks")])
def test_the_copys_gemms_match_the_float64_product(using, case, dtype):
    rng = np.random.default_rng(len(case))
    m, k, n = 67, 45, 33  # odd sizes: no kernel's tile divides them
    if case == "nn":
        a, b = _rand(rng, (m, k), dtype), _rand(rng, (k, n), dtype)
    elif case == "tn":
        a, b = _rand(rng, (k, m), dtype).T, _rand(rng, (k, n), dtype)
    elif case == "nt":
        a, b = _rand(rng, (m, k), dtype), _rand(rng, (n, k), dtype).T
    elif case == "tt":
        a, b = _rand(rng, (k, m), dtype).T, _rand(rng, (n, k), dtype).T
    elif case == "ld":  # row slices of wider arrays: leading dimensions past the width
        a, b = _rand(rng, (m, k + 7), dtype)[:, 3:3 + k], _rand(rng, (k, n + 5), dtype)[:, :n]
    elif case == "batched":
        a, b = _rand(rng, (5, m, k), dtype), _rand(rng, (5, k, n), dtype)
    elif case == "batched_tn":
        a, b = _rand(rng, (5, k, m), dtype).transpose(0, 2, 1), _rand(rng, (5, k, n), dtype)
    else:  # the tile buffers (float32)
        stride = m * k + 80
        a = _blocks(5 * stride, (5, m, k), stride)
        a[...] = _rand(rng, (5, m, k), dtype)
        if case == "blocks_tn":
            a = _blocks(5 * (k * m + 80), (5, k, m), k * m + 80)
            a[...] = _rand(rng, (5, k, m), dtype)
            a = a.transpose(0, 2, 1)
        b = _rand(rng, (5, k, n), dtype)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if case in ("blocks", "blocks_tn"):
        ostride = m * n + 80
        out = _blocks(5 * ostride, (5, m, n), ostride)
    elif case == "ld":
        out = np.zeros((m, n + 9), dtype)[:, 2:2 + n]
    else:
        out = np.zeros(want.shape, dtype)
    assert blas.matmul(a, b, out) is True
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.sqrt(k))


def test_with_numpys_own_kernels_single_products_need_placeable_threads(using, monkeypatch):
    """Where the copy runs NumPy's own kernels, a single product goes through it only where
    kiln knows its worker threads (to place them: blas.place); batches always do."""
    monkeypatch.setattr(using, "better", False)
    monkeypatch.setattr(using, "placeable", False)
    rng = np.random.default_rng(2)
    a, b = _rand(rng, (70, 40), np.float32), _rand(rng, (40, 30), np.float32)
    assert blas.matmul(a, b, np.empty((70, 30), np.float32)) is False
    monkeypatch.setattr(using, "placeable", True)
    out2 = np.empty((70, 30), np.float32)
    assert blas.matmul(a, b, out2) is True
    np.testing.assert_allclose(out2, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    a3, b3 = _rand(rng, (3, 70, 40), np.float32), _rand(rng, (3, 40, 30), np.float32)
    out = np.empty((3, 70, 30), np.float32)
    assert blas.matmul(a3, b3, out) is True
    np.testing.assert_allclose(out, np.matmul(a3, b3), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_batch_split_over_threads_computes_every_product(using, threads, monkeypatch):
    """Parts of 5 products on 1, 2 or 3 threads (one BLAS thread each), with a batch stride
    that is not the matrices' size."""
    own = using.threads
    monkeypatch.setattr(using, "threads", threads)
    rng = np.random.default_rng(threads)
    a = _rand(rng, (5, 2, 70, 40), np.float32)[:, 1]
    b = _rand(rng, (5, 40, 30), np.float32)
    out = np.full((5, 70, 30), np.nan, np.float32)
    assert blas.matmul(a, b, out) is True
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(40))
    using.set_threads(own)


def test_outputs_that_overlap_each_other_are_left_to_numpy(using):
    """A batch written into one matrix (batch stride 0): threads would race on it."""
    rng = np.random.default_rng(4)
    a, b = _rand(rng, (3, 64, 48), np.float32), _rand(rng, (3, 48, 40), np.float32)
    out = as_strided(np.zeros((64, 40), np.float32), (3, 64, 40), (0, 160, 4),
                     writeable=True)
    assert blas.matmul(a, b, out) is False


@pytest.mark.parametrize("case", ["small", "edge", "alias", "broadcast", "strided", "int",
                                  "mixed", "out_t", "shapes"])
def test_what_the_copy_does_not_take_falls_back_to_numpy(using, case, monkeypatch, cpu_options):
    rng = np.random.default_rng(1)
    f32 = np.float32
    a, b = _rand(rng, (64, 48), f32), _rand(rng, (48, 40), f32)
    out = np.zeros((64, 40), f32)
    if case == "small":  # 64 x 48 x 40 products: NumPy's is faster, and one-threaded
        cpu_options(blas_min_work=1 << 21)
        cpu_options(blas_placed_min_work=4 * 65536 + 1)
    elif case == "edge":  # one output column: NumPy's gemv
        b, out = b[:, :1], np.zeros((64, 1), f32)
    elif case == "alias":  # the output is the input: BLAS would read what it writes
        a = np.ascontiguousarray(a[:, :40])
        b, out = _rand(rng, (40, 40), f32), a
    elif case == "broadcast":
        a, out = _rand(rng, (3, 64, 48), f32), np.zeros((3, 64, 40), f32)
    elif case == "strided":  # no unit-stride axis
        a = _rand(rng, (128, 96), f32)[::2, ::2]
    elif case == "int":
        a, b, out = (v.astype(np.int64) for v in (a, b, out))
    elif case == "mixed":
        b = b.astype(np.float64)
    elif case == "out_t":  # a transposed output
        out = np.zeros((40, 64), f32).T
    elif case == "shapes":
        b = b[:40]
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)) if case != "shapes" else None
    assert blas.matmul(a, b, out) is False
    if case == "shapes":
        with pytest.raises(ValueError):
            products.matmul(a, b, out)
        return
    products.matmul(a, b, out)  # np.matmul, the right answer
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_a_training_step_is_the_same_through_either_blas(using, monkeypatch):
    import kiln
    import kiln.ops as K

    rng = np.random.default_rng(5)
    xv = rng.normal(size=(96, 80)).astype(np.float32)
    wv = (rng.normal(size=(80, 64)) / 9).astype(np.float32)
    results = []
    for state in ({"lib": using}, {"lib": None}):
        monkeypatch.setattr(blas, "_state", state)
        x, w = kiln.placeholder((None, 80)), kiln.Variable(wv)
        loss = K.sum(K.square(K.relu(x @ w)))
        results.append(kiln.function([x], [loss, *kiln.grad(loss, [w])], backend="cpu")(xv))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=2e-5)


# ---- gemm with alpha and beta, axpy (the gemm pass's kernels: kiln/core/passes/gemm.py) ---------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "edges"])
def test_gemm_with_alpha_and_beta_matches_the_float64_sum(layout, dtype):
    if blas.numpy_library() is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    rng = np.random.default_rng(11)
    m, n, k = (1, 3, 2) if layout == "edges" else (37, 29, 41)  # edges far under MIN_EDGE
    a = _rand(rng, (k, m), dtype).T if layout == "tn" else _rand(rng, (m, k), dtype)
    b = _rand(rng, (n, k), dtype).T if layout == "nt" else _rand(rng, (k, n), dtype)
    c = _rand(rng, (m, n), dtype)
    out = c.copy()
    assert blas.gemm(a, b, out, -0.3, 0.9)
    want = -0.3 * (a.astype(np.float64) @ b) + 0.9 * c
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


def test_gemm_refuses_what_blas_cannot_take():
    x = np.ones((8, 8), np.float32)
    assert not blas.gemm(x, x, x, 1.0, 1.0)  # the result overlaps an operand
    assert not blas.gemm(x, x, np.ones((8, 8), np.float64), 1.0, 1.0)  # dtypes differ
    assert not blas.gemm(np.ones((2, 8, 8), np.float32), np.ones((2, 8, 8), np.float32),
                         np.ones((2, 8, 8), np.float32), 1.0, 1.0)  # a batch
    assert not blas.gemm(x, x, np.ones((16, 16), np.float32)[::2, ::2], 1.0, 1.0)  # strided C


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_adds_with_numpys_bits(dtype):
    if blas.numpy_library() is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    rng = np.random.default_rng(12)
    x = _rand(rng, (300, 257), dtype)
    y = _rand(rng, (300, 257), dtype)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, np.finfo(dtype).tiny / 4,
                         np.finfo(dtype).max], dtype)
    x.ravel()[:6] = specials
    y.ravel()[:6] = specials[::-1]
    want = np.add(y, x)
    out = y.copy()
    with np.errstate(all="ignore"):
        assert blas.axpy(x, out)
    np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))
    assert not blas.axpy(x[:, :-1], out[:, :-1])  # not contiguous
    assert not blas.axpy(np.ones(out.shape, np.float16), out)  # another dtype


def test_axpy_without_blas_is_numpys_add(monkeypatch):
    monkeypatch.setattr(blas, "axpy", lambda x, out: False)
    x, out = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    products.axpy(x, out)
    np.testing.assert_array_equal(out, np.arange(6.0).reshape(2, 3) + 1)
