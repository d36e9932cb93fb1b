"""cuBLAS GEMMs through CuPy, when it is installed: the cuda backend's matmul runs on them
(``KILN_CUDA_BLAS=auto|cupy|kiln``), else on kiln's own GEMM kernel (``_kernels.py``); see
docs/architecture.md, "Backends"."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln.core.layout import Layout


class _Blas:
    """cuBLAS GEMMs through CuPy (``KILN_CUDA_BLAS=auto|cupy|kiln``; auto: CuPy when it imports
    and a real GPU runs). Any CuPy failure switches to kiln's own GEMM, with a warning."""

    def __init__(self) -> None:
        self.cp: Any = None
        self.tried = False

    def get(self) -> Any:
        if self.tried:
            return self.cp
        self.tried = True
        from kiln import config

        choice = config.env_choice("KILN_CUDA_BLAS", ("auto", "cupy", "kiln"), "auto")
        from kiln.core.backends.cuda._device import simulator_enabled

        if choice == "kiln" or simulator_enabled():
            return None
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            self.cp = cupy
        except Exception as exc:  # noqa: BLE001 - CuPy is optional
            if choice == "cupy":
                warnings.warn(f"KILN_CUDA_BLAS=cupy but CuPy is unusable ({exc}); using kiln's "
                              "GEMM kernel", RuntimeWarning, stacklevel=2)
        return self.cp

    def disable(self, exc: Exception) -> None:
        warnings.warn(f"kiln cuda backend: CuPy's matmul failed ({exc}); using kiln's GEMM "
                      "kernel from now on", RuntimeWarning, stacklevel=3)
        self.cp = None

    def view(self, arr: Any, layout: Layout, dtype: str) -> Any:
        cp = self.cp
        item = np.dtype(dtype).itemsize
        ptr = arr.__cuda_array_interface__["data"][0]
        mem = cp.cuda.UnownedMemory(ptr, max(arr.size, 1) * item, arr)
        mp = cp.cuda.MemoryPointer(mem, layout.offset * item)
        return cp.ndarray(layout.shape, dtype, mp, strides=tuple(s * item for s in layout.strides))


BLAS = _Blas()
