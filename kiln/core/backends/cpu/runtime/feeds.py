"""Feeds read in place (docs/architecture.md, "Backends"): a plan's kernel arguments that view a
feed's buffer are rebuilt around the fed array itself (:class:`FeedBinding`, built by
:func:`feed_binding` when the plan is; applied by ``program.Plan._feed`` on each call), unless
some step holds a view of the buffer the plan cannot rebuild (:func:`closure_arrays`): then
the feed is copied into its buffer. On each call, :func:`view_maker`'s functions put the fed
array (or its buffer) into the bound arguments, and :func:`pointer_reader`'s reads its address
for the check against the buffers a step rewrites."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.layout import contiguous_strides


@dataclass
class FeedBinding:
    """How the kernel arguments that read one feed are rebuilt around the fed array itself (no
    copy into the feed's buffer): per step, the argument positions and the (byte offset, shape,
    strides) of each view of the feed."""

    buffer: np.ndarray
    refs: dict[int, list[tuple[int, int, tuple, tuple]]]
    bound: bool = False



# Feeds smaller than options.CpuOptions.bind_min_bytes are copied into their buffer: cheaper
# than rebuilding the views.

def closure_arrays(fn: Any, depth: int = 8) -> list[np.ndarray]:
    """The arrays a step's function (or another value: an argument that is not an array) holds
    where a plan cannot rebind them: in its closure, a bound method's object, a
    ``functools.partial``, kiln's own objects (``threads.SplitCall``'s function that changes the
    arguments per part, a pipeline's jobs), and inside lists, tuples, sets and dicts of those,
    up to ``depth`` levels."""
    found: list[np.ndarray] = []
    seen: set[int] = set()

    def visit(v: Any, d: int) -> None:
        if id(v) in seen or d < 0 or v is None or isinstance(v, str | bytes | int | float):
            return
        seen.add(id(v))
        if isinstance(v, np.ndarray):
            found.append(v)
        elif isinstance(v, list | tuple | set | frozenset):
            for item in v:
                visit(item, d - 1)
        elif isinstance(v, dict):
            for item in v.values():
                visit(item, d - 1)
        elif type(v).__name__ == "Deferred" and type(v).__module__.endswith("compile_batch"):
            visit(v.entry, d - 1)  # its kernel is compile-time state: it runs with the call's
            # arguments (a kernel loaded from the disk cache keeps the closure that would
            # generate its IR, which may hold the arrays of the plan that first asked for it)
        elif isinstance(v, functools.partial):
            visit(v.func, d - 1)
            visit(v.args, d - 1)
            visit(v.keywords, d - 1)
        elif getattr(v, "__closure__", None):
            for cell in v.__closure__:
                visit(cell.cell_contents, d - 1)
        elif hasattr(v, "__self__") and not isinstance(v.__self__, ModuleType):
            visit(v.__self__, d - 1)  # a bound method: its object
        elif type(v).__module__.startswith("kiln.") and not isinstance(v, type):
            for name in getattr(type(v), "__slots__", ()):
                visit(getattr(v, name, None), d - 1)
            if hasattr(v, "__dict__"):
                visit(vars(v), d - 1)

    visit(fn, depth)
    return found


def feed_binding(steps: Sequence[Any], buffer: np.ndarray,
                 outputs: list[np.ndarray]) -> FeedBinding | None:
    """The :class:`FeedBinding` of a feed buffer, or None when the feed is small, or some step
    reads it in a way that cannot be rebuilt (a closure), or an output shows it."""
    if buffer.nbytes < options.current().bind_min_bytes:
        return None
    base_ptr = buffer.__array_interface__["data"][0]
    lo, hi = base_ptr, base_ptr + buffer.nbytes

    def inside(a: np.ndarray) -> bool:
        ptr = a.__array_interface__["data"][0]
        return a.size > 0 and lo <= ptr < hi

    if any(isinstance(o, np.ndarray) and np.shares_memory(o, buffer) for o in outputs):
        return None
    refs: dict[int, list] = {}
    for k, step in enumerate(steps):
        # a view of the feed the plan cannot rebuild (held by the function, or inside an
        # argument that is not an array): the feed is copied into its buffer instead
        held = closure_arrays(step.fn) + closure_arrays(
            [a for a in step.args if not isinstance(a, np.ndarray)])
        if any(np.shares_memory(a, buffer) for a in held):
            return None
        for pos, a in enumerate(step.args):
            if not isinstance(a, np.ndarray) or not np.shares_memory(a, buffer):
                continue
            if not inside(a):
                return None
            offset = a.__array_interface__["data"][0] - base_ptr
            refs.setdefault(k, []).append((pos, offset, a.shape, a.strides))
    return FeedBinding(buffer, refs) if refs else None


# ---- applying a binding (program.Plan._feed) ----------------------------------------------------
def view_maker(buffer: np.ndarray, offset: int, shape: tuple,
                strides: tuple) -> Callable[[np.ndarray], np.ndarray]:
    """``view(a)``: the view at ``(offset, shape, strides)`` of ``a``, an array shaped, typed
    and laid out as the feed ``buffer`` (C-contiguous): ``a`` itself where the view is the
    whole of it, its reshape where the view is all of it in C order, else a new ndarray."""
    if offset == 0 and shape == buffer.shape and strides == buffer.strides:
        return _whole
    if offset == 0 and int(np.prod(shape)) == buffer.size and \
            strides == tuple(s * buffer.itemsize for s in contiguous_strides(shape)):
        return lambda a: a.reshape(shape)
    dtype = buffer.dtype
    return lambda a: np.ndarray(shape, dtype, buffer=a, offset=offset, strides=strides)


def _whole(a: np.ndarray) -> np.ndarray:
    return a


def _interface_pointer(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def pointer_reader() -> Callable[[np.ndarray], int]:
    """A function giving the address of an array's first element: read from the ndarray
    object (~0.2 us) where the native path found it at ``llvm_loop.DATA_OFFSET`` in this
    interpreter, else through ``__array_interface__`` (a new dict each time: ~1.1 us)."""
    from kiln.core.backends.cpu.codegen import native
    from kiln.core.backends.cpu.codegen.llvm_loop import DATA_OFFSET

    if not native.data_offset_checked():
        return _interface_pointer
    at = ctypes.c_void_p.from_address
    return lambda a: at(id(a) + DATA_OFFSET).value or 0
