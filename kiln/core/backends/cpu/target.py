"""The CPU kiln compiles for: the ONLY place the CPU's name and features are read.

A :class:`CpuTarget` is built once per process (:func:`process`) from the host (llvmlite's
``get_host_cpu_name`` / ``get_host_cpu_features``) or, where ``KILN_CPU`` names an LLVM cpu
(``x86-64-v3``, ``x86-64-v4``, ``znver3``, ``skylake-avx512`` ...), as for that CPU: native
loops get a target machine for that cpu with its own features (``native.py``), numba the same
through ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` (set here before its first compile), and
every kernel choice below follows its features. The kernels' cache keys hold the cpu name and
feature string (:meth:`CpuTarget.cache_tag`), so a ``KILN_CPU`` run never loads the host's
objects and the other way round. A ``KILN_CPU`` the host cannot run (features it lacks) or
that LLVM does not know is refused with an error naming it.

The derived choices (docs/architecture.md, "Register-tiled convolutions", "Dense products",
"Winograd convolutions", "Threads", "BLAS"):

* ``tile_conv`` / ``native_matmul``: the 4 x 64 register tiles and kiln's own Dense product
  kernel need AVX-512's 32 registers of 16 lanes (with AVX2's 16 registers of 8 they spill and
  the GEMM paths win: conv.py); ``vector_lanes``: float32 lanes of a vector register (16 with
  AVX-512, else 8), Winograd's transform width.
* ``spin_engine``: the spinning native workers (``spin_pool.py``) use x86-64 Linux's futex
  syscall number (202) and x86's ``pause``: on the platforms of :data:`SPIN_PLATFORMS` only
  (x86-64 Linux; and ``KILN_SPIN_POOL`` not 0); elsewhere split calls run on
  ``threads.KernelPool``'s portable Python workers. The compile report names the engine
  (:attr:`CpuTarget.workers`): "workers: spin (x86-64 Linux)" / "workers: portable threads".
* ``private_blas``: the private OpenBLAS copy (``blas.py``: a memory file opened with
  ``RTLD_DEEPBIND``) only on Linux where NumPy's BLAS is OpenBLAS; elsewhere NumPy's BLAS.

Kernel choices read :func:`current` (the process's target unless a test set another with
:func:`use`); code generation always reads :func:`process`, the CPU the code runs on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from kiln import config

# (feature, LLVM IR of a probe function, the instruction its assembly shows where the cpu has
# the feature): how a named cpu's features are read (llvmlite gives a target machine for a
# cpu name, not its feature list). Only the features kiln's choices depend on.
_X86_PROBES = (
    ("avx", "<8 x float>", "%r = fadd <8 x float> %a, %b", r"vaddps\s+%ymm"),
    ("avx2", "<8 x i32>", "%r = add <8 x i32> %a, %b", r"vpaddd\s+%ymm"),
    ("fma", "<4 x float>",
     "%r = call <4 x float> @llvm.fma.v4f32(<4 x float> %a, <4 x float> %b, <4 x float> %b)",
     r"vfmadd"),
    ("avx512f", "<16 x float>", "%r = fadd <16 x float> %a, %b", r"vaddps\s+%zmm"),
    ("avx512bw", "<64 x i8>", "%r = add <64 x i8> %a, %b", r"vpaddb\s+%zmm"),
    ("avx512dq", "<8 x i64>", "%f = bitcast <8 x i64> %a to <8 x double>\n"
     "  %r = fptosi <8 x double> %f to <8 x i64>", r"vcvttpd2qq\s+%zmm"),
    ("avx512vl", "<4 x i64>", "%r = ashr <4 x i64> %a, %b", r"vpsravq\s+%ymm"),
    ("avx512cd", "<16 x i32>", "%r = call <16 x i32> @llvm.ctlz.v16i32(<16 x i32> %a, i1 false)",
     r"vplzcntd"),
)
#: LLVM's tuning for Intel's AVX-512 server cores (Skylake-X to Emerald Rapids) prefers
#: 256-bit vectors in the loops its vectorizers write (Skylake's frequency drop under 512-bit
#: code); AMD's Zen 4/5 has no such preference. kiln's product kernels use 512-bit vectors
#: anyway, so its generated loops on such a core ran half width for nothing: on a 2-core
#: Emerald Rapids, 8,192 x 64 float32 elements, us, 256 / 512 bits: exp 383 / 240, softmax
#: rows 427 / 295, GELU 1,108 / 678 (benchmarks/bench_kernels.py; docs/performance.md,
#: "Full-width loops on Intel's AVX-512 cores"). The same code on every AVX-512 target.
FULL_WIDTH = "-prefer-256-bit"
_AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
# KILN_BLAS's values (blas.py: auto, numpy, or an OpenBLAS core it knows)
_BLAS_SETTINGS = ("auto", "numpy", "skylakex", "cooperlake", "haswell", "zen", "sandybridge")


class TargetError(ValueError):
    """``KILN_CPU`` names a cpu LLVM does not know, or one whose features the host lacks."""


@dataclasses.dataclass(frozen=True)
class CpuTarget:
    """The CPU kiln generates code and picks kernels for (the seed of the backend's options).

    Attributes:
        name: the LLVM cpu name (``znver3``, ``x86-64-v3`` ...).
        features: the enabled features kiln knows of (LLVM's names, no ``+``).
        llvm_features: the feature string of the target machine (the host's features; for a
            ``KILN_CPU`` target only what kiln adds to the cpu name: :data:`FULL_WIDTH` on
            AVX-512).
        source: ``"host"`` or ``"KILN_CPU"``.
        system, machine: ``sys.platform`` and ``platform.machine()`` when it was built.
        spin_engine: whether split native calls run on the spinning workers.
        private_blas: whether GEMMs may run on the private OpenBLAS copy.
        numpy_blas: the name of NumPy's BLAS ("" when unknown).
    """

    name: str
    features: frozenset[str]
    llvm_features: str = ""
    source: str = "host"
    system: str = "linux"
    machine: str = "x86_64"
    spin_engine: bool = False
    private_blas: bool = False
    numpy_blas: str = ""

    @property
    def has_avx512(self) -> bool:
        return all(f in self.features for f in _AVX512)

    @property
    def vector_lanes(self) -> int:
        """float32 lanes of a vector register."""
        return 16 if self.has_avx512 else 8

    @property
    def tile_conv(self) -> bool:
        """Whether float32 convolutions with at most four vectors of outputs
        (``conv.tile_channels``) run the register tiles: AVX-512, and AVX2 with FMA (8 lanes,
        15 registers of accumulators and operands). On AVX2 (``KILN_CPU=x86-64-v3`` on a Zen 5,
        benchmarks/bench_serving.py --modes tiles) training steps, tiles on / off, ms: LeNet-5
        5.0 / 6.3, dilated Conv1D 14.3 / 15.8, conv autoencoder 23.8 / 26.3, CIFAR CNN 29.7 /
        30.6; MNIST convnet batch-1 predict 26.6 / 45.5 us (docs/performance.md)."""
        return self.has_avx512 or {"avx2", "fma"} <= self.features

    @property
    def workers(self) -> str:
        """The engine split kernels run on, as the compile report names it."""
        if self.spin_engine:
            return f"spin ({SPIN_PLATFORMS[(_os(self.system), self.machine)]})"
        return "portable threads"

    @property
    def native_matmul(self) -> bool:
        """Whether Dense products run kiln's own kernel (native_matmul.py)."""
        return self.has_avx512

    def cache_tag(self) -> str:
        """The cpu part of a kernel's cache key."""
        return f"cpu={self.name};features={self.llvm_features}"

    def describe(self) -> str:
        """One line for the compile report."""
        on = {True: "on", False: "off"}
        return (f"CPU target {self.name} ({self.source}; {self.system}/{self.machine}; "
                f"{'AVX-512' if self.has_avx512 else 'no AVX-512'}, {self.vector_lanes} "
                f"float32 lanes): tile convolutions {on[self.tile_conv]}, native Dense "
                f"products {on[self.native_matmul]}, workers: {self.workers}, private "
                f"OpenBLAS {on[self.private_blas]} (NumPy's BLAS: {self.numpy_blas or 'unknown'})")


def _llvm() -> Any:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm


def _asm(llvm: Any, cpu: str, ir: str, features: str = "") -> tuple[str, str]:
    """(assembly of ``ir`` for ``cpu``, what LLVM wrote to stderr meanwhile)."""
    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            target = llvm.Target.from_default_triple()
            tm = target.create_target_machine(cpu=cpu, features=features, opt=2)
            mod = llvm.parse_assembly(ir)
            mod.triple = tm.triple
            asm = tm.emit_assembly(mod)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return asm, err.read().decode(errors="replace")


def cpu_features(cpu: str) -> frozenset[str]:
    """The features of :data:`_X86_PROBES` that the LLVM cpu ``cpu`` has (x86 only: an empty
    set elsewhere), read from the code LLVM generates for it.

    Raises:
        TargetError: LLVM does not know ``cpu``.
    """
    llvm = _llvm()
    arch = llvm.get_process_triple().split("-")[0]
    # first a scalar function with the 64-bit mode set: LLVM aborts the process on an
    # unknown x86 cpu's vector code ("64-bit code requested on a subtarget that doesn't
    # support it"), and warns on stderr here
    _, err = _asm(llvm, cpu, "define i32 @probe(i32 %a) {\n  ret i32 %a\n}\n",
                  "+64bit" if arch == "x86_64" else "")
    if "not a recognized processor" in err:
        raise TargetError(f"KILN_CPU={cpu!r} is not a CPU LLVM knows (LLVM: "
                          f"{err.strip().splitlines()[0]}); use an LLVM cpu name such as "
                          "x86-64-v3, x86-64-v4, znver3 or skylake-avx512")
    found = set()
    for feature, ty, body, needle in (_X86_PROBES if arch in ("x86_64", "i386", "i686") else ()):
        ir = ("declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)\n"
              if "fma" in body else "")
        ir += ("declare <16 x i32> @llvm.ctlz.v16i32(<16 x i32>, i1)\n" if "ctlz" in body else "")
        ir += (f"define {ty} @probe({ty} %a, {ty} %b) #0 {{\n  {body}\n  ret {ty} %r\n}}\n"
               'attributes #0 = { "min-legal-vector-width"="512" "prefer-vector-width"="512" }\n')
        asm, _ = _asm(llvm, cpu, ir)
        if re.search(needle, asm):
            found.add(feature)
    return frozenset(found)


def _numpy_blas() -> str:
    try:
        import numpy as np

        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return str(info.get("name", ""))
    except Exception:  # an old NumPy, another layout: unknown
        return ""


def build(cpu: str | None = None, host: tuple[str, dict[str, bool]] | None = None,
          numpy_blas: str | None = None) -> CpuTarget:
    """A target for ``cpu`` (an LLVM cpu name; default ``KILN_CPU``, else the host), with the
    choices of this platform (``sys.platform``, ``platform.machine()``) and kiln's settings.

    Args:
        cpu: the LLVM cpu name, or None for ``KILN_CPU`` / the host.
        host: (cpu name, features) of the host; default llvmlite's.
        numpy_blas: the name of NumPy's BLAS; default what ``numpy.show_config`` reports.

    Raises:
        TargetError: ``cpu`` is unknown to LLVM, or has features the host lacks.
    """
    system, machine = sys.platform, platform.machine().lower()
    if host is None:
        try:
            llvm = _llvm()
            host = (llvm.get_host_cpu_name(), dict(llvm.get_host_cpu_features()))
        except (ImportError, AttributeError, RuntimeError, OSError):  # no llvmlite: portable
            host = ("generic", {})
    host_name, host_flags = host
    if cpu is None:
        cpu = os.environ.get("KILN_CPU", "").strip() or None
    if cpu is None or cpu == "host":
        features = frozenset(f for f, on in host_flags.items() if on)
        flat = ",".join(f"{'+' if on else '-'}{f}" for f, on in sorted(host_flags.items()))
        name, llvm_features, source = host_name, flat, "host"
    else:
        features = cpu_features(cpu)
        missing = sorted(f for f in features if not host_flags.get(f))
        if missing:
            raise TargetError(f"KILN_CPU={cpu!r} needs {', '.join(missing)}, which this host's "
                              f"CPU ({host_name}) lacks: its code would not run here")
        name, llvm_features, source = cpu, "", "KILN_CPU"
    if all(f in features for f in _AVX512) and machine in ("x86_64", "amd64"):
        llvm_features = ",".join(filter(None, (llvm_features, FULL_WIDTH)))
    linux = system.startswith("linux")
    spin = (_os(system), machine) in SPIN_PLATFORMS and config.env_flag("KILN_SPIN_POOL", True)
    numpy_blas = _numpy_blas() if numpy_blas is None else numpy_blas
    private = (linux and hasattr(os, "memfd_create") and hasattr(os, "RTLD_DEEPBIND")
               and "openblas" in numpy_blas.lower()
               and config.env_choice("KILN_BLAS", _BLAS_SETTINGS, "auto") != "numpy")
    return CpuTarget(name, features, llvm_features, source, system, machine, spin, private,
                     numpy_blas)


#: (OS, machine) -> the name of the platform whose spin engine ``spin_pool.py`` generates:
#: its IR holds x86-64 Linux's futex syscall number (202) and x86's ``pause`` hint. aarch64
#: Linux would need futex 98, the ``yield`` hint and the virtual counter (``cntvct_el0``; its
#: cycle counter traps in user space) in place of ``llvm.readcyclecounter``, and a spin
#: measured in counter ticks: not generated, as no aarch64 host runs kiln's tests; it stays on
#: the portable workers, as every other platform.
SPIN_PLATFORMS = {("linux", "x86_64"): "x86-64 Linux", ("linux", "amd64"): "x86-64 Linux"}


def _os(system: str) -> str:
    """``sys.platform``'s OS family: ``linux`` for every ``linux*``."""
    return "linux" if system.startswith("linux") else system


_lock = threading.Lock()
_process: list[CpuTarget] = []
_override: list[CpuTarget] = []


def process() -> CpuTarget:
    """The CPU this process generates code for (built once, on first call; numba is pointed
    at it before its first compile)."""
    if not _process:
        with _lock:
            if not _process:
                target = build()
                if target.source == "KILN_CPU":
                    _point_numba(target)
                _process.append(target)
    return _process[0]


def _point_numba(target: CpuTarget) -> None:
    os.environ["NUMBA_CPU_NAME"] = target.name
    os.environ["NUMBA_CPU_FEATURES"] = target.llvm_features
    numba_config: Any = sys.modules.get("numba.core.config")
    if numba_config is not None:  # numba already imported: its settings too
        numba_config.CPU_NAME = target.name
        numba_config.CPU_FEATURES = target.llvm_features


def current() -> CpuTarget:
    """The target kernel choices follow: :func:`process`, or the one a test set with
    :func:`use`."""
    return _override[-1] if _override else process()


@contextlib.contextmanager
def use(target: CpuTarget) -> Iterator[CpuTarget]:
    """Kernel choices follow ``target`` inside the block (code is still generated for
    :func:`process`: a test may pick AVX-512's kernels on an AVX2 host, whose code LLVM
    legalizes to 8 lanes).

    Example:
        >>> with use(build("x86-64-v3")):   # AVX2's kernels on an AVX-512 host
        ...     ...
    """
    _override.append(target)
    try:
        yield target
    finally:
        _override.remove(target)


def named(cpu: str, check_host: bool = True) -> CpuTarget:
    """A target for the LLVM cpu ``cpu`` with this platform's choices; ``check_host=False``
    skips the check that the host has its features (for :func:`use`, kernel choices only)."""
    if check_host:
        return build(cpu)
    return build(cpu, host=("any", dict.fromkeys(cpu_features(cpu), True)))
