"""The cuda backend: kiln graphs on NVIDIA GPUs through numba-cuda.

``kiln.function(..., backend="cuda")`` (or ``get_backend("cuda")``) imports this package; it
imports ``numba.cuda`` only when a graph is compiled, and raises
:class:`CudaUnavailableError` saying whether numba-cuda (``pip install "kiln-nn[cuda]"``), the
NVIDIA driver, a GPU or the CUDA toolkit libraries are missing. With
``NUMBA_ENABLE_CUDASIM=1`` numba-cuda's simulator stands in for a GPU (slow: for tests).

What runs on the device:

* kernels generated from the ops' scalar bodies for every elementwise op and ``fused`` node
  (NumPy broadcasting through strides), including fused reduction epilogues;
* reductions (sum, mean, max, min, prod, logsumexp, argmax, argmin): a block per output row
  with a shared-memory tree, or a thread per row when the reduced axes are short or leading;
* GEMM: shared-memory tiles with register micro-tiles, or cuBLAS through CuPy when CuPy is
  installed (``KILN_CUDA_BLAS=auto|cupy|kiln``);
* conv2d and its two gradients as implicit GEMMs (the same tiles, the image gathered through
  the window arithmetic; split-K with atomic adds for the kernel gradient);
* softmax, log_softmax and both softmax cross-entropies (row kernels); max/avg pooling and
  their gradients (direct kernels); take, take_grad (atomic adds),
  one_hot, concatenate, pad, slice_grad; random_uniform/random_normal (the reference's
  SplitMix64 streams, bit for bit);
* movement ops (reshape, transpose, broadcast, expand_dims, squeeze, slice) as strided views,
  copied only when a kernel needs contiguous data.

Any other op runs its NumPy reference on the host, with a one-time warning.

Params (Variables) live on the device across calls; see :mod:`._resident` for how host reads
see the newest values, and :func:`sync_to_host` to copy them back explicitly.

Example:
    >>> f = kiln.function([x, y], loss, updates=sgd_updates, backend="cuda")
    >>> f(xb, yb)                       # weights stay on the GPU between calls
    >>> kiln.core.backends.cuda.sync_to_host()
"""

from __future__ import annotations

from kiln.core.backends.cuda._device import (
    CudaUnavailableError,
    check_available,
    is_available,
    real_gpu_available,
    simulator_enabled,
)
from kiln.core.backends.cuda._program import CudaProgram, compile_graph, ops_with_kernels
from kiln.core.backends.cuda._resident import sync_to_host
from kiln.core.ops.registry import KERNELS

KERNELS["cuda"] = ops_with_kernels()


def device_info() -> dict:
    """A description of the device the backend uses (raises when none is usable)."""
    cuda = check_available()
    if simulator_enabled():
        return {"name": "CUDA simulator", "simulator": True}
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return {"name": name, "simulator": False, "compute_capability": dev.compute_capability,
            "multiprocessors": dev.MULTIPROCESSOR_COUNT}


__all__ = ["compile_graph", "CudaProgram", "CudaUnavailableError", "check_available",
           "is_available", "real_gpu_available", "simulator_enabled", "sync_to_host",
           "device_info", "ops_with_kernels"]
