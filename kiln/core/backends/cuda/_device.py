"""Finding a CUDA device: numba-cuda, the NVIDIA driver and a GPU (or the CUDA simulator).

Nothing here imports ``numba.cuda`` at module import: :func:`cuda_module` does, on first use,
after checking that the ``numba-cuda`` package is installed. Under ``NUMBA_ENABLE_CUDASIM=1``
numba-cuda's simulator counts as a device (kernels then run as Python threads: slow, for tests).
"""

from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

INSTALL = 'pip install "kiln-nn[cuda]"'
_CUDA_EXTRAS = ('pick the CUDA toolkit wheels that match your driver: pip install '
                '"numba-cuda[cu12]" (driver for CUDA 12) or "numba-cuda[cu13]" (CUDA 13)')
_ALTERNATIVES = ('To run on the CPU instead, use backend="cpu"; to test without a GPU, set '
                 'NUMBA_ENABLE_CUDASIM=1 (numba-cuda\'s simulator) before importing kiln.')


class CudaUnavailableError(RuntimeError):
    """The cuda backend cannot run here; ``reason`` says why.

    Attributes:
        reason: ``"numba-cuda"`` (the package is missing or broken), ``"driver"`` (no usable
            NVIDIA driver), ``"gpu"`` (the driver sees no GPU) or ``"toolkit"`` (NVVM/libdevice,
            which compile the kernels, are missing).
    """

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _missing_numba_cuda(detail: str) -> CudaUnavailableError:
    return CudaUnavailableError(
        "numba-cuda",
        "kiln's cuda backend needs the numba-cuda package, which is not installed "
        f"({detail}). Install it with: {INSTALL}  (and {_CUDA_EXTRAS}). {_ALTERNATIVES}")


def _no_driver(detail: str) -> CudaUnavailableError:
    return CudaUnavailableError(
        "driver",
        "kiln's cuda backend found numba-cuda but no usable NVIDIA driver "
        f"({detail.strip() or 'the CUDA driver library libcuda could not be loaded'}). "
        "Install the NVIDIA driver for your GPU (check with `nvidia-smi`), make sure libcuda.so "
        f"is on the library path, or update the driver if it is too old. {_ALTERNATIVES}")


def _no_gpu(detail: str) -> CudaUnavailableError:
    return CudaUnavailableError(
        "gpu",
        "kiln's cuda backend found numba-cuda and the NVIDIA driver, but no CUDA GPU "
        f"({detail.strip() or 'the driver reports 0 devices'}). Check that a GPU is present "
        "and visible (`nvidia-smi`; CUDA_VISIBLE_DEVICES must not hide it). " + _ALTERNATIVES)


def _no_toolkit(detail: str) -> CudaUnavailableError:
    return CudaUnavailableError(
        "toolkit",
        "kiln's cuda backend found a GPU, but the CUDA compiler libraries (NVVM and libdevice) "
        f"that numba-cuda needs are missing ({detail.strip() or 'NVVM is not available'}); "
        f"{_CUDA_EXTRAS}. {_ALTERNATIVES}")


def cuda_module() -> Any:
    """``numba.cuda``, imported on first use; raises :class:`CudaUnavailableError` with the
    install command when numba-cuda is missing."""
    try:
        importlib.import_module("numba_cuda")
    except ImportError as exc:
        raise _missing_numba_cuda(f"import numba_cuda failed: {exc}") from None
    try:
        cuda = importlib.import_module("numba.cuda")
    except ImportError as exc:  # e.g. the cuda-python bindings are missing
        raise _missing_numba_cuda(f"import numba.cuda failed: {exc}") from None
    if getattr(cuda, "implementation", "NVIDIA") != "NVIDIA":  # pragma: no cover
        raise _missing_numba_cuda("numba's deprecated built-in CUDA target was found instead")
    return cuda


