"""Suite-wide settings, applied before any test module imports numba.

numba reads NUMBA_ENABLE_CUDASIM once, when it is first imported; the CUDA backend's tests
run on numba-cuda's simulator unless told otherwise (on a machine with a GPU run
``NUMBA_ENABLE_CUDASIM=0 python -m pytest tests/core/cuda``). The CPU kernels are unaffected.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
