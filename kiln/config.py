"""Global settings and environment switches.

Environment variables (read when kiln is imported; the setters below change them later):
    KILN_BACKEND   default backend for compiled functions: "cpu" (compiled kernels) or
                   "reference".
    KILN_JIT=0     run every generated kernel as plain Python (debugging).
    KILN_NATIVE=0  compile the generated loops (and the hand-written kernels' native twins)
                   with numba instead of from LLVM IR (backends/cpu/codegen/native.py).
    KILN_WINOGRAD  CPU float32 3x3 / 1x3 / stride-2 4x4 convolutions: 4 (default) Winograd
                   F(4x4, 3x3), 2 F(2x2, 3x3), 0 im2col + GEMM
                   (backends/cpu/kernels/conv/winograd.py; read when a plan is built).
    KILN_BLAS      the BLAS of the CPU backend's GEMMs: auto (default: a private copy of
                   NumPy's OpenBLAS, with NumPy's kernels or AVX-512 ones where NumPy's picked
                   AVX2 ones on an AVX-512 CPU by itself), numpy, or an OpenBLAS core name
                   (backends/cpu/gemm/blas.py).
    KILN_DEBUG=1   verify graph invariants after every optimization pass.
    KILN_CACHE_DIR where generated kernel source, native object files and numba's cache live
                   (~/.cache/kiln; created with mode 0700, checked on every load:
                   docs/architecture.md).
    KILN_DEVICE    "cpu" (default), "cuda" or "auto".
    KILN_PROFILE=1 print time per kernel after each compiled call.
"""

from __future__ import annotations

import os

_FLOATX = "float32"


def floatx() -> str:
    """The default float dtype of layers and weights ("float32")."""
    return _FLOATX


def set_floatx(dtype: str) -> None:
    global _FLOATX
    if dtype not in ("float32", "float64"):
        raise ValueError(f"set_floatx: expected 'float32' or 'float64', received {dtype!r}")
    _FLOATX = dtype


def env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("0", "", "false", "no", "off")


def default_backend() -> str:
    return os.environ.get("KILN_BACKEND", "cpu")


def jit_enabled() -> bool:
    return env_flag("KILN_JIT", True)


def debug_enabled() -> bool:
    return env_flag("KILN_DEBUG", False)


def profile_enabled() -> bool:
    return env_flag("KILN_PROFILE", False)


def cache_dir() -> str:
    return os.environ.get("KILN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kiln")


def device() -> str:
    return os.environ.get("KILN_DEVICE", "cpu")
