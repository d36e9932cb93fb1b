"""The one worker API: kernels describe their work in parts; only the runtime splits and runs
them (docs/architecture.md, "Threads").

A kernel hands the plan builder a description of its work (:func:`add_parts`): the entry
point (a function, a native kernel's entry or a compile batch's
:class:`~kiln.core.backends.cpu.codegen.compile_batch.Deferred`), the step's arguments, the
number ``n`` of independent items along its split axis (or explicit ``ranges`` where the
kernel needs a special split, e.g. aligned to its tiles), how much work the call does against
the least that pays for threads (``work`` / ``min_work``), and how part ``k``'s arguments
differ (``vary(k, lo, hi)``: ``{argument index: value}``, e.g. the parameter array of the
range ``lo..hi``, another output buffer per part). The runtime decides:

* the part count: one per kernel thread (:func:`cpus.kernel_threads`, the one setting every
  split kernel reads, through ``threads``), at most ``n``, one where the work is under ``min_work``;
  :func:`split` hands a kernel the runtime's ranges where it must size per-part buffers
  before it describes the step;
* the engine, once at import (:func:`engine`): the spin workers of ``spin_pool`` where
  ``target.process().spin_engine`` (x86-64 Linux) and the entry is a native kernel, else
  ``threads.KernelPool``'s portable Python workers; the caller alone, in order, with one part
  or on a busy machine (:func:`cpus.plan`). The same parts give the same bits on every engine.

:func:`run_parts` runs parts handed out while a step runs (a sort's rows, a batch of BLAS
calls); :func:`park` sends spinning workers to sleep before a BLAS call. Nothing under
``kernels/`` or ``gemm/`` imports ``threads`` or ``spin_pool`` (tests/core/backends/
test_cpu_layout.py). :func:`native_split` is :func:`add_parts` for a native kernel whose last
argument is its int64 parameters. Imports codegen and the runtime's worker pools.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from kiln.core.backends.cpu.codegen.compile_batch import Deferred
from kiln.core.backends.cpu.codegen.native import try_kernel
from kiln.core.backends.cpu.runtime import spin_pool, threads
from kiln.core.backends.cpu.runtime.threads import ENGINES, SplitCall

__all__ = ["ENGINES", "add_parts", "count", "engine", "forced", "native_split", "park",
           "run_parts", "settled", "split"]

Vary = Callable[[int, int, int], dict[int, Any]]
_forced: list[str] = []  # the engines of the open forced() blocks, innermost last


def engine() -> str:
    """The engine split native kernels run on in this process, chosen once at import:
    ``"spin"`` (``spin_pool``'s native workers: x86-64 Linux, ``KILN_SPIN_POOL`` not 0) or
    ``"portable"`` (``threads.KernelPool``'s Python workers). Other entries always run on the
    portable workers."""
    return "spin" if spin_pool.ENABLED else "portable"


@contextlib.contextmanager
def forced(engine: str) -> Iterator[None]:
    """Every split step :func:`add_parts` builds inside the block (plans built by a call
    inside it) runs on ``engine`` (one of :data:`ENGINES`) whatever the load and the planner's
    serial rule: the same parts on each engine, for tests and benchmarks."""
    if engine not in ENGINES:
        raise ValueError(f"parts.forced: engine {engine!r} is not one of {ENGINES}")
    _forced.append(engine)
    try:
        yield
    finally:
        _forced.pop()


def count(work: int = 1, min_work: int = 0) -> int:
    """The number of parts the runtime gives a call doing ``work`` (any unit the kernel
    measures, its ``min_work`` in the same unit): one per kernel thread, one under
    ``min_work``."""
    # read through threads (its import of cpus.kernel_threads): the one name tests set
    return threads.kernel_threads() if work >= min_work else 1


def split(n: int, *, work: int = 1, min_work: int = 0) -> list[tuple[int, int]]:
    """The runtime's parts of ``n`` independent items: :func:`count` contiguous ranges (at
    most ``n``, at least one) covering ``range(n)``, their sizes within one."""
    return threads.chunks(n, count(work, min_work))


def add_parts(b, entry: Callable, args: tuple, n: int = 0, *,
              ranges: Sequence[tuple[int, int]] | None = None, vary: Vary | None = None,
              sliced: Sequence[int] = (), work: int = 1, min_work: int = 0,
              label: str | None = None, engine: str | None = None,
              sized: bool = False) -> list[tuple[int, int]]:
    """Adds to the plan builder ``b`` the step running ``entry`` over the parts of its work:
    part ``k`` of the range ``lo..hi`` calls ``entry`` with the step's ``args`` changed at the
    indices of ``vary(k, lo, hi)`` (called once per part, here) and the arguments at the
    indices ``sliced`` cut to their rows ``lo:hi`` (at each call: a fed input the plan binds
    in place of its buffer is the one cut). The parts are ``ranges``
    when given, else :func:`split`'s of ``n`` items (``work`` / ``min_work``: see
    :func:`count`). One part is a plain step (its arguments changed here); several, a step
    the runtime runs on its engine. ``engine`` forces one (``"serial"``, ``"portable"`` or
    ``"spin"``: native kernels there, other entries on the portable workers), whatever the
    load (tests and benchmarks; else :func:`forced`'s); None lets the runtime choose.
    ``sized``: the kernel sized its parts by its own measured rule (``ranges`` from its own
    threshold), which the planner's rule for small kernels (``runtime/serial.py``) then
    leaves alone. Returns the ranges."""
    engine = engine or (_forced[-1] if _forced else None)
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"add_parts: engine {engine!r} is not one of {ENGINES}")
    ranges = list(ranges) if ranges else split(n, work=work, min_work=min_work)
    size = len(args)
    changes = [tuple(sorted(((i + size if i < 0 else i), v)
                            for i, v in (vary(k, lo, hi) if vary else {}).items()))
               for k, (lo, hi) in enumerate(ranges)]
    cut = sorted(i + size if i < 0 else i for i in sliced)
    for change in [*changes, [(i, None) for i in cut]]:
        if any(not 0 <= i < size for i, _ in change):
            raise IndexError(f"add_parts({label}): a part changes an argument out of "
                             f"{size}: {[i for i, _ in change]}")
    if len(ranges) == 1 and not cut:  # nothing to split: a plain step on every engine
        b.add(entry, _changed(args, changes[0]), label=label)
    else:
        b.add(SplitCall(entry, len(ranges), _change(changes, size, ranges, cut), engine,
                        sized), args, label=label)
    return ranges


def _changed(args: tuple, change: tuple) -> tuple:
    if not change:
        return tuple(args)
    new = list(args)
    for i, v in change:
        new[i] = v
    return tuple(new)


def _change(changes: list[tuple], size: int, ranges: list[tuple[int, int]],
            cut: list[int]) -> Callable[[tuple, int], tuple]:
    """``SplitCall``'s change: the step's arguments (as they are at the call: a fed input the
    plan binds in place of its buffer is the one read) with part ``k``'s values, the
    arguments at ``cut`` cut to part ``k``'s rows."""
    if cut:
        def change_cut(a: tuple, k: int) -> tuple:
            new = list(_changed(a, changes[k]))
            lo, hi = ranges[k]
            for i in cut:
                new[i] = new[i][lo:hi]
            return tuple(new)

        return change_cut
    if all(len(c) == 1 and c[0][0] == size - 1 for c in changes):
        last = [c[0][1] for c in changes]  # the common case: another parameter array

        def change_last(a: tuple, k: int) -> tuple:
            return (*a[:-1], last[k])

        return change_last

    def change(a: tuple, k: int) -> tuple:
        return _changed(a, changes[k])

    return change


def run_parts(calls: Sequence[tuple[Callable, tuple]]) -> None:
    """Runs the independent parts ``fn(*args)`` of ``calls`` now (inside a running step), the
    first on the caller, the others on the portable workers (all on the caller, in order, on a
    busy machine); raises the first error of any part once all are done."""
    threads.POOL.run(calls)


def park() -> None:
    """Sends the spin engine's spinning workers to sleep: a BLAS call follows, whose own
    threads would share the cores with them (the next split call wakes them)."""
    spin_pool.POOL.park()


def settled(fn: Callable) -> Callable:
    """``fn``, or its entry point when it is a :class:`Deferred` already compiled (inside a
    :class:`~kiln.core.backends.cpu.runtime.threads.SplitCall` too)."""
    if isinstance(fn, Deferred) and fn.entry is not None:
        return fn.entry
    if isinstance(fn, SplitCall):
        fn.entry = settled(fn.entry)
    return fn


def native_split(b, name: str, make, arrays: tuple, p: list[int], n: int = 0, *,
                 ranges: list | None = None, label: str | None = None,
                 parts: np.ndarray | None = None, tail: list[int] | None = None,
                 mixed: bool = False, work: int = 1, min_work: int = 0,
                 engine: str | None = None) -> bool:
    """Adds the native kernel ``make(symbol, dtype)`` over ``arrays`` (one dtype, ``dtype``
    the first array's; ``mixed``: others too, which ``make`` fixes) with the parameters
    ``[*shapes, *p, n0, n1, *tail]``, its range of ``n`` items in the runtime's parts
    (``ranges``: given; ``work`` / ``min_work``: :func:`count`), into ``parts[k]`` per part
    when given (part ``k``'s own output), on ``engine`` when given (:func:`add_parts`); False
    when it cannot run here (the caller then runs its numba kernel)."""
    if not mixed and any(a.dtype != arrays[0].dtype for a in arrays):
        return False
    ranges = ranges or split(n, work=work, min_work=min_work)
    label = label or f"{b.node.op}:{name}"
    dims = [d for a in arrays for d in a.shape]
    dtype = arrays[0].dtype.name

    def params(lo: int, hi: int) -> np.ndarray:
        return np.asarray([*dims, *p, lo, hi, *(tail or ())], np.int64)

    found = try_kernel(f"{name} {dtype}", arrays, list(params(*ranges[0])),
                       lambda s: make(s, dtype))
    if found is None:
        return False
    entry, first = found
    if len(ranges) == 1:
        b.add(entry, first, label=label)
        return True
    out = [a.reshape(-1) for a in parts] if parts is not None else None
    size = len(first)

    def vary(k: int, lo: int, hi: int) -> dict[int, Any]:
        return {size - 1: params(lo, hi), **({0: out[k]} if out is not None else {})}

    add_parts(b, entry, first, ranges=ranges, vary=vary, label=label, engine=engine)
    return True