def simulator_enabled() -> bool:
    """True when numba-cuda runs its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    try:
        from numba.cuda.core import config  # numba-cuda's own config

        return bool(config.ENABLE_CUDASIM)
    except ImportError:
        return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@dataclass(frozen=True)
class DriverState:
    """What the driver reports: an initialization error (None when fine), the number of GPUs
    and whether NVVM (the kernel compiler) is available."""

    error: str | None
    gpus: int
    nvvm: bool
    nvvm_error: str = ""


def driver_state(cuda: Any) -> DriverState:
    """Asks numba-cuda about the driver, the GPUs and NVVM (never raises)."""
    try:
        ok = bool(cuda.is_available())
    except Exception as exc:  # pragma: no cover - is_available does not raise normally
        return DriverState(str(exc), 0, False)
    error = cuda.cuda_error() if hasattr(cuda, "cuda_error") else None
    if error:
        return DriverState(str(error), 0, False)
    try:
        gpus = len(cuda.gpus)
    except Exception as exc:
        return DriverState(str(exc), 0, False)
    nvvm_ok, nvvm_error = ok, ""
    if not ok and gpus:
        try:
            from numba.cuda.cudadrv import nvvm

            nvvm_ok = bool(nvvm.is_available())
        except Exception as exc:  # pragma: no cover
            nvvm_ok, nvvm_error = False, str(exc)
    return DriverState(None, gpus, nvvm_ok, nvvm_error)


def classify(state: DriverState) -> CudaUnavailableError | None:
    """The error to raise for a driver state (None when the device is usable)."""
    if state.error:
        text = state.error.lower()
        if "no_device" in text or "(100)" in text or "no cuda-capable device" in text:
            return _no_gpu(state.error)
        return _no_driver(state.error)
    if state.gpus == 0:
        return _no_gpu("")
    if not state.nvvm:
        return _no_toolkit(state.nvvm_error)
    return None


_checked: dict[str, Any] = {}


def check_available() -> Any:
    """Returns ``numba.cuda`` when kernels can run (a GPU, or the simulator); otherwise raises
    :class:`CudaUnavailableError` saying which of numba-cuda, the driver, the GPU or the
    toolkit is missing, and how to fix it."""
    cuda = cuda_module()
    if simulator_enabled():
        return cuda
    if "ok" in _checked:
        return cuda
    problem = classify(driver_state(cuda))
    if problem is not None:
        raise problem
    _checked["ok"] = True
    return cuda


def is_available() -> bool:
    """Whether the cuda backend can run here (the simulator counts)."""
    try:
        check_available()
    except CudaUnavailableError:
        return False
    return True


def real_gpu_available() -> bool:
    """Whether a real NVIDIA GPU (not the simulator) can run kernels."""
    try:
        check_available()
    except CudaUnavailableError:
        return False
    return not simulator_enabled()


# ---- launch configuration ------------------------------------------------------------------
@dataclass(frozen=True)
class LaunchConfig:
    """Block sizes: large on a GPU; tiny under the simulator, where every thread is a Python
    thread (kernels loop with grid strides, so any grid covers any size)."""

    threads: int        # threads per block of 1-D kernels
    max_blocks: int     # grid cap of 1-D kernels (they loop)
    tree: int           # threads per block of block-per-row tree reductions (a power of two)
    max_rows: int       # grid cap of block-per-row kernels (they loop over rows)
    tile: int           # GEMM tile edge (shared-memory tiles of tile x tile)
    fill_blocks: int    # GEMM grids smaller than this use smaller tiles / split K
    micro: tuple[int, ...]  # register micro-tile edges to choose from, largest first


REAL = LaunchConfig(threads=256, max_blocks=65535 * 4, tree=256, max_rows=65535, tile=16,
                    fill_blocks=256, micro=(4, 2, 1))
SIM = LaunchConfig(threads=8, max_blocks=2, tree=4, max_rows=2, tile=4, fill_blocks=4,
                   micro=(2,))


def launch_config() -> LaunchConfig:
    return SIM if simulator_enabled() else REAL


def blocks_for(n: int, cfg: LaunchConfig) -> int:
    return max(1, min(-(-n // cfg.threads), cfg.max_blocks))


# ---- the simulator's math: NumPy scalar functions, so that float32 stays float32 and
# domain errors give inf/nan (as on a GPU) instead of raising ----------------------------------
class _SimMath:
    """Stands in for ``math`` in generated kernel modules under the simulator."""

    def __init__(self) -> None:
        for name in ("exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tan", "tanh",
                     "floor", "ceil", "fabs", "sinh", "cosh", "arctan", "log2", "log10",
                     "exp2"):
            if hasattr(np, name):
                setattr(self, name, getattr(np, name))
        self.atan = np.arctan
        self.isnan = np.isnan
        self.isinf = np.isinf
        self.isfinite = np.isfinite
        self.pow = np.power

    def __getattr__(self, name: str) -> Any:
        return getattr(math, name)


SIM_MATH = _SimMath()
