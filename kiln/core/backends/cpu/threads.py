"""Thread pools: numba's kernels and NumPy's BLAS take turns on the same cores.

Both pools spin after their work for a while, stealing the cores from the other one when
kernels and GEMMs alternate (measured: a prange kernel, a GEMM and another prange kernel back to
back took 20 ms with numba's default OpenMP settings, 12 ms with passive waiting):

* numba's OpenMP threads: ``OMP_WAIT_POLICY=PASSIVE`` (set here, before numba starts its pool)
  makes them sleep after a parallel region;
* OpenBLAS's worker threads busy-wait 2^28 cycles (~0.1 s) after each call by default, so a
  parallel numba kernel right after a GEMM shares its second core with a spinning thread. The
  spin is set by ``OPENBLAS_THREAD_TIMEOUT`` (2^n cycles), which OpenBLAS reads when it starts
  its threads: unless the user set it, :func:`configure` sets it to :data:`BLAS_TIMEOUT` and,
  when NumPy's OpenBLAS is already loaded, has it re-read the environment and restart its
  threads (both exported OpenBLAS functions), so the next GEMM runs with the shorter spin.

Measured with benchmarks/bench_cpu.py on 2 cores: the MNIST convnet step 26.3 -> 21.6 ms
with 2^20 cycles instead of 2^28, the MLP steps unchanged (the spin still covers the gaps
between their GEMMs). Shorter spins looked free in a process alone (2^18: convnet epoch
0.561 against 0.577 s, MLP equal) but lose when other processes share the machine, even idle
ones (benchmarks/bench_cpu.py's interleaved workers): the MLP step against its GEMMs alone
1.56-1.60x with 2^18 against 1.19-1.28x with 2^20 (two runs each). Waking a sleeping BLAS
thread is slow on a busy VM; keep 2^20.
"""

from __future__ import annotations

import ctypes
import os

BLAS_TIMEOUT = 20  # 2^20 cycles: ~0.35 ms at 3 GHz

status: dict[str, object] = {}


def _openblas() -> ctypes.CDLL | None:
    """The OpenBLAS library loaded in this process (NumPy's), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()
                     and ".so" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if all(hasattr(lib, s) for s in ("openblas_read_env", "openblas_thread_timeout",
                                         "blas_thread_shutdown_")):
            return lib
    return None


def configure() -> dict[str, object]:
    """Sets up both thread pools as described in the module docstring (once; idempotent)."""
    if status:
        return status
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    status["omp_wait_policy"] = os.environ["OMP_WAIT_POLICY"]
    if "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        status["openblas_thread_timeout"] = f"{os.environ['OPENBLAS_THREAD_TIMEOUT']} (user)"
        return status
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(BLAS_TIMEOUT)
    lib = _openblas()
    if lib is None:  # not loaded yet (it reads the variable when it starts) or not OpenBLAS
        status["openblas_thread_timeout"] = f"{BLAS_TIMEOUT} (environment)"
        return status
    lib.openblas_read_env.restype = None
    lib.openblas_thread_timeout.restype = ctypes.c_int
    lib.blas_thread_shutdown_.restype = ctypes.c_int
    lib.openblas_read_env()
    if lib.openblas_thread_timeout() == BLAS_TIMEOUT:
        lib.blas_thread_shutdown_()  # the next call restarts the threads with the new spin
        status["openblas_thread_timeout"] = f"{BLAS_TIMEOUT} (threads restarted)"
    else:
        status["openblas_thread_timeout"] = "unchanged"
    return status
