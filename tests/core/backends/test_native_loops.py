"""Native loops (kiln/core/backends/cpu/codegen/native.py, llvm_loop.py, llvm_expr.py): the
generated loops compiled from LLVM IR give what numba's kernel of the same program gives (bit
for bit where no reassociation is allowed), every elementwise op is generated natively, a body
the generator does not handle falls back to numba's kernel, bad arguments are a clear error, and
a damaged object file in the cache is compiled again. The hand-written kernels have one
implementation, their native one: they are checked against the ops' NumPy references (bit for
bit where the op selects or copies: pooling, one_hot, random numbers; within float rounding
where the reference sums in another order), and with the native path off those ops run the
references. The registry's forward and gradient tests and tests/core/test_backend_parity.py run
every op through this path too."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from cpu_targets import set_cpu

import kiln
import kiln.ops as K
from kiln.core.backends import jit as jit_loader
from kiln.core.backends import numba_cache
from kiln.core.backends.cpu.codegen import jit, llvm_loop, native
from kiln.core.backends.cpu.codegen.spec import CodegenError, LoopSpec, program_dtypes
from kiln.core.backends.cpu.kernels import elementwise
from kiln.core.ops import all_ops
from kiln.core.ops.registry import ELEMENTWISE

pytestmark = pytest.mark.skipif(not native.available(), reason="llvmlite unusable here")

OPS = all_ops()
ELEMENTWISE_OPS = sorted(n for n, op in OPS.items() if op.kind == ELEMENTWISE and op.scalar)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _spec(op: str, dtypes: tuple[str, ...], attrs: tuple = (), classes=None) -> LoopSpec:
    program = ((op, tuple(-k - 1 for k in range(len(dtypes))), attrs),)
    out = program_dtypes(program, dtypes)[-1]
    return LoopSpec(program, None, dtypes, out, 1, classes or ("N",) * len(dtypes), "N")


def _examples(op: str):
    rng = np.random.default_rng(sum(map(ord, op)))
    for dtype in ("float32", "float64"):
        yield from OPS[op].examples(rng, dtype)


@pytest.mark.parametrize("op", ELEMENTWISE_OPS)
def test_every_elementwise_op_is_generated_natively(op):
    for ex in _examples(op):
        dtypes = tuple(np.asarray(a).dtype.name for a in ex.inputs)
        spec = _spec(op, dtypes, tuple(sorted(ex.attrs.items())))
        text = llvm_loop.generate_ir(spec, "probe")  # raises CodegenError when not
        assert "define void @probe(" in text and "define ptr @probe_py(" in text


def _both(build, feeds):
    """The outputs of ``build()``'s function, native and with the native path off
    (KILN_NATIVE=0: numba's generated loops; the hand-written ops' NumPy references)."""
    out = []
    for flag in ("1", "0"):
        os.environ["KILN_NATIVE"] = flag
        try:
            out.append(build()(*feeds))
        finally:
            del os.environ["KILN_NATIVE"]
    return out


def _entry_name(step) -> str:
    """The name of a plan step's callable (a SplitCall's entry point): a native kernel's is its
    symbol, ``kiln_<hash>``."""
    return getattr(getattr(step.fn, "entry", step.fn), "__name__", "")


def _kernel_names(fn) -> dict[str, str]:
    """``{kernel: entry point name}`` for the plan steps labelled ``op:kernel``."""
    return {s.label.split(":")[-1]: _entry_name(s) for p in fn.program._plans.values()
            for s in p.steps if ":" in s.label}


def _close(got, want, err_msg: str = "") -> None:
    """``got`` equals ``want`` within float rounding of its dtype, relative to each element
    and to the largest finite one (sums reassociated: a small sum of large terms), the same
    NaN and infinities (bit for bit where neither is a float array)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype, err_msg)
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=err_msg)
        return
    tol = 2e-5 if got.dtype == np.float32 else 1e-12
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=err_msg)


def _against_reference(build, feeds, exact: bool = False) -> tuple[list, dict[str, str]]:
    """Asserts that ``build()``'s function gives natively what it gives with the native path
    off, where the hand-written ops run their NumPy references (``registry.build_reference``;
    the generated loops then run numba's kernels, the same bits): equal bits where ``exact``
    (the ops select or copy), else within float rounding. Returns the native outputs and the
    kernel names of one more run (:func:`_kernel_names`)."""
    got, want = _both(build, feeds)
    for g, w in zip(got, want):
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            _close(g, w)
    fn = build()
    fn(*feeds)
    return got, _kernel_names(fn)


def _special(rng, shape, dtype):
    a = rng.normal(size=shape).astype(dtype) * 4
    flat = a.reshape(-1)
    flat[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -90.0, 90.0]
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_native_loops_match_numbas_bitwise_on_special_values(dtype, cache):
    rng = np.random.default_rng(3)
    a, b = _special(rng, (7, 19), dtype), _special(rng, (7, 19), dtype)[::-1].copy()

    def build():
        x, y = kiln.placeholder((None, 19), dtype), kiln.placeholder((None, 19), dtype)
        outs = [K.relu(x), K.sigmoid(x), K.tanh(y), K.maximum(x, y), K.minimum(x, y),
                K.abs(x) + K.square(y), K.sign(x), K.where(x > y, x, -y), K.exp(x - y),
                K.log1p(K.abs(x)), K.softplus(x), K.cast(x, "int32"), K.cast(y, "bool"),
                K.clip(x, -1.0, 2.0), K.sqrt(K.abs(y)) / (1 + x * x), K.erf(x),
                K.floor(x) + K.round(y), x ** 2.0]
        return kiln.function([x, y], outs, backend="cpu", optimize=False)

    got, want = _both(build, (a, b))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def test_fused_reductions_match_numbas_within_reassociation(cache):
    rng = np.random.default_rng(4)
    a = rng.normal(size=(33, 65)).astype(np.float32)

    def build():
        x = kiln.placeholder((None, 65))
        outs = [K.sum(K.exp(x), axis=1), K.mean(x * x, axis=0), K.max(x, axis=1),
                K.min(K.abs(x), axis=0), K.sum(x)]
        return kiln.function([x], outs, backend="cpu")

    got, want = _both(build, (a,))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got[0], np.exp(a.astype(np.float64)).sum(1), rtol=1e-5)
    np.testing.assert_array_equal(got[2], a.max(1))


