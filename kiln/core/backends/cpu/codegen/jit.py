"""The CPU backend's numba kernels: ``njit`` over the one JIT loader
(:mod:`kiln.core.backends.jit`).

Every numba kernel of the CPU backend (generated or hand-written) is loaded through :func:`load`:

* the source goes through :func:`kiln.core.backends.jit.load_source` (target ``"cpu"``), which
  keys it, writes it to ``KILN_CACHE_DIR/cpu`` and builds its module, and the dispatcher gets
  numba's disk cache, checked (:mod:`kiln.core.backends.numba_cache`: a damaged entry is
  compiled again, never trusted), so a second process starts warm;
* no large constants are baked into kernel source: arrays are arguments, scalars may be literals;
* ``KILN_JIT=0`` (:func:`kiln.config.jit_enabled`) returns the same generated source un-jitted,
  running as plain Python;
* kernels are compiled per argument types (dtypes, ranks, layout) only, never per shape, so a new
  batch size costs nothing; a plan's kernels are compiled together, in worker processes where
  it pays (:mod:`.compile_batch`). :data:`stats` counts compilations and disk-cache loads, so
  tests can assert "no recompilation".

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
# `compiled_by_workers` = those of `compiled` that a compile worker process compiled
# (docs/architecture.md, "The kernel cache").
stats: dict[str, float] = {"compiled": 0, "cache_hits": 0, "sources_written": 0,
                           "modules_loaded": 0, "compile_seconds": 0.0,
                           "compiled_by_workers": 0}

_lock = threading.RLock()
_kernels: dict[tuple[str, bool], Kernel] = {}

HEADER = "import math\n\nimport numba\nimport numpy as np\n\n\n"

FASTMATH_REDUCE = frozenset({"reassoc", "contract"})


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

    def __init__(self, name: str, key: str, path: str, py: Callable, dispatcher: Any,
                 size: int = 0):
        self.name = name
        self.size = size  # the source's length: the compile batch's estimate of its cost
        self.key = key
        self.path = path
        self.py = py
        self.dispatcher = dispatcher
        self.scalars = False  # calls the functions of scalars.py (see compile_batch.split)
        self._entries: dict[tuple, Callable] = {}

    @property
    def jitted(self) -> bool:
        return self.dispatcher is not None

    def specialize(self, args: Sequence[Any]) -> Callable:
        """The callable for arguments of these types: the compiled entry point (compiling or
        loading it from the disk cache on first use, counted in :data:`stats`), or the plain
        Python function when JIT is off.

        Inside a compile batch (:func:`kiln.core.backends.cpu.codegen.compile_batch.batch`, which
        plan building opens) a signature not compiled yet is returned as a
        :class:`~kiln.core.backends.cpu.codegen.compile_batch.Deferred` call, compiled with the
        batch's other kernels when the batch closes (in parallel where it pays).

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
        from kiln.core.backends.cpu.codegen import compile_batch

        deferred = compile_batch.defer(self, sig)
        if deferred is not None:
            return deferred
        return self.compile(sig)

    def compile(self, sig: tuple, *, by_worker: bool = False) -> Callable:
        """The entry point for the numba types ``sig`` (compiled, or loaded from the disk
        cache: counted in :data:`stats`; ``by_worker``: a cache entry a compile worker of
        this process wrote, counted as compiled, see :mod:`.compile_batch`)."""
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
            if sum(disp.stats.cache_hits.values()) > hits and not by_worker:
                stats["cache_hits"] += 1
            else:
                stats["compiled"] += 1
                if by_worker and sum(disp.stats.cache_hits.values()) > hits:
                    stats["compiled_by_workers"] += 1
            self._entries[sig] = entry
        return entry

    def has_disk_cache(self) -> bool:
        """Whether what this kernel compiles is written to numba's checked disk cache (so
        another process can load it)."""
        from kiln.core.backends import numba_cache

        return numba_cache.has_cache(self.dispatcher)

    def compile_to_cache(self, sig: tuple) -> None:
        """A compile worker's part: numba compiles ``sig`` and writes the cache entry."""
        self.dispatcher.compile(sig)

    def cached(self, sig: tuple) -> bool:
        """Whether numba's disk cache holds an entry for ``sig`` (read from its index only;
        False when the kernel has no disk cache)."""
        from kiln.core.backends import numba_cache

        return numba_cache.has_entry(self.dispatcher, sig)

    def __call__(self, *args: Any) -> Any:
        """Calls through numba's dispatcher (type-checked), or the Python function."""
        return self.specialize(args)(*args)

    def __repr__(self) -> str:
        mode = "jit" if self.jitted else "python"
        return f"<kiln cpu kernel {self.name} {self.key} ({mode})>"


