"""The CPU backend's options (kiln/core/backends/cpu/options.py): one frozen object, scoped
per thread, recorded on the program and followed by its plans; and no test patches a tuning
constant through a module any more."""

from __future__ import annotations

import dataclasses
import re
import threading
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import native
from kiln.core.ops import all_ops
from kiln.core.ops.registry import apply
from kiln.core.passes import _util as passes_util

TESTS = Path(__file__).resolve().parents[2]
# the module constants the fields replaced (module, name) -> field: patching one of these
# names now raises (the module has no such attribute), and the guard below finds it first
MOVED = {
    ("lowering", "SERIAL_WORK"): "serial_work",
    ("lowering", "ELEMENT_WORK"): "element_work",
    ("lowering", "WINOGRAD_MIN_OUTPUTS"): "winograd_min_outputs",
    ("native_matmul", "ENABLED"): "native_matmul",
    ("native_matmul", "MIN_ROWS"): "matmul_min_rows",
    ("native_matmul", "MAX_INNER"): "matmul_max_inner",
    ("native_matmul", "SERIAL_WORK"): "matmul_serial_work",
    ("native_matmul", "COLUMN_ROWS"): "matmul_column_rows",
    ("native_matmul", "TRANSPOSE_SPLIT"): "transpose_split",
    ("linalg", "EARLY_PACK"): "early_pack",
    ("native_gemv", "ENABLED"): "native_gemv",
    ("native_gemv", "SPLIT_WORK"): "gemv_split_work",
    ("native_gemv", "STREAM_ROWS"): "gemv_stream_rows",
    ("native_gemv", "STREAM_VECTORS"): "gemv_stream_vectors",
    ("winograd_cache", "ENABLED"): "winograd_cache",
    ("winograd_cache", "CACHED_MIN_OUTPUTS"): "winograd_cached_min_outputs",
    ("winograd_cache", "CACHED_MIN_OUTPUTS_NO_TILES"): "winograd_cached_min_outputs_no_tiles",
    ("blas", "MIN_WORK"): "blas_min_work",
    ("blas", "MIN_EDGE"): "blas_min_edge",
    ("blas", "PLACED_MIN_WORK"): "blas_placed_min_work",
    ("elementwise", "MIN_RANK"): "loop_min_rank",
    ("elementwise", "PARALLEL_MIN_BYTES"): "parallel_min_bytes",
    ("elementwise", "SPIN_MIN_BYTES"): "spin_min_bytes",
    ("elementwise", "WIDE_MIN_COUNT"): "wide_min_count",
    ("elementwise", "AXPY_MIN_ELEMENTS"): "axpy_min_elements",
    ("sort", "PARALLEL_MIN"): "sort_parallel_min",
    ("conv", "DIRECT_MAX_TAPS"): "conv_direct_max_taps",
    ("conv", "NATIVE_TILE"): "native_tile",
    ("conv", "FILTER_CHUNK"): "filter_chunk",
    ("conv", "EPILOGUE"): "conv_epilogue",
    ("conv", "DOT_MAX_OUT"): "dot_max_out",
    ("conv", "DOT_ACCUMULATORS"): "dot_accumulators",
    ("conv", "INPUT_AS_FORWARD"): "input_as_forward",
    ("direct_small", "ENABLED"): "direct_small",
    ("direct_small", "MAX_INPUT_CHANNELS"): "direct_small_max_input_channels",
    ("direct_small", "MIN_OUTPUT_CHANNELS"): "direct_small_min_output_channels",
    ("winograd", "MIN_CHANNELS"): "winograd_min_channels",
    ("winograd", "TRANSFORM_LANES"): "winograd_transform_lanes",
    ("winograd", "DEFAULT_M"): "winograd_m",
    ("winograd", "STRIDE2_KERNELS"): "winograd_stride2_kernels",
    ("winograd", "MAX_KERNEL_TRANSFORM_BYTES"): "winograd_max_kernel_transform_bytes",
    ("winograd", "PIPELINE"): "winograd_pipeline",
    ("winograd", "PIPELINE_BYTES"): "winograd_pipeline_bytes",
    ("winograd", "PIPELINE_MIN_TILES"): "winograd_pipeline_min_tiles",
    ("winograd", "PARTIAL_BYTES"): "winograd_partial_bytes",
    ("winograd", "ADJOINT"): "winograd_adjoint",
    ("pool", "UNROLLED"): "pool_unrolled",
    ("pool", "INDEX"): "pool_index",
    ("pool", "MAX_INDEX_TAPS"): "pool_max_index_taps",
    ("avg_tiled", "MAX_CHANNELS"): "avg_pool_max_channels",
    ("avg_tiled", "MAX_TAPS"): "avg_pool_max_taps",
    ("avg_tiled", "MAX_GRAD_CHANNELS"): "avg_pool_max_grad_channels",
    ("feeds", "BIND_MIN_BYTES"): "bind_min_bytes",
    ("compile_batch", "KERNEL_BASE_COST"): "compile_kernel_base_cost",
    ("compile_batch", "SCALARS_COST"): "compile_scalars_cost",
    ("native", "COST_PER_IR_CHAR"): "compile_cost_per_ir_char",
}
MODULES = {
    "lowering": "kiln.core.backends.cpu.lowering",
    "native_matmul": "kiln.core.backends.cpu.gemm.native_matmul",
    "native_gemv": "kiln.core.backends.cpu.gemm.native_gemv",
    "winograd_cache": "kiln.core.backends.cpu.kernels.conv.winograd_cache",
    "linalg": "kiln.core.backends.cpu.kernels.linalg",
    "blas": "kiln.core.backends.cpu.gemm.blas",
    "elementwise": "kiln.core.backends.cpu.kernels.elementwise",
    "sort": "kiln.core.backends.cpu.kernels.sort",
    "conv": "kiln.core.backends.cpu.kernels.conv.conv",
    "direct_small": "kiln.core.backends.cpu.kernels.conv.direct_small",
    "winograd": "kiln.core.backends.cpu.kernels.conv.winograd",
    "pool": "kiln.core.backends.cpu.kernels.pool.pool",
    "avg_tiled": "kiln.core.backends.cpu.kernels.pool.avg_tiled",
    "feeds": "kiln.core.backends.cpu.runtime.feeds",
    "compile_batch": "kiln.core.backends.cpu.codegen.compile_batch",
    "native": "kiln.core.backends.cpu.codegen.native",
}
PASS_MOVED = {("fuse", "TAIL_MIN_ELEMENTS"): "fuse_tail_min_elements",
              ("fuse", "MAX_INSTRUCTIONS"): "fuse_max_instructions",
              ("fuse", "MAX_CHAIN_INSTRUCTIONS"): "fuse_max_chain_instructions",
              ("fold_affine", "MIN_RATIO"): "fold_affine_min_ratio",
              ("gemm", "MIN_ELEMENTS"): "gemm_min_elements"}


