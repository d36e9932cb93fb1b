"""kiln's one eager path: layers, losses and metrics called on NumPy arrays.

kiln has no interpreter in the frontend. A computation called on arrays is traced once on
placeholders made from those arrays, compiled with :func:`kiln.core.function`, cached, and
called; the next call with the same *signature* reuses the compiled function.

* signature: per array ``(shape, dtype)`` with the leading (batch) dimension replaced by None,
  so a new batch size reuses the compiled function (it costs a new plan, never a recompile);
  the caller adds whatever else changes the graph (a training flag, extra arguments ...), and
  the cache adds the device and the backend;
* cache: a :class:`FunctionCache`, an LRU of at most ``maxsize`` entries. Objects whose graph
  depends on their own Python state (a layer's weights, a user's loss) keep a cache of their
  own (:func:`cache_for`); value-like keys (a built-in loss function and its arguments) share
  :data:`SHARED`;
* threads: filling a cache holds the cache's lock (a graph is traced and compiled once);
  calling an entry needs no lock of its own, as a compiled function is safe to call from
  several threads (docs/architecture.md, "Threads": calls of a function without updates run
  in separate buffers, concurrently; a function with updates runs one call at a time).

Example:
    >>> def build():
    ...     x = kiln.ops.placeholder((None, 3))
    ...     return kiln.core.function([x], kiln.ops.sum(x * x)), None
    >>> entry = kiln.eager.SHARED.lookup(("sum_of_squares", (3,)), build)
    >>> entry(np.ones((2, 3)))
    array(6., dtype=float32)

:func:`run` does all of it for the common case, a graph-building function of the arrays.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import numpy as np

import kiln.config
import kiln.core
import kiln.ops
import kiln.tape
from kiln.core import Function
from kiln.ops._eager import reading_values

#: default size of a cache (entries; the least recently used one is dropped beyond it)
MAXSIZE = 64


class Entry:
    """One compiled function and what its caller needs to use it (``info``).

    Calling the entry calls the function (thread-safe: see the module docstring).
    """

    __slots__ = ("function", "info")

    def __init__(self, function: Function, info: Any = None):
        self.function = function
        self.info = info

    def __call__(self, *feeds: Any) -> Any:
        return self.function(*feeds)

    def __repr__(self) -> str:
        return f"<eager.Entry {self.function.name!r}>"


class FunctionCache:
    """A thread-safe LRU of compiled functions (:class:`Entry`), keyed by signature.

    Args:
        maxsize: the most entries kept.
    """

    def __init__(self, maxsize: int = MAXSIZE):
        if maxsize < 1:
            raise ValueError(f"FunctionCache: maxsize must be >= 1, received {maxsize!r}")
        self.maxsize = int(maxsize)
        self._entries: OrderedDict[Hashable, Entry] = OrderedDict()
        self._lock = threading.RLock()  # re-entrant: a build may trace another eager call
        self.misses = 0

    def lookup(self, key: Hashable, build: Callable[[], tuple[Function, Any]]) -> Entry:
        """The entry for ``key``; on a miss ``build()`` returns ``(function, info)``, which is
        stored (dropping the least recently used entry beyond ``maxsize``)."""
        key = (key, kiln.config.device(), kiln.config.default_backend(),
               kiln.config.epsilon())  # graphs read epsilon when traced
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry
            function, info = build()
            entry = Entry(function, info)
            self.misses += 1
            self._entries[key] = entry
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
            return entry

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[Hashable]:
        """The keys, least recently used first (without the device/backend suffix)."""
        with self._lock:
            return [k[0] for k in self._entries]

    def values(self) -> list[Entry]:
        """The entries, least recently used first."""
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __reduce__(self) -> tuple:
        # copies (copy.deepcopy of a layer ...) start empty: locks and programs do not copy
        return (FunctionCache, (self.maxsize,))

    def __repr__(self) -> str:
        return f"<FunctionCache {len(self)}/{self.maxsize} entries>"


#: the cache of value-like keys (built-in losses and metrics)
SHARED = FunctionCache(maxsize=2 * MAXSIZE)

_OWNER_LOCK = threading.Lock()


def cache_for(owner: Any = None, attr: str = "_eager_cache", maxsize: int = MAXSIZE
              ) -> FunctionCache:
    """The cache of ``owner``, kept in its attribute ``attr`` (created on first use, so it
    lives and dies with the owner); :data:`SHARED` when ``owner`` is None."""
    if owner is None:
        return SHARED
    cache = owner.__dict__.get(attr)
    if isinstance(cache, FunctionCache):
        return cache
    with _OWNER_LOCK:
        cache = owner.__dict__.get(attr)
        if not isinstance(cache, FunctionCache):
            cache = FunctionCache(maxsize)
            owner.__dict__[attr] = cache  # not setattr: models track their attributes
        return cache


# ---- placeholders from arrays ------------------------------------------------------------------
def dtype_for(a: np.ndarray, float_dtype: str, bool_dtype: str | None = None,
              who: str = "eager") -> str:
    """The graph dtype of an array: floats -> ``float_dtype``, bools -> ``bool_dtype``
    (default ``float_dtype``), integers -> int32 or int64 (by width).

    Raises:
        TypeError: naming ``who`` for a non-numeric array.
    """
    kind = a.dtype.kind
    if kind == "f":
        return float_dtype
    if kind == "b":
        return bool_dtype or float_dtype
    if kind in "iu":
        return "int64" if a.dtype.itemsize > 4 else "int32"
    raise TypeError(f"{who}: expected numeric arrays, received dtype {a.dtype}")


def signature(arrays: Sequence[np.ndarray], batch: bool = True, who: str = "eager") -> tuple:
    """Per array ``(shape, dtype)``; with ``batch`` the leading dimension is None.

    Raises:
        TypeError: naming ``who`` for a non-numeric array.
    """
    out = []
    for a in arrays:
        if a.dtype.kind not in "biuf":
            raise TypeError(f"{who}: expected numeric arrays, received dtype {a.dtype}")
        shape = (None,) + a.shape[1:] if batch and a.ndim else a.shape
        out.append((shape, a.dtype.str))
    return tuple(out)


def placeholder_for(a: np.ndarray, float_dtype: str, bool_dtype: str | None = None,
                    batch: bool = True, who: str = "eager") -> Any:
    """A placeholder for arrays like ``a`` (dtype by :func:`dtype_for`; with ``batch`` the
    leading dimension is None)."""
    shape = (None,) + a.shape[1:] if batch and a.ndim else a.shape
    return kiln.ops.placeholder(shape, dtype_for(a, float_dtype, bool_dtype, who))


# ---- the common case -----------------------------------------------------------------------------
_STATIC = object()  # marks a signature whose graph needs the static batch size


def run(key: Hashable, graph: Callable[..., Any], arrays: Sequence[Any], float_dtype: str,
        owner: Any = None, batch: bool | None = True, name: str = "eager",
        who: str = "eager") -> Any:
    """Computes ``graph(*placeholders)`` on ``arrays``, compiled once per signature.

    Args:
        key: what identifies ``graph`` (with its non-array arguments) in the cache.
        graph: builds the output node, or a list of nodes, from one placeholder per array.
        arrays: the arrays (anything ``np.asarray`` takes).
        float_dtype: the placeholders' dtype for float and bool arrays.
        owner: whose cache to use (:func:`cache_for`); None for :data:`SHARED`.
        batch: True: the leading dimension is the batch (None in the graph); False: static
            shapes. None decides: the leading dimension is the batch when some array has rank
            2 or more (a lone rank-1 array may be one sample's classes); when such a graph
            cannot be built with an unknown batch size (``graph`` raises), the static shapes
            are used for that signature.
        name: the compiled function's name.
        who: named in errors.

    Returns:
        What the compiled function returns: an array, or a list of arrays.
    """
    arrays = [np.asarray(a) for a in arrays]
    cache = cache_for(owner)
    dynamic = batch if batch is not None else any(a.ndim >= 2 for a in arrays)

    def build(dynamic: bool) -> Callable[[], tuple[Function, Any]]:
        def fill() -> tuple[Function, Any]:
            phs = [placeholder_for(a, float_dtype, batch=dynamic, who=who) for a in arrays]
            with reading_values(False):
                return kiln.core.function(phs, graph(*phs), name=name), None
        return fill

    def entry(dynamic: bool) -> Entry:
        return cache.lookup((key, float_dtype, signature(arrays, dynamic, who)), build(dynamic))

    if dynamic and batch is None:
        dyn_key = (key, float_dtype, signature(arrays, True, who))
        try:
            found = cache.lookup(dyn_key, build(True))
        except (TypeError, ValueError):
            found = entry(False)  # raises the static graph's error, if it has one
            cache.lookup(dyn_key, lambda: (found.function, _STATIC))
        if found.info is _STATIC:
            found = entry(False)
    else:
        found = entry(dynamic)
    out = found(*arrays)
    if kiln.tape.recording():  # an active GradientTape: record how to rebuild this call
        kiln.tape.record(("kiln.eager", key, float_dtype, None if owner is None else id(owner)),
                         lambda nodes: _replay(graph, nodes), arrays,
                         [dtype_for(a, float_dtype, who=who) for a in arrays],
                         out if isinstance(out, list) else [out])
        out = kiln.tape.wrap(out)
    return out


# ---- define-by-run (``compile(run_eagerly=True)``, kiln/models/eager_loop.py) ---------------
class ByRun:
    """An active define-by-run block: models run their ``call()`` on arrays op by op (each
    layer and op through the eager path above), ``training`` is the flag layers called
    without one inherit, and ``losses`` collects the ``add_loss`` values of the calls."""

    __slots__ = ("training", "losses")

    def __init__(self, training: bool, losses: list | None = None):
        self.training = bool(training)
        self.losses: list = [] if losses is None else losses


_BY_RUN: contextvars.ContextVar[ByRun | None] = contextvars.ContextVar("kiln_by_run",
                                                                        default=None)


def by_run() -> ByRun | None:
    """The active define-by-run block, or None (compiled mode)."""
    return _BY_RUN.get()


@contextlib.contextmanager
def define_by_run(training: bool, losses: list | None = None) -> Iterator[ByRun]:
    """Runs the block define-by-run (see :class:`ByRun`); ``losses``: a list to collect the
    ``add_loss`` values into (default a new one)."""
    run = ByRun(training, losses)
    token = _BY_RUN.set(run)
    try:
        yield run
    finally:
        _BY_RUN.reset(token)


@contextlib.contextmanager
def outside_run() -> Iterator[None]:
    """No define-by-run block in the block (a compiled eager call inside one)."""
    token = _BY_RUN.set(None)
    try:
        yield
    finally:
        _BY_RUN.reset(token)


def _replay(graph: Callable[..., Any], nodes: list) -> list:
    with reading_values(False):
        return _as_list(graph(*nodes))


def _as_list(out: Any) -> list:
    return list(out) if isinstance(out, list | tuple) else [out]


class EagerArray(kiln.tape.TapeArray):
    """A layer called on arrays returns these: NumPy arrays with the conveniences of an eager
    Keras tensor: ``.numpy()`` (a plain copy) and ``._keras_mask`` (the mask the layer
    computed, e.g. ``Embedding(mask_zero=True)``; None otherwise). Arrays derived from one
    by arithmetic carry no mask; while a GradientTape records, NumPy arithmetic on them is
    recorded (:class:`kiln.tape.TapeArray`)."""

    _keras_mask: Any = None

    def __array_finalize__(self, obj: Any) -> None:
        self._keras_mask = None

    def numpy(self) -> np.ndarray:
        """A plain NumPy copy."""
        return np.array(self)


def eager_result(value: np.ndarray, mask: np.ndarray | None = None) -> EagerArray:
    """``value`` viewed as an :class:`EagerArray` carrying ``mask``."""
    out = np.asarray(value).view(EagerArray)
    out._keras_mask = mask
    return out