def load(source: str, name: str, *, signature: str = "", fastmath: Any = False,
         noalias: bool = False) -> Kernel:
    """Loads the kernel ``name`` defined in ``source`` through the disk-backed JIT cache.

    Args:
        source: the kernel's Python source (without imports: ``math`` and ``np`` are provided).
        name: the function to take from it.
        signature: a description of the argument dtypes/ranks the source is specialized for
            (part of the cache key).
        fastmath: numba's fastmath option (False, True or a set of LLVM flags).
        noalias: the arrays passed to one call never overlap (LLVM's ``noalias`` on every
            pointer argument, as numba gives the loop body of a ``prange``): the kernel's
            loads and stores can be reordered and vectorized without runtime overlap checks.
            Only for kernels whose callers guarantee it (the convolution and pooling kernels:
            their outputs are fresh buffers): an overlap would be a wrong result.

    Returns:
        A :class:`Kernel`; the same object for the same arguments within a process.
    """
    jit = config.jit_enabled()
    fm = sorted(fastmath) if isinstance(fastmath, set | frozenset) else bool(fastmath)
    options = f"fastmath={fm}" + (";noalias" if noalias else "")
    t0 = time.perf_counter()
    src = load_source("cpu", source, name, header=HEADER, options=options, signature=signature,
                      counts=stats)
    memo = (src.path, jit)
    found = _kernels.get(memo)
    if found is None:
        dispatcher = None
        if jit:
            import numba

            from kiln.core.backends import numba_cache

            # no C-callable wrapper (kiln calls the Python entry point only): the MNIST
            # convnet's 24 kernels compile in 13.0-13.2 instead of 13.5-13.9 s, serially.
            # (numba's stub omits that option, which its CPU target takes: numba/core/cpu.py)
            dispatcher = numba.njit(  # type: ignore[call-overload]
                cache=False, nogil=True, error_model="numpy", boundscheck=False,
                no_cfunc_wrapper=True,
                fastmath=set(fastmath) if isinstance(fastmath, frozenset) else fastmath,
            )(src.function)
            if noalias:
                _set_noalias(dispatcher)
            # numba's disk cache, checked (docs/architecture.md, "The kernel cache"); none
            # when the cache folder cannot be written (the kernel then lives in memory only)
            if src.on_disk:
                numba_cache.install(dispatcher, src.stamp)
        stats["compile_seconds"] += time.perf_counter() - t0
        found = Kernel(name, src.key, src.path, src.function, dispatcher, len(source))
        found.scalars = "kiln.core.backends.cpu.codegen.scalars" in source
        found = _kernels.setdefault(memo, found)
    return found


_functions: dict[tuple, Kernel] = {}


def _set_noalias(dispatcher: Any) -> None:
    """Compiles ``dispatcher``'s signatures with numba's ``noalias`` flag (not a ``jit``
    option: set where numba's function compiler turns the options into flags)."""
    compiler = dispatcher._compiler
    customize = compiler._customize_flags

    def with_noalias(flags: Any) -> Any:
        flags = customize(flags)
        flags.noalias = True
        return flags

    compiler._customize_flags = with_noalias


def _shape(code: Any) -> tuple:
    """What a function's code keeps of its text, whatever the compiler's version of it: its
    arguments, local and global names and constants (not the bytecode, which differs between a
    module's import and a compile of the function's text)."""
    consts = tuple(repr(c) for c in code.co_consts if not hasattr(c, "co_code"))
    names = frozenset(code.co_names) | frozenset(code.co_freevars)  # a closure's: free there
    return code.co_argcount, code.co_varnames, names, consts


def function_source(fn: Callable) -> str:
    """The source of the plain Python function ``fn`` (dedented), checked against the code
    Python loaded: ``inspect`` reads the file as it is now, at the line numbers of the import,
    so a kiln edited or upgraded under a running process would hand numba another function's
    lines, a wrong kernel without an error; raises RuntimeError instead."""
    source = textwrap.dedent(inspect.getsource(fn))
    code = fn.__code__
    try:
        module = compile(source, code.co_filename, "exec", dont_inherit=True)
    except SyntaxError:
        module = None
    found = [c for c in (module.co_consts if module else ())
             if getattr(c, "co_name", None) == code.co_name]
    if not found or _shape(found[0]) != _shape(code):
        raise RuntimeError(
            f"kiln: the source of {fn.__module__}.{fn.__qualname__} in {code.co_filename} is "
            "not the code this process imported (kiln edited or upgraded under a running "
            "process?): restart Python")
    return source


def load_function(fn: Callable, *, fastmath: Any = False, noalias: bool = False) -> Kernel:
    """:func:`load` for a hand-written kernel given as a plain Python function (its source is
    taken with ``inspect``; it may use only ``np``, ``math`` and its arguments)."""
    memo = (fn, str(fastmath), noalias, config.jit_enabled())
    found = _functions.get(memo)
    if found is None:
        source = function_source(fn)
        found = load(source, fn.__name__, signature=f"{fn.__module__}.{fn.__qualname__}",
                     fastmath=fastmath, noalias=noalias)
        _functions[memo] = found
    return found
