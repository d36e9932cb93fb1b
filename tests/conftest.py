"""Suite-wide settings, applied before any test module imports numba.

numba reads NUMBA_ENABLE_CUDASIM once, when it is first imported; the CUDA backend's tests
run on numba-cuda's simulator unless told otherwise (on a machine with a GPU run
``NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/core/cuda``). The CPU kernels are unaffected.

Keras (an optional oracle: tests that use it skip without it) picks its backend once, when it
is first imported, so every test module gets the same one: TensorFlow where it is installed
(the preprocessing oracles need its string tensors and tf.data), else Keras' NumPy backend.
"""

import importlib.util
import os

import pytest

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow" if importlib.util.find_spec("tensorflow")
                      else "numpy")
# Kernels split as planned whatever the machine's load (KILN_CONTENTION=auto would run them
# serially on a busy CI runner and give the private OpenBLAS fewer threads, whose products
# differ in the last bits: tests comparing runs bit for bit would then depend on the load).
# tests/core/backends/test_contention.py sets the modes it tests.
os.environ.setdefault("KILN_CONTENTION", "off")


@pytest.fixture
def cpu_options():
    """Sets fields of the CPU backend's options for one test, in place of patching a module:
    ``cpu_options(serial_work=0)`` (``options.use(replace(options.current(), ...))``,
    kiln/core/backends/cpu/options.py); each call adds to the last; all restored after."""
    import contextlib
    import dataclasses

    from kiln.core.backends.cpu import options

    with contextlib.ExitStack() as stack:
        def set_fields(**fields):
            return stack.enter_context(options.use(dataclasses.replace(options.current(),
                                                                       **fields)))

        yield set_fields


@pytest.fixture
def pass_options():
    """Sets the passes' thresholds for one test: ``pass_options(fuse_tail_min_elements=0)``
    (``kiln/core/passes/_util.py``, ``PassOptions``); each call adds to the last; restored
    after."""
    import contextlib
    import dataclasses

    from kiln.core.passes import _util

    with contextlib.ExitStack() as stack:
        def set_fields(**fields):
            return stack.enter_context(_util.using(dataclasses.replace(_util.options(),
                                                                        **fields)))

        yield set_fields