def test_integer_and_boolean_loops(cache):
    rng = np.random.default_rng(5)
    i = rng.integers(-50, 50, size=(4, 9)).astype(np.int32)
    j = rng.integers(-50, 50, size=(4, 9)).astype(np.int64)
    x, y = kiln.placeholder((None, 9), "int32"), kiln.placeholder((None, 9), "int64")
    outs = [x * 3 - x, K.abs(x), K.maximum(y, K.cast(x, "int64")), K.logical_and(x > 0, y < 0),
            K.sum(y, axis=1), K.where(x > 0, x, x * x)]
    got = kiln.function([x, y], outs, backend="cpu")(i, j)
    want = [i * 3 - i, np.abs(i), np.maximum(j, i), (i > 0) & (j < 0), j.sum(1),
            np.where(i > 0, i, i * i)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_a_body_the_generator_does_not_handle_falls_back_to_numba(cache, monkeypatch):
    spec = _spec("add", ("float32", "float32"))
    assert isinstance(elementwise.loop_kernel(spec), native.NativeKernel)

    def refuse(*args):
        raise CodegenError("not generated here")

    monkeypatch.setattr(native, "_kernels", {})
    monkeypatch.setattr(native, "_unsupported", set())
    monkeypatch.setattr(native, "generate_ir", refuse)
    k = elementwise.loop_kernel(spec)
    assert isinstance(k, jit.Kernel)
    a, b = np.arange(5, dtype=np.float32), np.full(5, 2, np.float32)
    out = np.empty(5, np.float32)
    p = np.array([5, 0, 1, 0, 1, 0, 1, 5, 1], np.int64)
    k.specialize((out, a, b, p))(out, a, b, p)
    np.testing.assert_array_equal(out, a + b)


def test_wrong_arguments_are_a_clear_error_before_the_kernel_runs(cache):
    k = native.loop_kernel(_spec("add", ("float32", "float32")))
    a = np.zeros(4, np.float32)
    p = np.zeros(9, np.int64)
    with pytest.raises(TypeError, match="argument 2 must be a flat C-contiguous float32"):
        k.specialize((a, a, np.zeros(4), p))
    with pytest.raises(TypeError, match="4 arrays expected, got 3"):
        k.specialize((a, a, p))
    with pytest.raises(TypeError, match="argument 0 .*c_contiguous=False"):
        k.specialize((np.zeros(8, np.float32)[::2], a, a, p))
    entry = k.specialize((a, a, a, p))
    with pytest.raises(TypeError, match="expected 4 arrays"):
        entry(a, a, p)


def test_a_damaged_object_file_is_compiled_again_with_a_warning(cache):
    def run():
        x = kiln.placeholder((None, 5))
        f = kiln.function([x], K.tanh(x) * 3.0 - x, backend="cpu")
        return f(np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5))

    known = set(elementwise._kernels)
    first = run()
    specs = [s for s in elementwise._kernels if s not in known]
    assert specs and all(isinstance(elementwise._kernels[s], native.NativeKernel)
                         for s in specs)
    files = [f for f in os.listdir(cache / "cpu") if f.endswith(".o")]
    assert files
    for name in files:
        path = cache / "cpu" / name
        blob = bytearray(path.read_bytes())
        blob[len(blob) // 2] ^= 0xFF
        path.write_bytes(bytes(blob))
    native._kernels.clear()  # a fresh process's view: read the files again
    jit_loader._warned.discard("damaged")
    before = jit.stats["compiled"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        native.loop_kernel(specs[0]).compile(())
    assert any("damaged kernel cache entry" in str(w.message) for w in caught)
    assert jit.stats["compiled"] == before + 1
    np.testing.assert_array_equal(run(), first)
    for name in files:  # every damaged file was rewritten, sealed
        path = cache / "cpu" / name
        assert numba_cache.unseal(str(path), path.read_bytes())


def _add_ir(calls: list):
    def make(symbol: str) -> str:
        calls.append(symbol)
        return llvm_loop.generate_ir(_spec("add", ("float32", "float32")), symbol)
    return make


def test_a_cached_kernel_loads_without_generating_its_ir(cache):
    a, b = np.arange(7, dtype=np.float32), np.full(7, 0.5, np.float32)
    p = np.array([7, 0, 1, 0, 1, 0, 1, 7, 1], np.int64)

    def run(k):
        out = np.empty(7, np.float32)
        k.compile(())(out, a, b, p)
        return out

    calls: list = []
    k = native.kernel("test_add_lazy", ["float32"] * 3 + ["int64"], _add_ir(calls))
    assert len(calls) == 1 and not k.cached()
    np.testing.assert_array_equal(run(k), a + b)
    assert k.cached()
    native._kernels.clear()  # a fresh process's view: the file is there
    k2 = native.kernel("test_add_lazy", ["float32"] * 3 + ["int64"], _add_ir(calls))
    assert k2.path == k.path and len(calls) == 1  # the IR was not generated again
    np.testing.assert_array_equal(run(k2), a + b)
    assert len(calls) == 1
    # other sources of the generators: another key, so the kernel is generated and compiled
    native._kernels.clear()
    sources = native.generators()
    try:
        native._state["generators"] = "0" * 24
        k3 = native.kernel("test_add_lazy", ["float32"] * 3 + ["int64"], _add_ir(calls))
        assert k3.path != k.path and len(calls) == 2 and not k3.cached()
        # where the sources cannot be read, the key covers the IR text instead
        native._kernels.clear()
        native._state["generators"] = ""
        k4 = native.kernel("test_add_lazy", ["float32"] * 3 + ["int64"], _add_ir(calls))
        assert k4.path not in (k.path, k3.path) and len(calls) == 3
        np.testing.assert_array_equal(run(k4), a + b)
    finally:
        native._state["generators"] = sources
        native._kernels.clear()


def test_kernels_compiled_after_the_sources_changed_stay_out_of_the_cache(cache,
                                                                        monkeypatch):
    """A kiln upgraded or edited under a running process: the kernels it compiles next come from
    the code it imported, but their key would name the new files' digest, where the new
    code's processes would load them. They stay in memory (warned once), the kernel works."""
    a, b = np.arange(7, dtype=np.float32), np.full(7, 0.5, np.float32)
    p = np.array([7, 0, 1, 0, 1, 0, 1, 7, 1], np.int64)
    monkeypatch.setattr(jit_loader, "_warned", set())
    out = np.empty(7, np.float32)
    digest, stamps = native._digest, native._stamps
    try:
        native._digest = lambda: "f" * 24  # the files now
        native._stamps = lambda: ()
        k = native.kernel("test_add_changed", ["float32"] * 3 + ["int64"], _add_ir([]))
        with pytest.warns(jit_loader.KernelCacheWarning, match="changed since this process"):
            k.compile(())(out, a, b, p)
        np.testing.assert_array_equal(out, a + b)
        assert not k.cached()
    finally:
        native._digest, native._stamps = digest, stamps
        native._kernels.clear()
    k2 = native.kernel("test_add_changed", ["float32"] * 3 + ["int64"], _add_ir([]))
    k2.compile(())(out, a, b, p)  # the files as imported: cached
    assert k2.cached()
    native._kernels.clear()
    try:  # files touched, not changed (new times, the same digest): cached
        native._stamps = lambda: ()
        k3 = native.kernel("test_add_touched", ["float32"] * 3 + ["int64"], _add_ir([]))
        k3.compile(())(out, a, b, p)
        assert k3.cached()
    finally:
        native._stamps = stamps
        native._kernels.clear()


def test_the_generators_digest_covers_every_source_of_the_package():
    root = os.path.dirname(os.path.dirname(native.__file__))  # kiln/core/backends/cpu
    names = sorted(os.path.relpath(os.path.join(d, n), root) for d, _, files in os.walk(root)
                   for n in files if n.endswith(".py"))
    assert {"codegen/llvm_loop.py", "kernels/conv/native_tile.py",
            "kernels/conv/native_winograd.py", "kernels/conv/conv.py"} <= set(names)
    import hashlib
    digest = hashlib.sha256()
    for n in sorted(names, key=lambda n: os.path.join(root, n)):
        with open(os.path.join(root, n), "rb") as f:
            digest.update(n.encode() + b"\0" + f.read() + b"\0")
    assert native.generators() == digest.hexdigest()[:24]


def test_a_damaged_file_of_a_kernel_loaded_without_its_ir_is_compiled_from_a_fresh_ir(cache):
    calls: list = []
    dtypes = ["float32"] * 3 + ["int64"]
    k = native.kernel("test_add_damaged", dtypes, _add_ir(calls))
    k.compile(())
    blob = bytearray(open(k.path, "rb").read())
    blob[len(blob) // 2] ^= 0xFF
    open(k.path, "wb").write(bytes(blob))
    native._kernels.clear()
    jit_loader._warned.discard("damaged")
    k2 = native.kernel("test_add_damaged", dtypes, _add_ir(calls))
    assert len(calls) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        native._loaded.pop(k2.name, None)
        entry = k2.compile(())
    assert any("damaged kernel cache entry" in str(w.message) for w in caught)
    assert len(calls) == 2  # generated then, to compile it again
    a = np.arange(5, dtype=np.float32)
    out = np.empty(5, np.float32)
    entry(out, a, a, np.array([5, 0, 1, 0, 1, 0, 1, 5, 1], np.int64))
    np.testing.assert_array_equal(out, a + a)
    native._kernels.clear()


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_gathers_run_natively_and_match_numbas(idx_dtype, cache):
    rng = np.random.default_rng(6)
    table = rng.normal(size=(50, 6)).astype(np.float32)
    ids = rng.integers(-50, 50, size=(7, 9)).astype(idx_dtype)

    def build():
        w = kiln.Variable(table.copy())
        i = kiln.placeholder((None, 9), idx_dtype)
        out = K.take(w, i, axis=0)
        loss = K.sum(out * out)
        return kiln.function([i], [out, kiln.grad(loss, [w])[0]], backend="cpu")

    native_fn = build()
    got = native_fn(ids)
    names = [_entry_name(s) for p in native_fn.program._plans.values() for s in p.steps
             if s.label in ("take", "take_grad")]
    os.environ["KILN_NATIVE"] = "0"
    try:
        want = build()(ids)
    finally:
        del os.environ["KILN_NATIVE"]
    np.testing.assert_array_equal(got[0], table[ids])
    grad = np.zeros_like(table)
    np.add.at(grad, ids, 2 * table[ids])
    np.testing.assert_allclose(got[1], grad, rtol=1e-6)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # both gathers ran as native builtins (named by their symbol)
    assert len(names) == 2 and all(name.startswith("kiln_") for name in names), names


NN_OPS = ["softmax", "log_softmax", "sparse_softmax_cross_entropy", "softmax_cross_entropy",
          "one_hot",
          "random_uniform", "random_normal", "take", "take_grad", "conv2d",
          "conv2d_backprop_filter", "conv2d_backprop_input", "max_pool2d", "max_pool2d_grad",
          "avg_pool2d", "avg_pool2d_grad"]


@pytest.mark.parametrize("op", NN_OPS)
def test_native_hand_written_kernels_match_the_reference(op, cache, monkeypatch):
    # every registry example of the op (float32 and float64), native against the op's NumPy
    # reference: within float rounding (the references sum in other orders), bit for bit where
    # the op selects or copies; the AVX-512 register tiles off (checked against the float64
    # reference in tests/core/backends/test_cpu_ops.py)
    from kiln.core.ops.registry import apply

    set_cpu(monkeypatch, avx512=False)
    # (max_pool2d_grad sums the cotangents of overlapping windows: bit for bit where they
    # tile the input, test_tiled_max_pool_gradient_gives_the_references_bits)
    exact = op in ("one_hot", "random_uniform", "random_normal", "take", "max_pool2d")
    used = []
    for ex in _examples(op):
        phs = [kiln.placeholder(np.shape(a), np.asarray(a).dtype.name) for a in ex.inputs]
        fn = kiln.function(phs, apply(op, *phs, **ex.attrs), backend="cpu", optimize=False)
        got = fn(*ex.inputs)
        want = np.asarray(OPS[op].ref(*ex.inputs, **ex.attrs))
        if exact:
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {ex.attrs}")
            assert got.dtype == want.dtype
        else:
            _close(got, want, err_msg=f"{op} {ex.attrs}")
        used += [_entry_name(s) for p in fn.program._plans.values() for s in p.steps
                 if s.label.startswith(op)]
    # the examples ran the native kernel (softmax over a middle axis is numba's)
    assert any(name.startswith("kiln_") for name in used), used


@pytest.mark.parametrize("switch", ["KILN_NATIVE", "KILN_JIT"])
def test_with_the_native_path_off_the_hand_written_ops_run_their_references(switch, cache,
                                                                             monkeypatch):
    # the one switch: no native kernel, and the ops whose one kernel is native run their
    # NumPy references (the generated loops and softmax_kernel: numba, or Python under
    # KILN_JIT=0); the same values
    rng = np.random.default_rng(21)
    x = rng.normal(size=(4, 10, 10, 3)).astype(np.float32)
    k1 = rng.normal(size=(3, 3, 3, 8)).astype(np.float32)
    k2 = rng.normal(size=(3, 3, 4, 8)).astype(np.float32)
    labels = rng.integers(0, 8, size=4).astype(np.int32)

    def build():
        p, lab = kiln.placeholder((None, 10, 10, 3)), kiln.placeholder((None,), "int32")
        w1, w2 = kiln.Variable(k1), kiln.Variable(k2)
        h = K.max_pool2d(K.relu(K.conv2d(p, w1)), 2, 2)
        h = K.avg_pool2d(K.conv2d(h, w2, padding="same", groups=2), 2, 1, padding="same")
        logits = K.mean(h, axis=(1, 2))
        loss = (K.sum(K.sparse_softmax_cross_entropy(logits, lab))
                + K.sum(K.softmax(logits) * K.one_hot(lab, 8)))
        return kiln.function([p, lab], [loss, *kiln.grad(loss, [w1, w2])], backend="cpu")

    on = build()
    got = on(x, labels)
    monkeypatch.setenv(switch, "0")
    off = build()
    want = off(x, labels)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    steps = [s for p in off.program._plans.values() for s in p.steps]
    assert not any(_entry_name(s).startswith("kiln_") for s in steps)
    referenced = {s.label.split("(")[0] for s in steps if s.label.endswith("(reference)")}
    assert {"conv2d", "conv2d_backprop_filter", "conv2d_backprop_input", "max_pool2d",
            "max_pool2d_grad", "avg_pool2d", "avg_pool2d_grad",
            "sparse_softmax_cross_entropy", "one_hot"} <= referenced, referenced
    native_ops = {s.label.split(":")[0] for p in on.program._plans.values() for s in p.steps
                  if _entry_name(s).startswith("kiln_")}
    assert {"conv2d", "max_pool2d", "avg_pool2d", "sparse_softmax_cross_entropy",
            "one_hot"} <= native_ops, native_ops


def test_a_native_kernel_that_does_not_build_with_the_path_on_is_an_error_naming_it(
        cache, monkeypatch):
    # the builders take the native kernels only where the path is on; a generator that
    # declines there has no numba twin to fall back to: a clear error, not a silent NaN
    from kiln.core.backends.cpu.kernels.conv import conv

    def declines(symbol, dtype):
        raise CodegenError("not generated")

    monkeypatch.setattr(native, "_kernels", {})
    monkeypatch.setattr(native, "_unsupported", set())
    monkeypatch.setitem(conv._KERNELS, "avg_pool_kernel", declines)
    p = kiln.placeholder((2, 6, 6, 3))
    # overlapping windows: the generic kernel (tiling windows take kernels/pool/avg_tiled.py)
    f = kiln.function([p], K.avg_pool2d(p, 2, strides=1), backend="cpu", optimize=False)
    with pytest.raises(RuntimeError, match=r"avg_pool2d: the native kernel avg_pool_kernel "
                                           r"does not run for \['float32', 'float32'\] arrays"):
        f(np.zeros((2, 6, 6, 3), np.float32))


def test_softmax_rows_with_extreme_values_match_the_reference(cache):
    x = np.array([[0.0, -np.inf, 1e30, np.nan], [-1e30, 3.0, 3.0, -90.0],
                  [88.0, -88.0, 0.5, 0.25]], np.float32)

    def build():
        p = kiln.placeholder((None, 4))
        return kiln.function([p], [K.softmax(p), K.log_softmax(p)], backend="cpu",
                             optimize=False)

    got, _ = _against_reference(build, (x,))
    np.testing.assert_array_equal(np.isnan(got[0]), [[True] * 4, [False] * 4, [False] * 4])


def test_float32_softmax_and_cross_entropy_rows_in_lanes_match_the_reference(cache):
    """Rows of every length up to native_nn.SHORT_ROW + 1 (straight-line short rows, then
    eight lanes) and a long one, 37 of them (the short rows' loop runs in vectors with a
    tail), with NaN, infinities, a huge logit, soft and zero labels: native against the
    references (NaN where they give NaN), and against the float64 reference."""
    from kiln.core.backends.cpu.kernels.nn import native_nn

    rng = np.random.default_rng(5)
    for n in [*range(1, native_nn.SHORT_ROW + 2), 4099]:
        x = (rng.normal(size=(37, n)) * 6).astype(np.float32)
        x[1, n // 2] = np.nan
        x[2, :] = -np.inf
        x[3, n - 1] = np.inf
        x[4, 0] = 1e30
        x[5, :] = -1e30
        labels = rng.integers(-n, n, size=37).astype(np.int32)  # negative: from the end
        onehot = rng.dirichlet(np.ones(n), size=37).astype(np.float32)
        onehot[6] = 0.0
        onehot[7, n // 2] = np.nan

        def build(n=n):
            p = kiln.placeholder((None, n))
            lab = kiln.placeholder((None,), "int32")
            y = kiln.placeholder((None, n))
            return kiln.function([p, lab, y], [
                K.softmax(p), K.log_softmax(p), K.sparse_softmax_cross_entropy(p, lab),
                K.softmax_cross_entropy(p, y)], backend="cpu", optimize=False)

        got, _ = _against_reference(build, (x, labels, onehot))
        fn = build()
        fn(x, labels, onehot)
        short = [s.label for p in fn.program._plans.values() for s in p.steps
                 if s.label.endswith(":short_rows")]
        assert len(short) == (4 if n <= native_nn.SHORT_ROW else 0), (n, short)
        # the float64 reference (the lanes' float64 sums: within float32 rounding)
        x64 = x.astype(np.float64)
        with np.errstate(all="ignore"):
            ref = x64 - x64.max(axis=1, keepdims=True)
            ref_log = ref - np.log(np.exp(ref).sum(axis=1, keepdims=True))
        ok = np.isfinite(ref_log).all(axis=1)
        np.testing.assert_allclose(got[1][ok], ref_log[ok], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[0][ok], np.exp(ref_log[ok]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[2][ok], -ref_log[ok, labels[ok] % n], rtol=1e-5,
                                   atol=1e-5)


def test_a_label_out_of_range_in_a_short_row_is_an_index_error(cache):
    x = np.zeros((5, 10), np.float32)
    p = kiln.placeholder((None, 10))
    lab = kiln.placeholder((None,), "int32")
    fn = kiln.function([p, lab], K.sparse_softmax_cross_entropy(p, lab), backend="cpu",
                       optimize=False)
    for bad in (10, -11):
        with pytest.raises(IndexError, match="sparse_softmax_cross_entropy: label out of range"):
            fn(x, np.array([0, 1, bad, 2, 3], np.int32))
    np.testing.assert_allclose(fn(x, np.array([0, -1, 9, 2, 3], np.int32)), np.log(10.0),
                               rtol=1e-6)


def test_a_small_convnet_step_runs_the_native_kernels_and_matches_the_reference(
        cache, monkeypatch, cpu_options):
    # conv (direct and im2col + GEMM) -> tiled max pooling, forward and gradients; Winograd
    # (tests/core/backends/test_winograd.py) and the register tiles
    # (tests/core/backends/test_cpu_ops.py) off on any host
    set_cpu(monkeypatch, avx512=False)
    cpu_options(winograd_m=0, pool_unrolled=False,  # max_pool_ir, not the unrolled pooling
                native_tile=False)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4, 12, 12, 1)).astype(np.float32)
    k1 = rng.normal(size=(3, 3, 1, 8)).astype(np.float32)
    k2 = rng.normal(size=(3, 3, 8, 6)).astype(np.float32)

    def build():
        p = kiln.placeholder((None, 12, 12, 1))
        w1, w2 = kiln.Variable(k1), kiln.Variable(k2)
        h = K.max_pool2d(K.relu(K.conv2d(p, w1)), 2, 2)
        loss = K.sum(K.square(K.conv2d(h, w2, padding="same")))
        return kiln.function([p], [loss, *kiln.grad(loss, [w1, w2])], backend="cpu")

    _, names = _against_reference(build, (x,))
    for kernel in ("conv_direct_kernel", "conv_filter_direct_kernel", "im2col_kernel",
                   "col2im_kernel", "max_pool_kernel", "max_pool_grad_tiled_kernel"):
        assert names.get(kernel, "").startswith("kiln_"), (kernel, names)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pool, strides, padding", [(2, 2, "valid"), (3, 2, "same")])
def test_max_pooling_in_vectors_gives_the_references_bits(dtype, pool, strides, padding,
                                                          cache):
    # 37 channels; NaN (kept, as np.maximum would) and
    # -0.0 / 0.0 ties; windows past the edges with "same"
    rng = np.random.default_rng(14)
    x = np.round(rng.normal(size=(2, 7, 9, 37)) * 2).astype(dtype)
    x[0, 1, 2, 5] = x[1, 4, 4, 20] = x[0, 6, 8, 36] = np.nan
    x[1, 0, 0, :] = -0.0

    def build():
        p = kiln.placeholder(x.shape, dtype)
        return kiln.function([p], K.max_pool2d(p, pool, strides, padding=padding),
                             backend="cpu", optimize=False)

    got = build()(x)
    ref = all_ops()["max_pool2d"].ref(x, pool_size=(pool, pool), strides=(strides, strides),
                                      padding=padding)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiled_max_pool_gradient_gives_the_references_bits(dtype, cache):
    # 37 channels (a vectorized loop and its remainder); ties inside windows (the first
    # maximal element gets the cotangent), NaN
    # (a window whose maximum is NaN passes nothing back), rows and columns past the windows
    from kiln.core.ops.registry import apply

    rng = np.random.default_rng(11)
    x = np.round(rng.normal(size=(3, 7, 9, 37)) * 2).astype(dtype)  # many ties
    x[0, 1, 2, 5] = x[1, 4, 4, 20] = x[2, 0, 0, 36] = np.nan
    pooled = all_ops()["max_pool2d"].ref(x, pool_size=(2, 2), strides=(2, 2), padding="valid")
    ct = rng.normal(size=pooled.shape).astype(dtype)

    def build():
        ps = [kiln.placeholder(a.shape, dtype) for a in (x, pooled, ct)]
        return kiln.function(ps, apply("max_pool2d_grad", *ps, pool_size=(2, 2), strides=(2, 2),
                                       padding="valid"), backend="cpu", optimize=False)

    got = build()(x, pooled, ct)
    ref = all_ops()["max_pool2d_grad"].ref(x, pooled, ct, pool_size=(2, 2), strides=(2, 2),
                                     padding="valid")
    np.testing.assert_array_equal(got, ref)
    fn = build()
    fn(x, pooled, ct)
    assert _kernel_names(fn)["max_pool_grad_tiled_kernel"].startswith("kiln_")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [2, 3])
def test_unrolled_max_pooling_and_its_index_give_the_references_bits(dtype, size, cache):
    # windows that tile the input (pool size = strides, "valid"): the unrolled forward writes
    # the winners' index where the gradient is in the same plan, and the gradient routes the
    # cotangent by it. 37 channels, rows and columns past the last window, ties (the first
    # maximal element wins), -0.0 / 0.0, NaN windows (nothing passed back), 3 images split
    # over the threads
    rng = np.random.default_rng(12 + size)
    x = np.round(rng.normal(size=(3, 8, 10, 37)) * 2).astype(dtype)  # many ties
    x[0, 1, 2, 5] = x[1, 4, 4, 20] = x[2, 0, 0, 36] = np.nan
    x[1, 0:size, 0:size, 7] = 0.0
    x[1, 1, 1, 7] = -0.0
    x[2, 0:size, 0:size, 8] = -0.0
    oh, ow = 8 // size, 10 // size
    ct = rng.normal(size=(3, oh, ow, 37)).astype(dtype)

    def build():
        p = kiln.placeholder(x.shape, dtype)
        c = kiln.placeholder(ct.shape, dtype)
        y = K.max_pool2d(p, size, size)
        return kiln.function([p, c], [y, kiln.grad(K.sum(y * c), [p])[0]], backend="cpu")

    got, names = _against_reference(build, (x, ct), exact=True)
    attrs = {"pool_size": (size, size), "strides": (size, size), "padding": "valid"}
    pooled = all_ops()["max_pool2d"].ref(x, **attrs)
    np.testing.assert_array_equal(got[0], pooled)
    np.testing.assert_array_equal(got[1], all_ops()["max_pool2d_grad"].ref(x, pooled, ct,
                                                                          **attrs))
    i, j = 1 // size, 2 // size  # the window holding x[0, 1, 2, 5] (NaN)
    assert np.isnan(got[0][0, i, j, 5])
    assert not got[1][0, i * size:(i + 1) * size, j * size:(j + 1) * size, 5].any()
    for kernel in (f"max_pool_unrolled_{size}x{size}i", f"max_pool_grad_index_{size}x{size}"):
        assert names.get(kernel, "").startswith("kiln_"), (kernel, names)
    # without the gradient in the plan: the unrolled forward, no index
    p = kiln.placeholder(x.shape, dtype)
    fwd = kiln.function([p], K.max_pool2d(p, size, size), backend="cpu")
    np.testing.assert_array_equal(fwd(x), pooled)
    assert f"max_pool_unrolled_{size}x{size}" in _kernel_names(fwd)


def test_a_max_pool_gradient_of_another_pooling_does_not_read_its_index(cache):
    # two poolings of the same input with other windows (the index keys name the input, the
    # output and the window): each gradient reads its own forward's index
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 12, 12, 5)).astype(np.float32)

    def build():
        p = kiln.placeholder(x.shape)
        a, b = K.max_pool2d(p, 2, 2), K.max_pool2d(p, 3, 3)
        loss = K.sum(a * a) + K.sum(b * b * b)
        return kiln.function([p], [loss, kiln.grad(loss, [p])[0]], backend="cpu")

    _, names = _against_reference(build, (x,))
    assert "max_pool_grad_index_2x2" in names and "max_pool_grad_index_3x3" in names


def test_a_cache_folder_that_cannot_be_written_leaves_native_kernels_in_memory(
        tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker))
    monkeypatch.setattr(jit_loader, "_unusable", {})
    monkeypatch.setattr(jit_loader, "_warned", set())
    x = kiln.placeholder((None, 3))
    f = kiln.function([x], K.relu(x * 3.0 - 1.0) + K.sigmoid(x), backend="cpu")
    a = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    with pytest.warns(jit_loader.KernelCacheWarning, match="cannot be written"):
        got = f(a)
    want = np.maximum(a * 3 - 1, 0) + 1 / (1 + np.exp(-a))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert blocker.read_text() == "a file where the cache folder should be"


