"""``kiln.function``: compile placeholders to outputs, or capture a Python function into one
graph (the ``tf.function`` / ``jax.jit`` form; docs/debugging.md).

Two call forms share the name:

* ``kiln.function(inputs, outputs, updates=None, ...)``: the core's compiled function of
  placeholders (:func:`kiln.core.function`), unchanged;
* ``@kiln.function`` or ``@kiln.function(reduce_retracing=True)`` on a Python function:
  the first call per *input signature* (the shapes and dtypes of the array arguments, the
  values of Python scalars, the identity of other objects) TRACES the function with
  placeholders in place of the arrays. Eager-looking code inside - ``kiln.GradientTape``,
  ``model(x, training=True)``, a loss, ``optimizer.apply``, ``metric.update_state``,
  ``Variable.assign``, ``kiln.random`` draws - builds graph nodes instead of running, and the
  whole body becomes ONE compiled static graph with in-place variable updates (the graph
  ``fit`` runs for its steps). Later calls with the same signature only run that graph.

Python control flow runs once, at trace time: a branch on a tensor's *value* cannot be
traced and raises :class:`CaptureError` naming the user's file and line (use
``kiln.ops.cond`` / ``kiln.ops.where``, or call the function without the decorator).
"""

from __future__ import annotations

import functools
import importlib
import linecache
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.config
from kiln.core import Function, Node, Variable, depends_on, is_tensor, placeholder
from kiln.core import function as core_function

_KILN_DIR = os.path.dirname(os.path.abspath(__file__))
#: keyword arguments of the decorator form (tf.function's and jax.jit's names)
_OPTIONS = {"jit_compile", "reduce_retracing", "autograph", "name", "input_signature",
            "experimental_relax_shapes", "maxsize"}


class CaptureError(TypeError):
    """A function decorated with ``@kiln.function`` could not be traced into one graph."""


def function(fn: Any = None, /, *args: Any, **kwargs: Any) -> Any:
    """Compiles placeholders to outputs (``kiln.function(inputs, outputs, updates=None)``,
    see :func:`kiln.core.function`), or, used as a decorator, captures a Python function
    into one compiled graph per input signature (see the module docstring).

    Decorator options:
        reduce_retracing: the leading (batch) dimension of array arguments is left unknown,
            so a last, smaller batch reuses the graph (default False: static shapes, which
            ``ops.zeros((x.shape[0], 1))`` needs).
        jit_compile, autograph, input_signature, experimental_relax_shapes: accepted for
            TensorFlow (kiln always compiles; no AutoGraph).
        maxsize: the most traced graphs kept per function (default 32).
        name: the compiled functions' name.

    Example:
        >>> @kiln.function
        ... def train_step(x, y):
        ...     with kiln.GradientTape() as tape:
        ...         loss = loss_fn(y, model(x, training=True))
        ...     grads = tape.gradient(loss, model.trainable_weights)
        ...     optimizer.apply(grads, model.trainable_weights)
        ...     return loss
    """
    if fn is None and not args and "inputs" not in kwargs:
        unknown = set(kwargs) - _OPTIONS
        if unknown:
            raise TypeError(f"kiln.function: unexpected keyword argument(s) {sorted(unknown)}")
        return lambda f: Captured(f, **kwargs)
    if callable(fn) and not is_tensor(fn) and not args and set(kwargs) <= _OPTIONS:
        return Captured(fn, **kwargs)
    if fn is None:
        return core_function(*args, **kwargs)
    return core_function(fn, *args, **kwargs)


class _Entry:
    """One traced graph: how to feed it and read its results."""

    __slots__ = ("fn", "uses_key", "n_out", "metrics", "optimizers", "rebuild", "template")

    def __init__(self, fn: Function | None, uses_key: bool, n_out: int, metrics: list,
                 optimizers: list, rebuild: Callable[[list], Any]):
        self.fn, self.uses_key, self.n_out = fn, uses_key, n_out
        self.metrics, self.optimizers, self.rebuild = metrics, optimizers, rebuild
        self.template: Any = None  # the arguments' template: keeps keyed objects alive


