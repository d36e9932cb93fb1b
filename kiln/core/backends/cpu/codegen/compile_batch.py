"""Compile batches: the kernels a plan needs are compiled together, in parallel processes
where it pays (docs/architecture.md, "The kernel cache").

Building a plan (``program.PlanBuilder.build``, the bodies of loops included) opens a
:func:`batch`. Inside it, :meth:`jit.Kernel.specialize` returns each signature not compiled
in this process yet as a :class:`Deferred` call and records it. When the outermost batch
closes:

1. the signatures that numba's disk cache already holds are loaded (a warm start forks
   nothing);
2. the others, grouped by kernel file (so that one process writes each numba index file),
   form units (the kernels calling ``scalars.py`` in one unit, which compiles those
   functions once), ordered by estimated cost, largest first (the source's length plus a
   fixed part; ties broken by the file name). When two units or more need compiling, the
   process forks :func:`workers` - 1 compile workers; it and they take the units in that
   order from one shared queue (a pipe holding their indices: each process takes the next
   unit when done with its last, so the processes finish together whatever the estimates'
   errors). A worker compiles its units into the checked disk cache
   (:mod:`kiln.core.backends.numba_cache`) and exits when the queue is empty. The parent then
   loads the workers' kernels from the cache; a worker that failed, or did not finish in
   time, costs only time: whatever the cache lacks is compiled by the parent;
3. every :class:`Deferred` gets its entry point; the plan's calls are rewritten to call the
   entry points directly.

Whichever process compiles a kernel, it is the same machine code from the same text, so the
results never depend on timing. Forking needs Linux and a writable cache; elsewhere, with
``KILN_COMPILE_WORKERS=1`` or a batch of one kernel file, the batch compiles serially.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kiln.core.backends.cpu import options

MAX_WORKERS = 4
MIN_TIMEOUT_S = 60.0  # the least a worker is waited for once the queue is empty

_state = threading.local()


class Deferred:
    """A kernel call whose compilation is batched: calls the entry point once it is known
    (compiling it on the spot if called before its batch closed)."""

    __slots__ = ("entry", "kernel", "sig")

    def __init__(self, kernel: Any, sig: tuple):
        self.kernel = kernel
        self.sig = sig
        self.entry: Callable | None = None

    def resolve(self, *, by_worker: bool = False) -> Callable:
        """The entry point (compiled, or loaded from the disk cache, now if not yet)."""
        if self.entry is None:
            self.entry = self.kernel.compile(self.sig, by_worker=by_worker)
        return self.entry

    def __call__(self, *args: Any) -> Any:
        entry = self.entry
        if entry is None:
            entry = self.resolve()
        return entry(*args)

    def __repr__(self) -> str:
        state = "compiled" if self.entry is not None else "pending"
        return f"<deferred {self.kernel!r} {state}>"


def workers() -> int:
    """How many processes compile a batch at once: ``KILN_COMPILE_WORKERS``, else the CPUs
    this process may use (at most :data:`MAX_WORKERS`); 1 on platforms without a safe fork
    (not Linux) and in a process that imported ``mpi4py.MPI``.

    Raises:
        ValueError: ``KILN_COMPILE_WORKERS`` is not a positive integer.
    """
    from kiln import config

    found = config.env_positive_int("KILN_COMPILE_WORKERS")
    if found is not None:
        n = found
    else:
        try:
            n = min(len(os.sched_getaffinity(0)), MAX_WORKERS)
        except AttributeError:
            n = min(os.cpu_count() or 1, MAX_WORKERS)
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 1
    if "mpi4py.MPI" in sys.modules:  # MPI transports may not survive a fork: compile serially
        return 1
    return n


def defer(kernel: Any, sig: tuple) -> Deferred | None:
    """The :class:`Deferred` call of ``kernel`` for ``sig`` in this thread's open batch, or
    None when no batch is open."""
    if not getattr(_state, "depth", 0):
        return None
    key = (id(kernel), sig)
    found = _state.pending.get(key)
    if found is None:
        found = _state.pending[key] = Deferred(kernel, sig)
    return found


@contextmanager
def batch() -> Iterator[None]:
    """Defers the compilation of the kernels specialized inside (in this thread) to the
    exit of the outermost batch, which compiles them all (see the module docstring). On an
    exception nothing is compiled (a :class:`Deferred` still called compiles itself)."""
    depth = getattr(_state, "depth", 0)
    if depth == 0:
        _state.pending = {}
    _state.depth = depth + 1
    try:
        yield
    except BaseException:
        _state.depth = depth
        if depth == 0:
            _state.pending = {}
        raise
    _state.depth = depth
    if depth == 0:
        pending, _state.pending = list(_state.pending.values()), {}
        compile_all(pending)


def compile_all(calls: list[Deferred], n_workers: int | None = None) -> None:
    """Compiles (or loads) the entry points of ``calls``, in ``n_workers`` processes
    (default :func:`workers`) when two or more kernel files need compiling."""
    todo: dict[str, list[Deferred]] = {}
    for d in calls:
        if d.entry is not None:
            continue
        k = d.kernel
        if d.sig in k._entries or not k.has_disk_cache() or k.cached(d.sig):
            d.resolve()
        else:
            todo.setdefault(k.path, []).append(d)
    n = workers() if n_workers is None else n_workers
    if n > 1 and len(todo) > 1:
        queue = units(todo)
        read, write = os.pipe()
        try:
            # non-blocking: a pipe that holds fewer indices (a full one-page pipe) takes what
            # fits; the units left out (a partial index reads as the end) the parent compiles
            os.set_blocking(write, False)
            os.write(write, b"".join(i.to_bytes(4, "little") for i in range(len(queue))))
        except BlockingIOError:
            pass
        finally:
            os.close(write)  # the queue ends where the indices end: every reader sees EOF
        mine: list[int] = []
        pids: list[int] = []
        t0 = time.monotonic()
        try:
            worker = functools.partial(_take, read, queue, _compile_in_worker, [])
            pids = _fork([worker] * min(n - 1, len(queue) - 1))
            _take(read, queue, Deferred.resolve, mine)
        finally:  # also when a compilation failed here: no worker is left behind
            _wait(pids, max(MIN_TIMEOUT_S, 4 * (time.monotonic() - t0)))
            os.close(read)
        for i, unit in enumerate(queue):
            if i not in mine:
                for d in unit:
                    d.resolve(by_worker=True)
    for group in todo.values():
        for d in group:
            d.resolve()


def _take(read: int, queue: list[list[Deferred]], compile_one: Callable[[Deferred], Any],
          taken: list[int]) -> None:
    """Compiles (``compile_one``) the units of ``queue`` whose indices this process reads from
    the pipe ``read`` until it is empty (4 bytes each, all written before any reader started:
    under the pipe's lock a read returns one whole index, or nothing at the end); records
    their indices in ``taken``."""
    while True:
        raw = os.read(read, 4)
        if len(raw) < 4:
            return
        i = int.from_bytes(raw, "little")
        taken.append(i)
        for d in queue[i]:
            compile_one(d)


def _compile_in_worker(d: Deferred) -> None:
    """A worker's compilation: the kernel (numba's, or a native loop) writes its entry to
    the disk cache."""
    d.kernel.compile_to_cache(d.sig)


# Estimated compile cost of a kernel, in characters of source: its length plus a fixed part
# per kernel; kernels calling the scalar functions of
# ``scalars.py`` go to one process, which compiles those functions once (~1 s, as much as a
# 2,800-character kernel). Fitted to the LSTM model's 18 kernels compiled serially (0.36 s
# for 621 characters to 1.6 s for 3,244): options.CpuOptions.compile_kernel_base_cost and
# compile_scalars_cost.


def units(groups: dict[str, list[Deferred]]) -> list[list[Deferred]]:
    """``groups`` (kernel file -> its calls) as units of work for one process each: a file's
    calls, or all the files whose kernels call the scalar functions (one unit); ordered by
    estimated cost, largest first, ties by file name (deterministic)."""
    opts = options.current()

    def cost(path: str) -> int:
        k = groups[path][0].kernel
        return (k.size + opts.compile_kernel_base_cost) * len(groups[path])

    by_unit: dict[str, list[str]] = {}
    for path in groups:
        scalars = getattr(groups[path][0].kernel, "scalars", False)
        by_unit.setdefault("" if scalars else path, []).append(path)
    unit_cost = {u: sum(cost(p) for p in ps) + (opts.compile_scalars_cost if u == "" else 0)
                 for u, ps in by_unit.items()}
    return [[d for path in sorted(by_unit[u]) for d in groups[path]]
            for u in sorted(by_unit, key=lambda u: (-unit_cost[u], u))]


_NATIVE_LOCK = threading.RLock()


@contextmanager
def compiler_lock() -> Iterator[None]:
    """Held by every compilation: the native loops' (:mod:`.native`) and, when numba is
    imported, numba's own compiler lock too (so a program of native kernels never imports
    numba)."""
    with _NATIVE_LOCK:
        if "numba" in sys.modules:
            from numba.core.compiler_lock import global_compiler_lock

            with global_compiler_lock:
                yield
        else:
            yield


def _fork(jobs: list[Callable[[], None]]) -> list[int]:
    """Forks one worker per job; each runs its job and exits (code 0, or 1 on an error).
    The compiler locks are held while forking, so that no thread of this process is in the
    middle of a compilation (numba's or a native loop's) the workers would inherit."""
    pids = []
    with compiler_lock():
        for job in jobs:
            try:
                pid = os.fork()
            except OSError:
                break  # fewer workers: the others take their share of the queue
            if pid == 0:  # the worker: compile, write the cache, leave without cleanup
                code = 1
                try:
                    job()
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
    return pids


def _wait(pids: list[int], timeout: float) -> None:
    """Waits for the workers, killing those still running after ``timeout`` seconds (their
    kernels are then compiled by the parent; numba writes its cache files atomically)."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.005)
