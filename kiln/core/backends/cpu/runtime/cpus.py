"""The CPUs kiln's workers run on: how many threads a split kernel uses
(:func:`kernel_threads`), the CPU the calling thread is on (:func:`current_cpu`) and moving
sleeping workers off a CPU (:func:`move_off`), for kiln's pools (``threads``, ``spin_pool``) and
OpenBLAS's workers (``gemm.blas.place``). Imports nothing of the backend.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence


def kernel_threads() -> int:
    """Threads a split kernel uses: ``KILN_NUM_THREADS``, else numba's configured count (the
    CPUs this process may use, or ``NUMBA_NUM_THREADS``); 1 when kernels run as Python."""
    from kiln import config

    if not config.jit_enabled():
        return 1
    n = config.env_positive_int("KILN_NUM_THREADS")
    if n is not None:
        return n
    # numba's own default (numba.config.NUMBA_NUM_THREADS), without importing numba
    raw = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def _cpu_reader() -> Callable[[], int]:
    """A function returning the CPU the calling thread runs on (glibc's ``sched_getcpu``, a
    vDSO read), or -1 where there is none."""
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError, TypeError):  # no libc symbol (not glibc), or Windows
        return lambda: -1
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


current_cpu = _cpu_reader()


def move_off(workers: Sequence[tuple[int, frozenset[int]]], cpu: int) -> bool:
    """Sets the affinity of each thread ``(native id, CPUs it started with)`` of ``workers``
    to those CPUs but ``cpu`` (kept where that leaves none). A sleeping thread is then woken
    on another CPU than its waker's (kiln's pool here, OpenBLAS's workers in blas.place).
    False where a thread no longer exists."""
    for tid, allowed in workers:
        others = allowed - {cpu}
        if others:
            try:
                os.sched_setaffinity(tid, others)
            except ProcessLookupError:
                return False
            except OSError:  # the CPUs allowed changed: the thread stays where it is
                pass
    return True