class Captured:
    """A Python function captured into compiled graphs (made by ``@kiln.function``)."""

    def __init__(self, fn: Callable, jit_compile: Any = None, reduce_retracing: bool = False,
                 autograph: Any = None, name: str | None = None, input_signature: Any = None,
                 experimental_relax_shapes: Any = None, maxsize: int = 32):
        if not callable(fn):
            raise TypeError(f"kiln.function: expected a function, received {type(fn).__name__}")
        functools.update_wrapper(self, fn)
        self.python_function = fn
        self.reduce_retracing = bool(reduce_retracing or experimental_relax_shapes)
        self.name: str = str(name or getattr(fn, "__name__", "function"))
        self.maxsize = int(maxsize)
        self._entries: dict = {}
        self._lock = threading.RLock()
        self.traces = 0  # how many times the Python function was traced

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)  # a method: `self` is an argument

    def __repr__(self) -> str:
        return f"<kiln.function {self.name!r}: {len(self._entries)} traced graph(s)>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arrays: list[np.ndarray] = []
        template = _template((args, kwargs), arrays)
        key = (_key(template, arrays, self.reduce_retracing), kiln.config.floatx(),
               kiln.config.device(), kiln.config.default_backend())
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._trace(template, arrays)
                entry.template = template  # keeps the keyed objects alive: ids stay unique
                self._entries[key] = entry
                while len(self._entries) > self.maxsize:
                    self._entries.pop(next(iter(self._entries)))
        return self._run(entry, arrays)

    # ---- tracing -------------------------------------------------------------------------
    def _trace(self, template: Any, arrays: list[np.ndarray]) -> _Entry:
        context = _module("kiln.layers.context")
        DeferredResult, trace = context.DeferredResult, context.trace
        graph_dtype = _module("kiln.ops._eager").graph_dtype

        phs = [placeholder(((None,) + a.shape[1:]) if self.reduce_retracing and a.ndim
                           else a.shape, graph_dtype(a, self.name), name=f"arg_{i}")
               for i, a in enumerate(arrays)]
        args, kwargs = _fill(template, phs)
        rng_key = placeholder((2,), "int64", name="rng_key")
        self.traces += 1
        with trace(training=False, rng_key=rng_key) as ctx, _trace_variables() as assigned:
            ctx.defer_results = True
            try:
                returned = self.python_function(*args, **kwargs)
            except CaptureError:
                raise
            except Exception as exc:
                raise _explain(exc, self.name) from exc
        updates = {id(v): (v, n) for v, n in ctx.updates}
        updates.update({id(v): (v, n) for v, n in assigned.update_list()})
        leaves: list = []
        structure = _template(returned, leaves, tensors=True)
        outputs = [_as_output(t) for t in leaves]
        metrics = []
        for metric, nodes in ctx.metric_updates:
            metrics.append((metric, len(outputs), len(outputs) + len(nodes)))
            outputs.extend(nodes)
        update_list = list(updates.values())
        uses_key = depends_on(outputs + [n for _, n in update_list], rng_key)
        feeds = phs + ([rng_key] if uses_key else [])
        fn = None
        if outputs or update_list:
            fn = core_function(feeds, outputs, updates=update_list or None, name=self.name)
        n_out = len(leaves)
        deferred = {i: t.metric for i, t in enumerate(leaves) if isinstance(t, DeferredResult)}

        def rebuild(values: list) -> Any:
            for i, metric in deferred.items():  # metric.result(): read after the merge
                values[i] = metric.result()
            return _fill(structure, values)

        return _Entry(fn, uses_key, n_out, metrics, list(ctx.optimizers), rebuild)

    def _run(self, entry: _Entry, arrays: list[np.ndarray]) -> Any:
        next_seed = _module("kiln.random_state").next_seed

        for opt in entry.optimizers:
            opt.before_step()
        values: list = []
        if entry.fn is not None:
            feeds = [a if a.dtype == np.dtype(p.dtype) else a.astype(p.dtype)
                     for a, p in zip(arrays, entry.fn.inputs)]
            if entry.uses_key:
                feeds.append(np.array([next_seed(), 0], dtype=np.int64))
            values = entry.fn(*feeds) if feeds or entry.fn.inputs else entry.fn()
            values = list(values) if isinstance(values, list) else [values]
        for metric, a, b in entry.metrics:
            metric.merge(values[a:b])
        return entry.rebuild(values[:entry.n_out])