def test_every_moved_constant_is_a_field_and_gone_from_its_module():
    import importlib

    fields = {f.name for f in dataclasses.fields(options.CpuOptions)}
    assert set(MOVED.values()) <= fields, sorted(set(MOVED.values()) - fields)
    for module, name in MOVED:
        assert not hasattr(importlib.import_module(MODULES[module]), name), (module, name)
    pass_fields = {f.name for f in dataclasses.fields(passes_util.PassOptions)}
    for (module, name), field in PASS_MOVED.items():
        assert field in pass_fields
        assert not hasattr(importlib.import_module(f"kiln.core.passes.{module}"), name)


def _patched(text: str) -> list[tuple[str, str]]:
    """(target, name) of each ``setattr(<target>, "<NAME>", ...)`` and
    ``setattr("<dotted.target>.<NAME>", ...)`` in ``text``, in order."""
    pattern = (r"setattr\(\s*(?:[\"']([\w.]+)\.(\w+)[\"']\s*,"
               r"|([^,()\"']+(?:\([^()]*\))?)\s*,\s*[\"'](\w+)[\"'])")
    return [(a or c.strip(), b or d) for a, b, c, d in re.findall(pattern, text)]


def test_the_guard_finds_a_patched_tuning_constant():
    # the pattern the guard below greps for, on the spellings the suite used before
    text = ('monkeypatch.setattr(native_matmul, "SERIAL_WORK", 0)\n'
            'monkeypatch.setattr(importlib.import_module("kiln.core.passes.fuse"), '
            '"TAIL_MIN_ELEMENTS", 0)\n'
            'monkeypatch.setattr(threads, "kernel_threads", lambda: 2)\n'
            'monkeypatch.setattr("kiln.core.backends.cpu.lowering.SERIAL_WORK", 0)\n')
    assert _patched(text) == [("native_matmul", "SERIAL_WORK"),
                              ('importlib.import_module("kiln.core.passes.fuse")',
                               "TAIL_MIN_ELEMENTS"),
                              ("threads", "kernel_threads"),
                              ("kiln.core.backends.cpu.lowering", "SERIAL_WORK")]


def test_no_test_patches_a_tuning_constant_through_a_module():
    """Tests set options (``cpu_options`` / ``pass_options`` fixtures, ``options.use``),
    never a module attribute named like a field, or like the constant it replaced on a
    target that names its module (``FUSE``, ``gemm_pass`` ... included)."""
    names = {f.name for f in dataclasses.fields(options.CpuOptions)}
    names |= {f.name for f in dataclasses.fields(passes_util.PassOptions)}
    names |= {n.upper() for n in names}
    old = {}
    for module, name in (*MOVED, *PASS_MOVED):
        old.setdefault(name, set()).add(module)
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__).resolve():  # the examples above
            continue
        for target, name in _patched(path.read_text(encoding="utf-8")):
            if name in names or any(m in target.lower() for m in old.get(name, ())):
                found.append(f"{path.relative_to(TESTS)}: {target}.{name}")
    assert not found, ("patch CpuOptions / PassOptions fields with the cpu_options / "
                       f"pass_options fixtures instead: {found}")


