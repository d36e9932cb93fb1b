"""The CPU backend's kernels: numba ``njit`` over the one JIT loader (:mod:`..jit`).

Every numba kernel of the CPU backend (generated or hand-written) is loaded through :func:`load`:

* the source goes through :func:`kiln.core.backends.jit.load_source` (target ``"cpu"``), which
  keys it, writes it to ``KILN_CACHE_DIR/cpu`` and imports it, so numba's ``cache=True`` works
  across processes;
* no large constants are baked into kernel source: arrays are arguments, scalars may be literals;
* ``KILN_JIT=0`` (:func:`kiln.config.jit_enabled`) returns the same generated source un-jitted,
  running as plain Python;
* kernels are compiled per argument types (dtypes, ranks, layout) only, never per shape, so a new
  batch size costs nothing. :data:`stats` counts compilations and disk-cache loads, so tests can
  assert "no recompilation".

Example:
    >>> k = load("def double(o, a):\\n    for i in range(a.size):\\n        o[i] = 2 * a[i]\\n",
    ...          "double")
    >>> fn = k.specialize((out, x))   # compiles (or loads from disk) for these types
    >>> fn(out, x)
"""

from __future__ import annotations

import inspect
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kiln import config
from kiln.core.backends.jit import load_source, target_dir

# Module-level counters (tests read them): `compiled` = signatures numba compiled in this
# process, `cache_hits` = signatures loaded from numba's disk cache, `sources_written` = new
# kernel files, `modules_loaded` = kernel files imported, `compile_seconds` = time spent in both.
stats: dict[str, float] = {"compiled": 0, "cache_hits": 0, "sources_written": 0,
                           "modules_loaded": 0, "compile_seconds": 0.0}

_lock = threading.RLock()
_kernels: dict[tuple[str, bool], Kernel] = {}

HEADER = "import math\n\nimport numba\nimport numpy as np\n\n\n"

FASTMATH_REDUCE = frozenset({"reassoc", "nsz", "contract"})


def reset_stats() -> None:
    """Zeroes :data:`stats` (kernels already loaded stay loaded)."""
    for k in stats:
        stats[k] = 0.0 if k == "compile_seconds" else 0


def kernel_dir() -> str:
    """The folder holding the CPU kernel files (and numba's cache, in its __pycache__)."""
    return target_dir("cpu")


class Kernel:
    """One loaded kernel: the plain Python function and (JIT on) its numba dispatcher.

    Attributes:
        name: the function's name in its source.
        key: the deterministic cache key.
        path: the source file.
        py: the plain Python function (what ``KILN_JIT=0`` runs).
        dispatcher: the numba dispatcher, or None when JIT is off.
    """

    def __init__(self, name: str, key: str, path: str, py: Callable, dispatcher: Any):
        self.name = name
        self.key = key
        self.path = path
        self.py = py
        self.dispatcher = dispatcher
        self._entries: dict[tuple, Callable] = {}

    @property
    def jitted(self) -> bool:
        return self.dispatcher is not None

    def specialize(self, args: Sequence[Any]) -> Callable:
        """The callable for arguments of these types: the compiled entry point (compiling or
        loading it from the disk cache on first use, counted in :data:`stats`), or the plain
        Python function when JIT is off.

        The entry point skips numba's type dispatch: call it only with arguments of exactly
        the types given here (the executor guarantees it; the dispatcher is always safe).
        """
        if self.dispatcher is None:
            return self.py
        from numba import typeof

        sig = tuple(typeof(a) for a in args)
        entry = self._entries.get(sig)
        if entry is not None:
            return entry
        with _lock:
            entry = self._entries.get(sig)
            if entry is not None:
                return entry
            disp = self.dispatcher
            hits = sum(disp.stats.cache_hits.values())
            t0 = time.perf_counter()
            entry = disp.compile(sig)
            stats["compile_seconds"] += time.perf_counter() - t0
            if sum(disp.stats.cache_hits.values()) > hits:
                stats["cache_hits"] += 1
            else:
                stats["compiled"] += 1
            self._entries[sig] = entry
        return entry

    def __call__(self, *args: Any) -> Any:
        """Calls through numba's dispatcher (type-checked), or the Python function."""
        return self.specialize(args)(*args)

    def __repr__(self) -> str:
        mode = "jit" if self.jitted else "python"
        return f"<kiln cpu kernel {self.name} {self.key} ({mode})>"


def load(source: str, name: str, *, signature: str = "", fastmath: Any = False,
         parallel: bool = False) -> Kernel:
    """Loads the kernel ``name`` defined in ``source`` through the disk-backed JIT cache.

    Args:
        source: the kernel's Python source (without imports: ``math`` and ``np`` are provided).
        name: the function to take from it.
        signature: a description of the argument dtypes/ranks the source is specialized for
            (part of the cache key).
        fastmath: numba's fastmath option (False, True or a set of LLVM flags).
        parallel: numba's parallel option (use only for large work: see the notes).

    Returns:
        A :class:`Kernel`; the same object for the same arguments within a process.
    """
    jit = config.jit_enabled()
    fm = sorted(fastmath) if isinstance(fastmath, set | frozenset) else bool(fastmath)
    options = f"fastmath={fm};parallel={parallel}"
    t0 = time.perf_counter()
    src = load_source("cpu", source, name, header=HEADER, options=options, signature=signature,
                      counts=stats)
    memo = (src.path, jit)
    found = _kernels.get(memo)
    if found is None:
        dispatcher = None
        if jit:
            import numba

            dispatcher = numba.njit(cache=True, nogil=True, error_model="numpy",
                                    boundscheck=False,
                                    fastmath=set(fastmath) if isinstance(fastmath, frozenset)
                                    else fastmath,
                                    parallel=parallel)(src.function)
        stats["compile_seconds"] += time.perf_counter() - t0
        found = _kernels.setdefault(memo, Kernel(name, src.key, src.path, src.function,
                                                 dispatcher))
    return found


_functions: dict[tuple, Kernel] = {}


def load_function(fn: Callable, *, fastmath: Any = False, parallel: bool = False) -> Kernel:
    """:func:`load` for a hand-written kernel given as a plain Python function (its source is
    taken with ``inspect``; it may use only ``np``, ``math`` and its arguments)."""
    memo = (fn, str(fastmath), parallel, config.jit_enabled())
    found = _functions.get(memo)
    if found is None:
        source = textwrap.dedent(inspect.getsource(fn))
        found = load(source, fn.__name__, signature=f"{fn.__module__}.{fn.__qualname__}",
                     fastmath=fastmath, parallel=parallel)
        _functions[memo] = found
    return found
