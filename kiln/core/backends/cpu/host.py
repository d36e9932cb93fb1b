"""The host CPU's features, read once from LLVM's view of the host: what the kernels'
choices (``kernels.conv.conv.TILE64``, ``gemm.native_matmul.AVX512``) depend on. Imports
nothing of the backend.
"""

from __future__ import annotations


def has_avx512() -> bool:
    """Whether this CPU has AVX-512 (``avx512f``, as LLVM sees the host); False where that
    cannot be told (the portable path)."""
    try:
        import llvmlite.binding as llvm

        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except (ImportError, AttributeError, RuntimeError, OSError):  # cannot tell: portable path
        return False
