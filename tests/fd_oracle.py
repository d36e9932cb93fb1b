"""The finite-difference oracle shared by the gradient tests (importable as ``fd_oracle``:
pytest puts ``tests/`` on the path through its conftest)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def numeric_grad(f: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central finite differences of ``f()`` with respect to every element of ``x``, which
    ``f`` reads (``x`` is perturbed in place, one element at a time, and restored). Use float64
    arrays."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        hi = f()
        flat[i] = old - eps
        lo = f()
        flat[i] = old
        gflat[i] = (hi - lo) / (2 * eps)
    return g