@pytest.mark.parametrize("ci, groups, co, strides, kernels", [
    # strided: the input gradient as one grouped forward per phase (3 input channels per
    # group are the phases' outputs: conv_grouped_kernel_g3)
    (6, 2, 12, (2, 1), ("conv_grouped_kernel_g6", "conv_grouped_filter_kernel_g6",
                        "conv_grouped_kernel_g3", "phase_flip")),
    (6, 6, 12, (2, 1), ("conv_grouped_kernel_g2", "conv_grouped_filter_kernel_g2",
                        "conv_grouped_kernel_g1", "phase_flip")),  # depthwise, multiplier 2
    # stride 1: the input gradient as the grouped forward of the cotangent (flipped kernel)
    (16, 4, 20, (1, 1), ("conv_grouped_kernel_g5", "conv_grouped_filter_kernel_g5",
                         "conv_grouped_kernel_g4_c5", "flip")),
    # multiplier 1: vectors over the channels, and their tail
    (37, 37, 37, (2, 1), ("conv_depthwise_kernel", "conv_depthwise_filter_kernel",
                          "conv_depthwise_input_kernel")),
])
def test_grouped_convolutions_run_natively_and_match_the_reference(ci, groups, co, strides,
                                                                   kernels, cache):
    rng = np.random.default_rng(8)
    x = rng.normal(size=(3, 9, 8, ci)).astype(np.float32)
    k = rng.normal(size=(3, 3, ci // groups, co)).astype(np.float32)
    attrs = {"strides": strides, "padding": "same", "dilation": (1, 1), "groups": groups}

    def build():
        p = kiln.placeholder((None, 9, 8, ci))
        w = kiln.Variable(k)
        y = K.conv2d(p, w, strides=strides, padding="same", groups=groups)
        loss = K.sum(K.square(y))
        return kiln.function([p], [y, *kiln.grad(loss, [w, p])], backend="cpu")

    got, names = _against_reference(build, (x,))
    for kernel in kernels:  # each ran (natively, but the kernel's flips)
        assert kernel in names and (kernel.endswith("flip") or names[kernel].startswith(
            "kiln_")), (kernel, names)
    _check_conv_and_gradients(got, x, k, attrs)


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kernel, strides", [((3, 3), (2, 2)), ((2, 3), (2, 3)),
                                             ((1, 1), (2, 2)), ((5, 4), (3, 1)),
                                             ((3, 2), (1, 2))])