def test_options_are_frozen_and_use_takes_only_options():
    opts = options.current()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.serial_work = 0  # type: ignore[misc]
    with pytest.raises(TypeError, match="options.use: expected a CpuOptions, received dict"):
        with options.use({"serial_work": 0}):  # type: ignore[arg-type]
            pass
    assert options.current() == options.build() and options.current().differences() == {}


def test_use_is_scoped_restored_after_an_error_and_per_thread():
    default = options.current()
    tuned = dataclasses.replace(default, serial_work=0, winograd_m=2)
    seen = {}

    def other_thread():
        seen["other"] = options.current()

    with options.use(tuned):
        assert options.current() is tuned
        with options.use(dataclasses.replace(tuned, winograd_m=0)):
            assert options.current().winograd_m == 0
        assert options.current() is tuned  # the inner block restored the outer one
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert seen["other"] == default  # another thread keeps its own (the defaults)
    assert options.current() == default
    with pytest.raises(RuntimeError, match="inside"):
        with options.use(tuned):
            raise RuntimeError("inside")
    assert options.current() == default


def test_kiln_winograd_is_read_by_build_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("KILN_WINOGRAD", "2")
    assert options.build().winograd_m == 2 and options.current().winograd_m == 2
    monkeypatch.setenv("KILN_WINOGRAD", "0")
    assert options.current().winograd_m == 0
    monkeypatch.setenv("KILN_WINOGRAD", "5")
    with pytest.raises(ValueError, match="KILN_WINOGRAD must be 0, 2 or 4, got '5'"):
        options.current()
    monkeypatch.delenv("KILN_WINOGRAD")
    assert options.current().winograd_m == options.CpuOptions.winograd_m == 4


ATTRS = {"strides": (1, 1), "padding": "same", "dilation": (1, 1)}


def _conv_function():
    x, w = kiln.placeholder((None, 12, 12, 16)), kiln.placeholder((3, 3, 16, 16))
    return kiln.function([x, w], apply("conv2d", x, w, **ATTRS), backend="cpu",
                         optimize=False)


def _run(f):
    rng = np.random.default_rng(3)
    xv = rng.normal(size=(8, 12, 12, 16)).astype("float32")
    wv = (rng.normal(size=(3, 3, 16, 16)) / 12).astype("float32")
    got = f(xv, wv)
    want = all_ops()["conv2d"].ref(xv.astype("float64"), wv.astype("float64"), **ATTRS)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    plan = next(iter(f.program._plans.values()))
    return [getattr(s, "label", "") for s in plan.steps]


@pytest.mark.skipif(not native.enabled(), reason="Winograd runs on the native path only")
def test_a_plan_follows_the_options_its_program_was_compiled_under(monkeypatch):
    monkeypatch.delenv("KILN_WINOGRAD", raising=False)
    # 8 x 12 x 12 outputs: Winograd F(4x4, 3x3) by default
    assert any("winograd" in lab for lab in _run(_conv_function()))
    off = dataclasses.replace(options.current(), winograd_m=0)
    with options.use(off):
        f = _conv_function()
    assert f.program.options is off  # recorded when compiled ...
    labels = _run(f)  # ... and the plan, built outside the block, follows it
    assert labels and not any("winograd" in lab for lab in labels), labels


def test_a_blas_step_keeps_the_options_of_the_plan_that_made_it():
    # a step's BLAS call is derived at its first run, on whichever thread runs it
    from kiln.core.backends.cpu.gemm import products

    tuned = dataclasses.replace(options.current(), blas_min_work=1 << 40,
                                blas_placed_min_work=1 << 40)
    with options.use(tuned):
        call = products.MatmulCall()
    assert call._options is tuned
    a, b = np.ones((256, 256), np.float32), np.ones((256, 256), np.float32)
    out = np.empty((256, 256), np.float32)
    plain = products.MatmulCall()
    plain(a, b, out)
    if plain._single is products.NUMPY:
        pytest.skip("no private BLAS here: every product is NumPy's")
    call(a, b, out)  # run outside the block: still under the tuned thresholds
    np.testing.assert_array_equal(out, a @ b)
    assert call._single is products.NUMPY


def test_the_compile_report_names_the_options_that_differ():
    x = kiln.placeholder((None, 4))
    plain = kiln.function([x], kiln.ops.relu(x), backend="cpu")
    assert "CPU options" not in str(plain.report)
    with options.use(dataclasses.replace(options.current(), serial_work=0,
                                         conv_epilogue=False)):
        tuned = kiln.function([x], kiln.ops.relu(x), backend="cpu")
    # the report's first lines: the target, then the options off their defaults
    first = str(tuned.report).splitlines()[:2]
    assert first[0].startswith("CPU target "), first
    assert first[1] == "CPU options (not the defaults): serial_work=0, conv_epilogue=False"


def test_pass_options_are_scoped_like_the_cpu_options():
    default = passes_util.options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.gemm_min_elements = 1  # type: ignore[misc]
    with passes_util.using(dataclasses.replace(default, gemm_min_elements=1)):
        assert passes_util.options().gemm_min_elements == 1
    assert passes_util.options() is default
    with pytest.raises(TypeError, match="passes: expected a PassOptions, received int"):
        with passes_util.using(3):  # type: ignore[arg-type]
            pass