# ---- arguments and results as templates ---------------------------------------------------------
class _Slot:
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _template(value: Any, leaves: list, tensors: bool = False) -> Any:
    """``value`` with its arrays (arguments) or tensors (results, ``tensors=True``) replaced
    by slots into ``leaves``; lists, tuples and dicts are searched."""
    if tensors:
        DeferredResult = _module("kiln.layers.context").DeferredResult
        hit = (is_tensor(value) and not isinstance(value, np.ndarray)) or isinstance(
            value, DeferredResult)
    else:
        hit = isinstance(value, np.ndarray | np.generic)
    if hit:
        leaves.append(value if tensors else np.asarray(value))
        return _Slot(len(leaves) - 1)
    if type(value) in (list, tuple):
        return type(value)(_template(v, leaves, tensors) for v in value)
    if type(value) is dict:
        return {k: _template(v, leaves, tensors) for k, v in value.items()}
    return value


def _key(value: Any, arrays: list, relaxed: bool) -> Any:
    if isinstance(value, _Slot):
        a = arrays[value.i]
        shape = ((None,) + a.shape[1:]) if relaxed and a.ndim else a.shape
        return ("<array>", shape, a.dtype.str)
    if type(value) in (list, tuple):
        return (type(value).__name__,) + tuple(_key(v, arrays, relaxed) for v in value)
    if type(value) is dict:
        return ("dict",) + tuple((k, _key(v, arrays, relaxed)) for k, v in value.items())
    if value is None or type(value) in (bool, int, float, str):
        return (type(value).__name__, repr(value))  # Python values: part of the graph
    return ("<object>", id(value))  # models, optimizers, Variables ...: by identity


def _fill(value: Any, items: list) -> Any:
    """``value`` with its slots replaced by ``items``."""
    if isinstance(value, _Slot):
        return items[value.i]
    if type(value) in (list, tuple):
        return type(value)(_fill(v, items) for v in value)
    if type(value) is dict:
        return {k: _fill(v, items) for k, v in value.items()}
    return value


def _as_output(value: Any) -> Any:
    if isinstance(value, _module("kiln.layers.context").DeferredResult):
        return _zero()
    if isinstance(value, Variable):
        return value.__kiln_node__()
    return value


def _zero() -> Node:
    return _module("kiln.ops").convert_to_tensor(np.zeros((), kiln.config.floatx()))


def _module(name: str) -> Any:
    """A module above the core, imported when a function is captured (``import kiln`` loads
    this module: it stays as light as the core, and kiln/core's type check stays in it)."""
    return importlib.import_module(name)


def _trace_variables() -> Any:
    from kiln.core import trace_variables

    return trace_variables()


# ---- errors ------------------------------------------------------------------------------------
_SYMBOLIC_HINTS = ("symbolic kiln tensor", "'Node'", "kiln.Tensor", "unknown leading dimension",
                   "has no value until the graph runs")


def _user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the traceback outside kiln and NumPy: the user's line."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        path = os.path.abspath(frame.filename)
        if not path.startswith(_KILN_DIR) and f"{os.sep}numpy{os.sep}" not in path:
            return frame
    return None


def _explain(exc: Exception, name: str) -> Exception:
    """A :class:`CaptureError` naming the user's line for an error that comes from using a
    symbolic tensor's value in Python; other errors unchanged."""
    text = str(exc)
    if not any(h in text for h in _SYMBOLIC_HINTS):
        return exc
    frame = _user_frame(exc)
    where = ""
    if frame is not None:
        line = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
        where = f" at {frame.filename}:{frame.lineno} (`{line}`)"
    return CaptureError(
        f"kiln.function: {name!r} could not be captured into one graph{where}: "
        f"{type(exc).__name__}: {text}. Inside @kiln.function the arrays are symbolic "
        "tensors whose values exist only when the graph runs, so Python `if`/`while`/"
        "float()/np.asarray on them cannot be traced: use kiln.ops.cond(pred, true_fn, "
        "false_fn) or kiln.ops.where for a value-dependent branch, or call the function "
        "without @kiln.function (eagerly)")


__all__ = ["CaptureError", "Captured", "function"]
