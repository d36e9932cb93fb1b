"""The eager half of ``kiln.ops``: an op called on NumPy arrays (no symbolic argument, no
traced step) is built once on placeholders of the arrays' shapes and dtypes, compiled with
:func:`kiln.core.function` and cached by that signature; later calls with the same signature
only run the compiled function (docs/architecture.md, "kiln.ops: graph and eager").

The semantics are the graph op's by construction: the eager result IS the compiled graph's
result. ``kiln.eager`` (layers, losses and metrics on arrays) sits above ``kiln.ops`` in the
layering, so this module keeps its own small LRU of the same kind.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import numpy as np

import kiln.config
import kiln.core
import kiln.tape
from kiln.core import EAGER_READS

#: the most compiled ops kept (least recently used dropped beyond it)
MAXSIZE = 256

_ENTRIES: OrderedDict[Hashable, tuple[Any, Any]] = OrderedDict()
_LOCK = threading.RLock()
_STATS = {"misses": 0}


class _Slot:
    """Where the i-th array goes in an argument template."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def graph_dtype(a: np.ndarray, op: str) -> str:
    """The placeholder dtype of an array (float16 -> float32, small ints -> int32 ...).

    Raises:
        TypeError: naming ``op`` for a non-numeric array.
    """
    kind = a.dtype.kind
    if kind == "f":
        return "float64" if a.dtype.itemsize == 8 else "float32"
    if kind == "b":
        return "bool"
    if kind in "iu":
        return "int64" if a.dtype.itemsize > 4 or a.dtype == np.uint32 else "int32"
    raise TypeError(f"kiln.ops.{op}: expected numeric arrays, received dtype {a.dtype}")


def to_array(x: Any) -> np.ndarray:
    """A Python number or nested list as an array, with kiln's dtypes for Python values
    (floats -> floatx, ints -> int32 unless too large, bools -> bool)."""
    if isinstance(x, np.ndarray):
        return x
    arr = np.asarray(x)
    if isinstance(x, np.generic):
        return arr
    if arr.dtype.kind == "f":
        return arr.astype(kiln.config.floatx())
    if arr.dtype.kind in "iu":
        return arr.astype("int32" if arr.size == 0 or np.all(np.abs(arr) < 2**31) else "int64")
    return arr


