"""kiln/core/backends/cpu/target.py: the CPU kiln compiles for, read in one place; KILN_CPU;
the platform guards of the spin workers and the private BLAS; the kernel cache's cpu key."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from kiln.core.backends.cpu import target

X86 = platform.machine().lower() in ("x86_64", "amd64")
needs_x86 = pytest.mark.skipif(not X86, reason="x86 cpu names")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
AVX2_HOST = ("znver3", {"sse4.2": True, "avx": True, "avx2": True, "fma": True,
                        "avx512f": False})
AVX512_HOST = ("znver4", {**AVX2_HOST[1], **dict.fromkeys(
    ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"), True)})


@needs_x86
@pytest.mark.parametrize("cpu, avx512", [("x86-64-v3", False), ("haswell", False),
                                         ("znver3", False), ("x86-64-v4", True),
                                         ("skylake-avx512", True), ("znver4", True)])
def test_a_named_cpus_features_decide_the_kernels(cpu, avx512):
    t = target.build(cpu, host=AVX512_HOST)
    assert (t.name, t.source) == (cpu, "KILN_CPU")
    # AVX-512 targets' loops use full-width vectors (Intel's cores prefer 256 bits in LLVM)
    assert t.llvm_features == (target.FULL_WIDTH if avx512 else "")
    assert {"avx", "avx2", "fma"} <= t.features  # every one of these has AVX2 and FMA
    assert t.has_avx512 == t.native_matmul == avx512
    assert t.tile_conv  # AVX-512, or AVX2 with FMA
    assert t.vector_lanes == (16 if avx512 else 8)


@needs_x86
def test_a_cpu_whose_features_the_host_lacks_is_refused():
    with pytest.raises(target.TargetError, match=r"KILN_CPU='x86-64-v4' needs avx512bw, "
                       r"avx512cd, avx512dq, avx512f, avx512vl, which this host's CPU "
                       r"\(znver3\) lacks"):
        target.build("x86-64-v4", host=AVX2_HOST)
    assert not target.build("x86-64-v3", host=AVX2_HOST).has_avx512


def test_an_unknown_cpu_is_refused(monkeypatch):
    monkeypatch.setenv("KILN_CPU", "pentium9000")
    with pytest.raises(target.TargetError, match="KILN_CPU='pentium9000' is not a CPU LLVM "
                                                 "knows"):
        target.build(host=AVX512_HOST)


def test_the_host_target_takes_the_hosts_name_and_features(monkeypatch):
    monkeypatch.delenv("KILN_CPU", raising=False)
    t = target.build(host=AVX2_HOST)
    assert (t.name, t.source) == ("znver3", "host")
    assert t.features == {"sse4.2", "avx", "avx2", "fma"}
    assert "+avx2" in t.llvm_features.split(",") and "-avx512f" in t.llvm_features.split(",")
    assert not t.has_avx512 and target.FULL_WIDTH not in t.llvm_features
    wide = target.build(host=AVX512_HOST)
    assert wide.has_avx512 and wide.llvm_features.split(",")[-1] == target.FULL_WIDTH


@pytest.mark.parametrize("system, machine, blas, spin, private", [
    ("linux", "x86_64", "scipy-openblas", True, True),
    ("linux", "aarch64", "scipy-openblas", False, True),   # no futex number / pause for arm
    ("linux", "x86_64", "mkl", True, False),               # NumPy's BLAS is not OpenBLAS
    ("darwin", "arm64", "accelerate", False, False),
    ("darwin", "x86_64", "scipy-openblas", False, False),  # no memfd, no RTLD_DEEPBIND
    ("win32", "AMD64", "scipy-openblas", False, False),
])
def test_the_platform_guards(system, machine, blas, spin, private, monkeypatch):
    monkeypatch.delenv("KILN_CPU", raising=False)
    monkeypatch.delenv("KILN_SPIN_POOL", raising=False)
    monkeypatch.delenv("KILN_BLAS", raising=False)
    monkeypatch.setattr(sys, "platform", system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    if system == "linux" and not (hasattr(os, "memfd_create") and hasattr(os, "RTLD_DEEPBIND")):
        private = False  # the real process cannot make the copy whatever it is told
    t = target.build(host=AVX2_HOST, numpy_blas=blas)
    assert (t.system, t.machine) == (system, machine.lower())
    assert (t.spin_engine, t.private_blas) == (spin, private)
    line = t.describe()
    assert ("workers: spin (x86-64 Linux)" if spin else "workers: portable threads") in line
    assert f"private OpenBLAS {'on' if private else 'off'}" in line


def test_the_switches_turn_the_engines_off(monkeypatch):
    monkeypatch.delenv("KILN_CPU", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setenv("KILN_SPIN_POOL", "0")
    monkeypatch.setenv("KILN_BLAS", "numpy")
    t = target.build(host=AVX2_HOST, numpy_blas="scipy-openblas")
    assert not t.spin_engine and not t.private_blas


def test_use_sets_the_kernel_choices_in_one_place():
    import numpy as np
    from cpu_targets import emulated

    from kiln.core.backends.cpu.codegen import native
    from kiln.core.backends.cpu.gemm import native_matmul
    from kiln.core.backends.cpu.kernels.conv import conv, winograd

    a, b = np.ones((256, 64), np.float32), np.ones((64, 256), np.float32)
    out = np.empty((256, 256), np.float32)
    for avx512 in (True, False):
        with target.use(emulated(avx512)):
            assert target.current().has_avx512 == avx512
            assert winograd._avx512() == avx512
            assert conv.conv_method(288, "conv2d", "float32", 32) == "tile"  # AVX2 + FMA too
            assert native_matmul.suits(a, b, out) == (avx512 and native.enabled())
    assert target.current() is target.process()


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": ROOT, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, timeout=300)


PROBE = """
from kiln.core.backends import jit
from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen import native
import numba.core.config as nc
native.available()
print(target.process().name)
print(jit.toolchain("cpu"))
print(native._state["host"])
print(nc.CPU_NAME, repr(nc.CPU_FEATURES))
"""


@needs_x86
def test_kiln_cpu_generates_code_for_that_cpu_and_keys_the_cache_apart(tmp_path):
    # numba and the native loops compile for KILN_CPU's cpu, and both cache keys hold it: a
    # KILN_CPU run never loads the host's objects
    env = {"KILN_CACHE_DIR": str(tmp_path)}
    host = _run(PROBE, KILN_CPU="", **env)
    assert host.returncode == 0, host.stderr
    named = _run(PROBE, KILN_CPU="x86-64-v3", **env)
    assert named.returncode == 0, named.stderr
    h, n = host.stdout.splitlines(), named.stdout.splitlines()
    assert n[0] == "x86-64-v3" and h[0] != "x86-64-v3"
    assert "cpu=x86-64-v3;features=" in n[1] and n[1] != h[1]
    assert n[2].endswith("cpu=x86-64-v3;features=") and n[2] != h[2]
    assert n[3] == "x86-64-v3 ''"


def test_an_unknown_kiln_cpu_stops_the_backend_import_naming_it(tmp_path):
    got = _run("import kiln.core.backends.cpu", KILN_CPU="pentium9000",
               KILN_CACHE_DIR=str(tmp_path))
    assert got.returncode != 0
    assert "KILN_CPU='pentium9000' is not a CPU LLVM knows" in got.stderr


def test_the_compile_report_names_the_target():
    import numpy as np

    import kiln

    x = kiln.placeholder((None, 4))
    f = kiln.function([x], kiln.ops.exp(x), backend="cpu")
    np.testing.assert_allclose(f(np.zeros((2, 4), np.float32)), np.ones((2, 4)))
    assert target.current().describe() in str(f.report)


_LOOP = """
define void @add(ptr noalias %a, ptr noalias %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%j, %loop]
  %pa = getelementptr float, ptr %a, i64 %i
  %pb = getelementptr float, ptr %b, i64 %i
  %x = load float, ptr %pa
  %y = load float, ptr %pb
  %s = fadd float %x, %y
  store float %s, ptr %pa
  %j = add i64 %i, 1
  %c = icmp slt i64 %j, %n
  br i1 %c, label %loop, label %done
done:
  ret void
}
"""


@needs_x86
@pytest.mark.parametrize("cpu", ["skylake-avx512", "sapphirerapids", "znver4"])
def test_avx512_targets_vectorize_loops_at_full_width(cpu):
    # Intel's AVX-512 cores prefer 256-bit vectors in LLVM's vectorizers: kiln's target
    # features turn that off, so a generated loop runs 16 float32 lanes (zmm) on them
    llvm = target._llvm()
    if "not a recognized processor" in target._asm(llvm, cpu, "define void @f() {\n  ret void\n}\n",
                                                    "+64bit")[1]:
        pytest.skip(f"this LLVM does not know {cpu}")
    features = target.build(cpu, host=("any", dict.fromkeys(target.cpu_features(cpu), True)))
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=cpu, features=features.llvm_features, opt=3)
    mod = llvm.parse_assembly(_LOOP)
    mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    llvm.create_pass_builder(tm, pto).getModulePassManager().run(
        mod, llvm.create_pass_builder(tm, pto))
    asm = tm.emit_assembly(mod)
    assert "zmm" in asm, f"{cpu}: the loop was not vectorized at 512 bits"
