"""Fixtures shared by the BLAS tests."""

from __future__ import annotations

import os

import pytest

from kiln.core.backends.cpu.gemm import blas


@pytest.fixture(scope="module")
def numpy_core() -> str:
    """The core of NumPy's OpenBLAS, where a private copy of it can load here (else skip)."""
    found = blas._numpy_openblas()
    if found is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS")
    try:  # a sandbox may refuse anonymous memory files: kiln then keeps NumPy's BLAS
        os.close(os.memfd_create("kiln-test"))
    except (AttributeError, OSError) as exc:
        pytest.skip(f"no memory files here ({exc}): the copy cannot load")
    return blas._corename(found[1], found[2])
