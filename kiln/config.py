"""Global settings and environment switches.

Every ``KILN_*`` environment variable kiln reads is listed, with its values, in
docs/configuration.md (tests/test_configuration.py keeps that page and the code in step); the
readers below raise a ValueError naming the variable when its value is bad.

Environment variables (read when kiln is imported; the setters below change them later):
    KILN_BACKEND   default backend for compiled functions: "cpu" (compiled kernels) or
                   "reference".
    KILN_JIT=0     run every generated kernel as plain Python (debugging); the ops whose one
                   kernel is native run their NumPy references (as with KILN_NATIVE=0).
    KILN_NATIVE=0  compile the generated loops with numba instead of from LLVM IR, and run the
                   ops whose one kernel is native (conv, pooling, softmax rows ...) on their
                   NumPy references (backends/cpu/codegen/native.py).
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


def set_floatx(value: str) -> None:
    global _FLOATX
    if value not in ("float32", "float64"):
        raise ValueError(f"set_floatx: expected 'float32' or 'float64', received {value!r}")
    _FLOATX = value


_FALSE = ("0", "", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")


def env_flag(name: str, default: bool = False) -> bool:
    """The switch ``name``: 1/true/yes/on or 0/false/no/off (or empty); ``default`` unset.

    Raises:
        ValueError: another value, naming the variable and the value received.
    """
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in _FALSE:
        return False
    if word in _TRUE:
        return True
    raise ValueError(f"{name} must be 0 or 1 (or false/true, no/yes, off/on), got {value!r}")


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """The setting ``name`` (case-insensitive), one of ``choices``; ``default`` unset or empty.

    Raises:
        ValueError: another value, naming the variable, the choices and the value received.
    """
    value = os.environ.get(name, "")
    word = value.strip().lower()
    if not word:
        return default
    if word not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return word


def env_positive_int(name: str) -> int | None:
    """The positive integer ``name``, or None unset or empty.

    Raises:
        ValueError: ``"KILN_NUM_THREADS must be a positive integer, got '0'"``.
    """
    value = os.environ.get(name, "")
    if not value.strip():
        return None
    try:
        n = int(value.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return n


def env_positive_float(name: str, default: float) -> float:
    """The positive number ``name`` (seconds ...), ``default`` unset or empty.

    Raises:
        ValueError: not a number > 0, naming the variable and the value received.
    """
    value = os.environ.get(name, "")
    if not value.strip():
        return default
    try:
        x = float(value.strip())
    except ValueError:
        x = float("nan")
    if not x > 0 or x == float("inf"):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return x


def env_url(name: str) -> str | None:
    """The base URL ``name`` (http, https or file), or None unset or empty.

    Raises:
        ValueError: not such a URL, naming the variable and the value received.
    """
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https", "file") or not rest.strip("/"):
        raise ValueError(f"{name} must be an http://, https:// or file:// URL, got {value!r}")
    return value


def default_backend() -> str:
    return env_choice("KILN_BACKEND", ("cpu", "reference", "cuda"), "cpu")


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
    return env_choice("KILN_DEVICE", ("cpu", "cuda", "auto"), "cpu")