def _template(value: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        arrays.append(np.asarray(value))
        return _Slot(len(arrays) - 1)
    if type(value) is list or type(value) is tuple:
        return type(value)(_template(v, arrays) for v in value)
    return value


def _key(value: Any, arrays: list[np.ndarray]) -> Hashable:
    if isinstance(value, _Slot):
        a = arrays[value.i]
        return ("<array>", a.shape, graph_dtype(a, "?"))
    if type(value) is list or type(value) is tuple:
        return (type(value).__name__,) + tuple(_key(v, arrays) for v in value)
    if type(value) in (bool, int, float):  # 1, 1.0 and True differ; NaN equals itself
        return (type(value).__name__, repr(value))
    return value


def _fill(value: Any, nodes: list[Any]) -> Any:
    if isinstance(value, _Slot):
        return nodes[value.i]
    if type(value) is list or type(value) is tuple:
        return type(value)(_fill(v, nodes) for v in value)
    return value


def call(name: str, graph_fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``graph_fn(*args, **kwargs)`` computed on the arrays among the arguments.

    Every NumPy array (or NumPy scalar) in ``args``/``kwargs`` (lists and tuples searched)
    becomes a placeholder of its static shape; every other value is passed as it is and is part
    of the cache key. Returns NumPy arrays where ``graph_fn`` returns nodes (a list or tuple
    of them as a list or tuple).
    """
    arrays: list[np.ndarray] = []
    targs = _template(args, arrays)
    tkw = {k: _template(v, arrays) for k, v in kwargs.items()}
    key: Hashable = (name, _key(targs, arrays), tuple(sorted((k, _key(v, arrays))
                                                             for k, v in tkw.items())),
                     kiln.config.floatx(), kiln.config.device(),
                     kiln.config.default_backend())
    try:
        hash(key)
    except TypeError:
        key = None  # an unhashable argument: compile without caching
    if key is None:
        entry = _build(name, graph_fn, targs, tkw, arrays)
    else:
        with _LOCK:  # held while building: a signature is traced and compiled once
            entry = _ENTRIES.get(key)
            if entry is not None:
                _ENTRIES.move_to_end(key)
            else:
                entry = _build(name, graph_fn, targs, tkw, arrays)
                _ENTRIES[key] = entry
                _STATS["misses"] += 1
                while len(_ENTRIES) > MAXSIZE:
                    _ENTRIES.popitem(last=False)
    function, rebuild = entry
    if function is None:
        return rebuild(None)
    feeds = [a if a.dtype == np.dtype(p.dtype) else a.astype(p.dtype)
             for a, p in zip(arrays, function.inputs)]
    results = function(*feeds)
    if kiln.tape.recording():  # an active GradientTape: record how to rebuild this call
        _record(key, graph_fn, targs, tkw, arrays, function, results)
        results = kiln.tape.wrap(results)
    return rebuild(results)


def _record(key: Hashable, graph_fn: Callable[..., Any], targs: Any, tkw: dict,
            arrays: list[np.ndarray], function: Any, results: Any) -> None:
    def replay(nodes: list) -> list:
        with reading_values(False):
            out = graph_fn(*_fill(targs, nodes), **{k: _fill(v, nodes)
                                                     for k, v in tkw.items()})
        leaves = list(out) if type(out) is list or type(out) is tuple else [out]
        return [kiln.core.convert_to_tensor(v) for v in leaves if kiln.core.is_tensor(v)]

    outputs = results if isinstance(results, list) else [results]
    kiln.tape.record(None if key is None else ("kiln.ops", key), replay, arrays,
                     [p.dtype for p in function.inputs], outputs)


def _build(name: str, graph_fn: Callable[..., Any], targs: Any, tkw: dict,
           arrays: list[np.ndarray]) -> tuple[Any, Callable[[Any], Any]]:
    phs = [kiln.core.placeholder(a.shape, graph_dtype(a, name)) for a in arrays]
    with reading_values(False):
        out = graph_fn(*_fill(targs, phs), **{k: _fill(v, phs) for k, v in tkw.items()})
    many = type(out) is list or type(out) is tuple
    leaves = list(out) if many else [out]
    where = [i for i, v in enumerate(leaves) if kiln.core.is_tensor(v)]
    if not where:
        return None, lambda _: out
    nodes = [kiln.core.convert_to_tensor(leaves[i]) for i in where]
    function = kiln.core.function(phs, nodes, name=f"kiln.ops.{name}")
    kind = type(out)

    def rebuild(results: Any) -> Any:
        if not many:
            return results[0] if isinstance(results, list) else results
        values = list(leaves)
        for i, r in zip(where, results if isinstance(results, list) else [results]):
            values[i] = r
        return kind(values)

    return function, rebuild


@contextlib.contextmanager
def reading_values(on: bool = True) -> Iterator[None]:
    """While ``on``, Variables in ``kiln.ops`` calls and operators read as their values
    (define-by-run: a user's ``call()`` under ``run_eagerly``); graph building inside (a
    layer's compile, an op's) turns it off."""
    token = EAGER_READS.set(on)
    try:
        yield
    finally:
        EAGER_READS.reset(token)


def variable_operator(name: str, builder: Callable[..., Any], args: tuple) -> Any:
    """A Python operator on a Variable in define-by-run: the builder's graph compiled once
    per signature (the Variable is a param of it) and run, recorded like any eager op."""
    return call(f"Variable.{name}", builder, args, {})


def cache_info() -> dict:
    """``{"size": entries, "misses": compiles}`` of the eager op cache."""
    with _LOCK:
        return {"size": len(_ENTRIES), "misses": _STATS["misses"]}


def clear() -> None:
    """Empties the eager op cache."""
    with _LOCK:
        _ENTRIES.clear()