def test_a_strided_grouped_input_gradient_by_phases_matches_the_float64_reference(
        kernel, strides, padding):
    # every input position in exactly one phase; phases no tap reaches (a 1x1 kernel with
    # stride 2) are zeros; odd sizes leave phases of different lengths
    rng = np.random.default_rng(9)
    ci, co, groups = 12, 24, 3
    x = rng.normal(size=(3, 11, 9, ci)).astype(np.float32)
    k = rng.normal(size=(*kernel, ci // groups, co)).astype(np.float32)
    attrs = {"strides": strides, "padding": padding, "dilation": (1, 1), "groups": groups}
    p = kiln.placeholder((None, 11, 9, ci))
    w = kiln.placeholder(k.shape)
    y = K.conv2d(p, w, strides=strides, padding=padding, groups=groups)
    ct_shape = (3, *y.shape[1:])
    ct = rng.normal(size=ct_shape).astype(np.float32)
    c = kiln.placeholder((None, *y.shape[1:]))
    (dx,) = kiln.grad(K.sum(y * c), [p])
    f = kiln.function([p, w, c], [dx])
    got = f(x, k, ct)[0]
    labels = [s.label for s in f.program.plan([x, k, ct]).steps]
    assert any(lab.endswith("phase_scatter") for lab in labels), labels
    want = all_ops()["conv2d_backprop_input"].ref(ct.astype(np.float64), k.astype(np.float64),
                                                   input_shape=x.shape[1:], **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _check_conv_and_gradients(got: list, x: np.ndarray, k: np.ndarray, attrs: dict) -> None:
    """``got = [y, dloss/dw, dloss/dx]`` of ``loss = sum(conv2d(x, k)^2)`` against the float64
    reference: y, dloss/dw = bpf(x, 2y), dloss/dx = bpi(2y, w)."""
    ops = all_ops()
    x64, k64 = x.astype(np.float64), k.astype(np.float64)
    y = ops["conv2d"].ref(x64, k64, **attrs)
    np.testing.assert_allclose(got[0], y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], ops["conv2d_backprop_filter"].ref(
        x64, 2 * y, kernel_size=k.shape[:2], **attrs), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[2], ops["conv2d_backprop_input"].ref(
        2 * y, k64, input_shape=x.shape[1:], **attrs), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("ci, groups, co, kernels", [
    # 2 vectors of 16 and a tail of 5; a block of 4 vectors, 1, a tail of 5
    (37, 37, 37, ("conv_depthwise_kernel", "conv_depthwise_filter_kernel")),
    (85, 85, 85, ("conv_depthwise_kernel", "conv_depthwise_filter_kernel")),
    # 2 vectors per group: blocks of 8 input channels and 2, 8 pixels
    (20, 2, 64, ("conv_grouped_kernel_g32_c10", "conv_grouped_filter_kernel_g32_c10")),
    (6, 2, 8, ("conv_grouped_kernel_g4_c3", "conv_grouped_filter_kernel_g4_c3")),  # 4 lanes
    (8, 2, 16, ("conv_grouped_kernel_g8_c4", "conv_grouped_filter_kernel_g8_c4")),  # 8 lanes
    (6, 3, 48, ("conv_grouped_kernel_g16_c2", "conv_grouped_filter_kernel_g16_c2")),
])
@pytest.mark.parametrize("padding, strides, dilation", [
    ("same", (1, 1), (1, 1)), ("valid", (2, 3), (1, 1)), ("same", (1, 2), (2, 1)),
    ("valid", (1, 1), (1, 2))])
def test_blocked_grouped_convolutions_match_the_reference(ci, groups, co, kernels, padding,
                                                         strides, dilation, cache):
    # native_groups' float32 kernels keep their sums in registers: the kernel gradients over
    # the columns of an output row whose tap lies inside the image (_columns), the grouped
    # forward over blocks of 8 or 16 pixels of a row (the last block ending at the row's end,
    # narrower rows pixel by pixel). Widths 19, 9, 4 and 1 (no column for some taps), with
    # strides, dilation and both paddings; the input gradient (at stride 1 a grouped forward)
    # against the reference too
    rng = np.random.default_rng(23)
    for width in (19, 9, 4, 1):
        if padding == "valid" and width < 1 + 2 * dilation[1]:
            continue
        x = rng.normal(size=(2, 7, width, ci)).astype(np.float32)
        k = rng.normal(size=(3, 3, ci // groups, co)).astype(np.float32)
        attrs = {"strides": strides, "padding": padding, "dilation": dilation,
                 "groups": groups}

        def build(width=width, k=k):
            p = kiln.placeholder((None, 7, width, ci))
            w = kiln.Variable(k)
            y = K.conv2d(p, w, strides, padding, dilation, groups)
            return kiln.function([p], [y, *kiln.grad(K.sum(K.square(y)), [w, p])],
                                 backend="cpu")

        got, names = _against_reference(build, (x,))
        for kernel in kernels:
            assert names[kernel].startswith("kiln_"), (kernel, names)
        _check_conv_and_gradients(got, x, k, attrs)


def test_without_a_usable_llvmlite_no_kernel_is_native(cache, monkeypatch):
    # native.available() is False where llvmlite, libm or the ndarray layout is not usable
    monkeypatch.setitem(native._state, "ok", False)
    assert not native.enabled()
    assert isinstance(elementwise.loop_kernel(_spec("mul", ("float32", "float32"))),
                      jit.Kernel)
    x = kiln.placeholder((None, 4))
    f = kiln.function([x], K.softmax(x * 2.0), backend="cpu")
    a = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    e = np.exp(2 * a - (2 * a).max(1, keepdims=True))
    np.testing.assert_allclose(f(a), e / e.sum(1, keepdims=True), rtol=1e-6)
    assert not any(_entry_name(s).startswith("kiln_") for p in f.program._plans.values()
                   for s in p.steps)


@pytest.mark.parametrize("width, strides", [(3, (1, 1)), (1, (1, 1)), (11, (1, 2)), (7, (2, 3))])
def test_depthwise_rows_narrower_and_wider_than_a_block_match_the_reference(width, strides,
                                                                           cache):
    # the float32 forward keeps native_groups.DEPTHWISE_BLOCK pixels of a row at a time, the
    # row's last block ending at its end; narrower rows run pixel by pixel; 35 channels: two
    # vectors and a tail
    rng = np.random.default_rng(17)
    x = rng.normal(size=(2, 5, width, 35)).astype(np.float32)
    k = rng.normal(size=(3, 3, 1, 35)).astype(np.float32)
    attrs = {"strides": strides, "padding": "same", "dilation": (1, 1), "groups": 35}

    def build():
        p = kiln.placeholder((None, 5, width, 35))
        return kiln.function([p], K.conv2d(p, K.constant(k), strides=strides, padding="same",
                                           groups=35), backend="cpu")

    got, names = _against_reference(build, (x,))
    assert names["conv_depthwise_kernel"].startswith("kiln_")
    want = all_ops()["conv2d"].ref(x.astype(np.float64), k.astype(np.float64), **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_kernels_loaded_from_the_cache_hold_no_arrays_and_leave_feeds_read_in_place(cache):
    # a kernel found on disk keeps the function that would generate its IR (for a damaged
    # file): that function must hold no array of the plan that first asked for the kernel
    # (it would keep the plan's buffers alive, and a step holding a view of a feed gets the
    # feed copied instead of read in place), and a pending kernel holds none for the plan
    from kiln.core.backends.cpu.runtime import feeds

    rng = np.random.default_rng(4)

    def run():
        model = kiln.Sequential([
            kiln.Input((12, 12, 3)), kiln.layers.Conv2D(8, 3, activation="relu"),
            kiln.layers.MaxPooling2D(2), kiln.layers.Conv2D(8, 3, groups=2, padding="same"),
            kiln.layers.Flatten(), kiln.layers.Dropout(0.3),
            kiln.layers.Dense(5, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy")
        model.train_on_batch(rng.normal(size=(64, 12, 12, 3)).astype(np.float32),
                             np.arange(64) % 5)
        x, y = kiln.placeholder((None, 4096)), kiln.placeholder((None, 4096))
        ids = kiln.placeholder((None,), "int32")
        f = kiln.function([x, y, ids], [K.softmax_cross_entropy(x, y), K.one_hot(ids, 7),
                                        K.take(x, ids, axis=1)], backend="cpu")
        a = rng.normal(size=(8, 4096)).astype(np.float32)
        b = rng.dirichlet(np.ones(4096), size=8).astype(np.float32)
        f(a, b, np.arange(8, dtype=np.int32))
        return f.program.plan([a, b, np.arange(8, dtype=np.int32)])

    run()
    native._kernels.clear()  # a fresh process's view: every kernel is on disk
    try:
        plan = run()
        lazy = [k for k in native._kernels.values() if callable(k._ir)]
        assert lazy  # loaded without generating their IR
        assert [k.label for k in lazy if feeds.closure_arrays(k._ir)] == []
        assert plan.info["bound_feeds"] == 2  # both 32 KB feeds read in place
    finally:
        native._kernels.clear()
