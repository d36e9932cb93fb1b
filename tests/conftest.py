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

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow" if importlib.util.find_spec("tensorflow")
                      else "numpy")
# Kernels split as planned whatever the machine's load (KILN_CONTENTION=auto would run them
# serially on a busy CI runner and give the private OpenBLAS fewer threads, whose products
# differ in the last bits: tests comparing runs bit for bit would then depend on the load).
# tests/core/backends/test_contention.py sets the modes it tests.
os.environ.setdefault("KILN_CONTENTION", "off")
