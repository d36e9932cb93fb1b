"""A kernel's work in parts, for the runtime's workers: :func:`native_split` adds a native
kernel to a plan with its range split over kiln's threads (a :class:`threads.SplitCall`),
:func:`settled` swaps a compiled :class:`~kiln.core.backends.cpu.codegen.compile_batch.Deferred`
for its entry point, inside a split call too. Imports codegen and the runtime's worker pools.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core.backends.cpu.codegen.compile_batch import Deferred
from kiln.core.backends.cpu.codegen.native import try_kernel
from kiln.core.backends.cpu.runtime import threads
from kiln.core.backends.cpu.runtime.threads import SplitCall


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
                 mixed: bool = False) -> bool:
    """Adds the native kernel ``make(symbol, dtype)`` over ``arrays`` (one dtype, ``dtype``
    the first array's; ``mixed``: others too, which ``make`` fixes) with the parameters
    ``[*shapes, *p, n0, n1, *tail]``, its range of ``n`` items split over kiln's threads
    (``ranges``: given), into ``parts[k]`` per part when given; False when it cannot run here
    (the caller then runs its numba kernel)."""
    if not mixed and any(a.dtype != arrays[0].dtype for a in arrays):
        return False
    ranges = ranges or threads.chunks(n, threads.kernel_threads())
    label = label or f"{b.node.op}:{name}"
    dims = [d for a in arrays for d in a.shape]
    dtype = arrays[0].dtype.name

    def params(lo: int, hi: int) -> list[int]:
        return [*dims, *p, lo, hi, *(tail or ())]

    found = try_kernel(f"{name} {dtype}", arrays, params(*ranges[0]),
                       lambda s: make(s, dtype))
    if found is None:
        return False
    entry, first = found
    if len(ranges) == 1:
        b.add(entry, first, label=label)
        return True
    per_part = [np.asarray(params(*r), np.int64) for r in ranges]
    out = [a.reshape(-1) for a in parts] if parts is not None else None

    def change(a: tuple, k: int) -> tuple:
        return ((out[k] if out is not None else a[0]), *a[1:-1], per_part[k])

    b.add(threads.SplitCall(entry, len(ranges), change), first, label=label)
    return True
