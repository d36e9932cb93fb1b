"""Thread pools: kiln's kernel threads (``SplitCall``, ``POOL``: serial kernels run on parts
of their work, docs/architecture.md "Threads"), and the settings of the pools that share the
cores with them. Kernels never use this module: they describe their parts to
``runtime.parts`` (the worker API), which builds the ``SplitCall`` steps.

numba's kernels and NumPy's BLAS take turns on the same cores.

Both pools spin after their work for a while, stealing the cores from the other one when
kernels and GEMMs alternate (measured: a prange kernel, a GEMM and another prange kernel back to
back took 20 ms with numba's default OpenMP settings, 12 ms with passive waiting):

* numba's OpenMP threads: ``OMP_WAIT_POLICY=PASSIVE`` (set here, before numba starts its pool)
  makes them sleep after a parallel region (kiln's kernels no longer start that pool, a
  user's own ``parallel=True`` numba code still may; kiln's threads sleep on a queue);
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
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# kernel_threads (cpus.py) is read through this module by the worker API (runtime.parts)
# and by tests, so that one setting reaches every split kernel.
from kiln.core.backends.cpu.runtime.cpus import (  # noqa: F401
    current_cpu,
    kernel_threads,
    move_off,
    plan,
)

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


# ---- kiln's kernel threads ---------------------------------------------------------------------
# A kernel that pays for threads is compiled serial (numba ``parallel=True`` costs 3-4x the
# compile time of the same loop serial: the LSTM model's Adam update over a 20,000 x 128
# embedding 2.3 s against 0.67 s) and run here on disjoint parts of its iteration space, one
# part per thread, the calling thread taking the first (docs/architecture.md, "Threads").
# Kernels release the GIL (``nogil=True``), so the parts run at once.


class _Done:
    """Counts the parts of one split call still running; keeps the first error and the CPU
    the caller ran on when it handed the parts out (-1: unknown)."""

    __slots__ = ("left", "lock", "event", "error", "cpu")

    def __init__(self, left: int, cpu: int = -1):
        self.left = left
        self.lock = threading.Lock()
        self.event = threading.Event()
        self.error: BaseException | None = None
        self.cpu = cpu

    def finish(self, error: BaseException | None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            if self.left == 0:
                self.event.set()


def _run_part(fn: Callable, args: tuple, done: _Done) -> None:
    try:
        fn(*args)
    except BaseException as e:  # handed to the caller, which raises it
        done.finish(e)
    else:
        done.finish(None)


def in_order(calls: Sequence[tuple[Callable, tuple]]) -> None:
    """Runs every ``fn(*args)`` of ``calls`` on the calling thread, in order, each even where
    one before it failed (as on the pool); raises the first error."""
    error: BaseException | None = None
    for fn, args in calls:
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - raised once every part has run
            error = error or e
    if error is not None:
        raise error


class KernelPool:
    """Worker threads that run the parts of split kernel calls (started on first use, again
    in a forked child: threads do not survive ``fork``).

    A Linux guest whose other virtual CPUs have idled a while may wake a worker on the
    caller's CPU, where it waits while the caller runs its own part: the parts then run one
    after the other (docs/architecture.md, "Threads"). So the caller moves the workers off
    its CPU before it hands parts out (:func:`move_off`: each worker's affinity becomes the
    CPUs it started with but that one), whenever it runs on another CPU than at its last
    split call; and a worker that still finds itself on that CPU when it takes a part (the
    caller moved meanwhile, or another caller placed it) moves off it itself.
    """

    def __init__(self, follow_load: bool = False) -> None:
        self.follow_load = follow_load  # run the parts in order on a busy machine (POOL)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        self.workers: list[tuple[int, frozenset[int]]] = []  # (native id, CPUs at start)
        self.placed_for = -1  # the caller's CPU at the last placement

    def _work(self, started: threading.Event) -> None:
        try:
            allowed = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            allowed = set()
        if len(allowed) > 1:
            self.workers.append((threading.get_native_id(), frozenset(allowed)))
        started.set()
        while True:
            item = self._queue.get()
            caller = item[2].cpu
            if caller >= 0 and len(allowed) > 1 and current_cpu() == caller:
                try:
                    os.sched_setaffinity(0, allowed - {caller})
                except OSError:  # the CPUs allowed changed under us: run where we are
                    pass
            _run_part(*item)

    def _ensure(self, n: int) -> None:
        if len(self._threads) >= n:
            return
        with self._start_lock:
            while len(self._threads) < n:
                started = threading.Event()
                t = threading.Thread(target=self._work, args=(started,), daemon=True,
                                     name=f"kiln-kernel-{len(self._threads)}")
                t.start()
                started.wait()  # known to run() before it hands a part out
                self._threads.append(t)
            self.placed_for = -1

    def run(self, calls: Sequence[tuple[Callable, tuple]], follow_load: bool = True) -> None:
        """Runs every ``fn(*args)`` of ``calls`` (independent parts of one kernel call), the
        first in the calling thread, the others on the pool; returns when all are done and
        raises the first error of any part. A waiting caller runs queued parts itself, so
        concurrent callers always make progress. A pool that follows the load (``POOL``) has
        the caller run every part, in order, on a busy machine (:func:`cpus.plan` gives one
        thread): the same parts, the same bits. ``follow_load=False``: on the workers whatever
        the load (a split call forced onto this engine)."""
        if len(calls) == 1 or (self.follow_load and follow_load and plan().threads == 1):
            in_order(calls)
            return
        _park_spinning()  # this pool's workers need the cores the spin engine's may hold
        self._ensure(len(calls) - 1)
        cpu = current_cpu()
        if cpu >= 0 and cpu != self.placed_for:
            self.placed_for = cpu
            move_off(self.workers, cpu)
        done = _Done(len(calls) - 1, cpu)
        for fn, args in calls[1:]:
            self._queue.put((fn, args, done))
        fn, args = calls[0]
        interrupted: BaseException | None = None
        try:
            fn(*args)
        finally:
            # every part has finished before this returns, even when the caller is
            # interrupted (KeyboardInterrupt): a part still writing into the plan's buffers
            # during the next call would be a silent wrong result
            while not done.event.is_set():
                try:
                    part = self._queue.get_nowait()
                except queue.Empty:
                    try:
                        done.event.wait()
                    except BaseException as e:  # noqa: BLE001 - re-raised once all are done
                        interrupted = interrupted or e
                    continue
                _run_part(*part)
            if interrupted is not None:
                raise interrupted
        if done.error is not None:
            raise done.error

    def reset(self) -> None:
        """Forgets the threads and queued parts (in a forked child)."""
        self._queue = queue.SimpleQueue()
        self._threads = []
        self._start_lock = threading.Lock()
        self.workers = []
        self.placed_for = -1


POOL = KernelPool(follow_load=True)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL.reset)


#: the engines a split call runs on (``runtime.parts.add_parts``' ``engine``): the caller
#: alone, in order; ``KernelPool``'s portable Python workers; ``spin_pool``'s native workers
ENGINES = ("serial", "portable", "spin")


_PARK: list[Callable[[], None]] = []


def _park_spinning() -> None:
    """Sends the spin engine's workers that still spin after their last part (pausing for
    up to ``spin_pool.SPIN_CYCLES``, never yielding) to sleep: this pool's Python workers
    run next, on the same cores (the next split call on the spin engine wakes them). Conv1D's
    training step, whose Winograd pipelines run here between split loops on the spin engine:
    new/old 0.79-0.89x before (docs/performance.md, "Contention")."""
    if not _PARK:
        from kiln.core.backends.cpu.runtime import spin_pool

        _PARK.append(spin_pool.POOL.park)
    _PARK[0]()


class SplitCall:
    """A plan step that runs the serial kernel ``entry`` on parts of its work at once: called
    with the step's arguments, it calls ``entry`` once per part with those arguments changed
    by ``change(args, k)`` (e.g. another parameter array: a range of the outer loop). Built
    by ``runtime.parts.add_parts`` (kernels describe their parts there). ``engine`` None:
    the spin pool where ``entry`` is a native kernel and the pool is on, else :data:`POOL`,
    the caller alone on a busy machine; one of :data:`ENGINES`: that one, whatever the load
    (``"spin"``: a native kernel the pool cannot take raises; other entries run on
    :data:`POOL`, as they would unforced)."""

    __slots__ = ("entry", "parts", "change", "engine", "sized", "_native", "_for")

    def __init__(self, entry: Callable, parts: int, change: Callable[[tuple, int], tuple],
                 engine: str | None = None, sized: bool = False):
        self.entry = entry
        self.parts = parts
        self.change = change
        self.engine = engine
        self.sized = sized  # its kernel chose the parts by its own rule (serial.py leaves it)
        self._native: Any = None  # (entry, header, generation, spin pool) for ``_for``
        self._for: Any = None

    def __call__(self, *args: Any) -> None:
        entry, change = self.entry, self.change
        calls = [change(args, k) for k in range(self.parts)]
        if self.engine is not None:
            self._forced(entry, calls)
            return
        found = self._native
        if self._for is not entry or (found is not None
                                      and found[2] != found[3].generation):
            found = self._bind(entry, calls)
        if plan().threads == 1:  # a busy machine: every part on the caller, in order
            in_order([(entry, c) for c in calls])
            return
        if found is not None:
            found[3].place()
            found[0](found[1], *[a for c in calls for a in c])
            return
        POOL.run([(entry, c) for c in calls])

    def _forced(self, entry: Callable, calls: list) -> None:
        """The parts on the engine :attr:`engine` names, whatever the load."""
        if self.engine == "serial":
            in_order([(entry, c) for c in calls])
        elif self.engine == "portable":
            POOL.run([(entry, c) for c in calls], follow_load=False)
        else:
            found = self._native
            if self._for is not entry or (found is not None
                                          and found[2] != found[3].generation):
                found = self._bind(entry, calls)
            if found is None:
                from kiln.core.backends.cpu.runtime import spin_pool

                if spin_pool.ENABLED and spin_pool.kernel_of(entry) is None:
                    POOL.run([(entry, c) for c in calls], follow_load=False)
                    return
                raise RuntimeError(f"SplitCall: the spin engine cannot run {entry!r} in "
                                   f"{self.parts} parts here (the engine is off: "
                                   "target.process().spin_engine; or more than "
                                   "spin_pool.MAX_ARRAYS arrays or parts than its slots)")
            found[3].place()
            found[0](found[1], *[a for c in calls for a in c])

    def _bind(self, entry: Callable, calls: list) -> Any:
        """The spin pool's entry and header where ``entry`` is a native kernel's entry point
        taking these parts' arrays (kiln/core/backends/cpu/runtime/spin_pool.py), else None
        (the parts go to :data:`POOL`)."""
        from kiln.core.backends.cpu.runtime import spin_pool

        self._for, self._native = entry, None
        kernel = spin_pool.kernel_of(entry)
        if kernel is None or any(len(c) != kernel[1] for c in calls) or not all(
                isinstance(a, np.ndarray) for c in calls for a in c):
            return None
        made = spin_pool.POOL.header(self.parts, kernel[0], kernel[1])
        if made is not None:
            self._native = (*made, spin_pool.POOL.generation, spin_pool.POOL)
        return self._native


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` (at most ``n``) contiguous ranges covering ``range(n)``, sizes within one."""
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for k in range(parts):
        hi = lo + base + (1 if k < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out
