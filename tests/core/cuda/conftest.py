"""The cuda backend's tests run under numba-cuda's simulator unless told otherwise.

NUMBA_ENABLE_CUDASIM must be set before ``numba.cuda`` is first imported, so it is set here, at
collection. On a machine with a GPU, run ``NUMBA_ENABLE_CUDASIM=0 pytest tests/core/cuda`` to
run the same tests (and the ``cuda``-marked ones) on the device.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")


def pytest_collection_modifyitems(config, items):
    try:
        from kiln.core.backends.cuda import real_gpu_available

        real = real_gpu_available()
    except Exception:  # noqa: BLE001 - numba-cuda missing: the modules skip themselves
        real = False
    if real:
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU (run with NUMBA_ENABLE_CUDASIM=0)")
    for item in items:
        if "cuda" in item.keywords and item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)
