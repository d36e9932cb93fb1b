"""Compiled functions: ``kiln.function(inputs, outputs, updates)``.

A :class:`Function` owns one graph (outputs plus the new values of updated Variables), runs the
optimization pipeline on it, and hands it to a backend. Calling it checks the fed arrays against
the placeholders' types, runs the program, applies the updates (all computed from the old
values, then written in place) and returns the outputs.

Threads (docs/architecture.md, "Threads"): a program computes in preallocated buffers, so a
call must own the buffers it runs in. A function with updates (a training step), or whose
backend has no ``run_copied``, runs one call at a time under the function's lock (serial
semantics for the Variables too; uncontended it costs well under a microsecond). A function
without updates on a backend with ``run_copied`` (the CPU) runs concurrent calls in separate
plans (each call checks one out, copies its outputs, returns it), so threads predicting with
one model run in parallel (the kernels release the GIL) and give the serial results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln import config
from kiln.core import gc_pause
from kiln.core.backends import get_backend
from kiln.core.ir import Graph, Node
from kiln.core.ops._rules import as_node, fmt
from kiln.core.passes import optimize as optimize_graph
from kiln.core.variable import Variable


def check_feed(fn_name: str, index: int, ph: Node, value: Any) -> np.ndarray:
    """Converts a fed value to the placeholder's dtype, or raises naming the input."""
    want = ph.type
    label = f"input {index}" + (f" ({ph.name!r})" if ph.name else "")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise TypeError(f"{fn_name}: {label} could not be converted to an array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{fn_name}: {label} must be numeric, received dtype {arr.dtype}")
    if arr.ndim != want.ndim or any(d is not None and d != a for d, a in zip(want.shape,
                                                                             arr.shape)):
        raise ValueError(f"{fn_name}: {label} expected shape {fmt(want.shape)}, received "
                         f"{fmt(arr.shape)}")
    if arr.dtype.name != want.dtype:
        kind_ok = (want.dtype.startswith("float") or arr.dtype.kind in "biu"
                   and want.dtype.startswith("int") or want.dtype == "bool"
                   and arr.dtype.kind == "b")
        if not kind_ok:
            raise TypeError(f"{fn_name}: {label} expected dtype {want.dtype}, received "
                            f"{arr.dtype} (cast it explicitly)")
        arr = arr.astype(want.dtype)
    return arr


class Function:
    """A compiled graph function. Create with :func:`function`.

    Attributes:
        graph: the graph as built (before optimization).
        optimized_graph: the graph the backend runs.
        report: the optimization report (passes, kernels, planned memory), when available.
    """

    def __init__(self, inputs: Sequence[Node], outputs: Any, updates: Any = None,
                 backend: str | None = None, optimize: bool = True, name: str = "function",
                 memory_budget: Any = None, batch_size: int | None = None,
                 device: str | None = None):
        self.name = name
        self.inputs = [as_node(i) for i in inputs]
        for i, ph in enumerate(self.inputs):
            if ph.op != "placeholder":
                raise TypeError(f"{name}: input {i} must be a placeholder, received a "
                                f"{ph.op} node {ph.type}")
        # per input: (dtype, k, shape[k:], placeholder) for the fast path of __call__, where
        # k = 1 when only the batch dim is unknown, else 0 (a shape still holding None never
        # equals an array's, so other unknown dims always take check_feed)
        self._feed_specs = []
        for ph in self.inputs:
            skip = 1 if ph.ndim and ph.shape[0] is None else 0
            self._feed_specs.append((np.dtype(ph.dtype), skip, tuple(ph.shape[skip:]), ph))
        self._single = not isinstance(outputs, list | tuple)
        outs = [outputs] if self._single else list(outputs)
        self.outputs = [as_node(o) for o in outs]
        self.updates: list[tuple[Variable, Node]] = []
        for pair in updates or []:
            var, value = pair
            if not isinstance(var, Variable):
                raise TypeError(f"{name}: updates must be (Variable, tensor) pairs, received "
                                f"{type(var).__name__}")
            node = as_node(value, var.dtype)
            if len(node.shape) != len(var.shape) or any(
                    d is not None and d != v for d, v in zip(node.shape, var.shape)):
                raise ValueError(f"{name}: update of {var.name!r} has shape {fmt(node.shape)}, "
                                 f"the variable has {fmt(var.shape)}")
            if node.dtype != var.dtype:
                node = _cast(node, var.dtype)
            self.updates.append((var, node))
        self.graph = Graph(self.inputs, self.outputs + [v for _, v in self.updates])
        self.backend_name = backend or backend_for_device(device or config.device())
        self.report = None
        t0 = time.perf_counter()
        graph = self.graph
        try:
            with gc_pause.paused():  # no collector pauses while compiling (kiln/core/gc_pause.py)
                if optimize:
                    graph, self.report = optimize_graph(graph, memory_budget=memory_budget,
                                                        batch_size=batch_size)
                self.optimized_graph = graph
                n = len(self.outputs)
                update_outputs = [(n + k, var) for k, (var, _) in enumerate(self.updates)]
                backend_module = get_backend(self.backend_name)
                self.program = backend_module.compile_graph(graph, updates=update_outputs)
                describe = getattr(backend_module, "describe", None)
                if self.report is not None and describe is not None:
                    self.report.target = describe()
        except Exception as exc:
            if config.debug_enabled():  # KILN_DEBUG=1: say which graph the compiler failed on
                _add_note(exc, f"kiln: compiling {name!r} for the {self.backend_name} backend "
                          f"failed; the graph ({len(graph)} nodes):\n{_head(graph.dump())}")
            raise
        bind = getattr(self.program, "bind_updates", None)
        if bind is not None:  # device backends keep the updated Variables on the device
            bind([var for var, _ in self.updates])
        self.compile_seconds = time.perf_counter() - t0
        self.calls = 0
        self._lock = threading.Lock()
        # the thread-safe path (see the module docstring): pure functions on a backend that
        # runs each call in a plan of its own and returns copies of the outputs
        self._run_copied = None if self.updates else getattr(self.program, "run_copied", None)

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and len(self.inputs) != 1 and isinstance(args[0], list | tuple):
            args = tuple(args[0])
        if len(args) != len(self.inputs):
            raise TypeError(f"{self.name}: expected {len(self.inputs)} inputs, received "
                            f"{len(args)}")
        feeds = []
        for i, (a, (dt, skip, shape, ph)) in enumerate(zip(args, self._feed_specs)):
            # fast path: an array with the placeholder's dtype and shape
            if not (type(a) is np.ndarray and a.dtype == dt and a.shape[skip:] == shape
                    and (skip == 0 or a.ndim == len(shape) + 1)):
                a = check_feed(self.name, i, ph, a)
            feeds.append(a)
        if self._run_copied is not None:
            outs = self._run_copied(feeds)
            with self._lock:
                self.calls += 1
            return outs[0] if self._single else outs
        with self._lock:  # the program's buffers and the Variables: one call at a time
            results = self.program.run(feeds)
            n = len(self.outputs)
            outs = [np.array(r, copy=True) for r in results[:n]]
            if not getattr(self.program, "updates_on_device", False):
                for (var, _), value in zip(self.updates, results[n:]):
                    if value is not var.value:
                        var.value[...] = value
                    var._version += 1  # device copies of `var` are stale now
            self.calls += 1
        return outs[0] if self._single else outs

    def serve(self, x: np.ndarray) -> Any:
        """``self(x)`` for one array ``x``: where this function has one input and no updates
        and ``x`` has the input's dtype and sample shape, the program's thread-safe call
        without :meth:`__call__`'s general feed handling (the serving call of
        ``predict_on_batch`` and ``model(x)``: docs/architecture.md, "Threads"); else
        :meth:`__call__`."""
        run = self._run_copied
        if run is None or len(self._feed_specs) != 1:
            return self(x)
        dt, skip, shape, _ = self._feed_specs[0]
        if x.dtype != dt or x.shape[skip:] != shape or (skip and x.ndim != len(shape) + 1):
            return self(x)
        outs = run((x,))
        with self._lock:
            self.calls += 1
        return outs[0] if self._single else outs

    def profile(self, *args: Any) -> Any:
        """Runs once and prints time per kernel (needs a backend with a profiler)."""
        if hasattr(self.program, "profile"):
            feeds = [check_feed(self.name, i, ph, a)
                     for i, (ph, a) in enumerate(zip(self.inputs, args))]
            with self._lock:
                return self.program.profile(feeds)
        raise NotImplementedError(f"the {self.backend_name} backend has no profiler")


def backend_for_device(device: str) -> str:
    """The backend for ``device`` (``device=`` or KILN_DEVICE): "cpu" -> the default backend,
    "cuda" -> "cuda", "auto" -> "cuda" when a real GPU is usable, else the default."""
    if device == "cuda":
        return "cuda"
    if device == "auto":
        from kiln.core.backends.cuda import real_gpu_available  # does not import numba.cuda

        return "cuda" if real_gpu_available() else config.default_backend()
    if device != "cpu":
        raise ValueError(f"device must be 'cpu', 'cuda' or 'auto', received {device!r}")
    return config.default_backend()


def _cast(node: Node, dtype: str) -> Node:
    from kiln.core.ops.elementwise import cast

    return cast(node, dtype)


def _add_note(exc: BaseException, note: str) -> None:
    add = getattr(exc, "add_note", None)  # Python >= 3.11
    if add is not None:
        add(note)


def _head(text: str, lines: int = 80) -> str:
    rows = text.splitlines()
    more = f"\n... {len(rows) - lines} more nodes" if len(rows) > lines else ""
    return "\n".join(rows[:lines]) + more


def function(inputs: Sequence[Any], outputs: Any, updates: Any = None,
             backend: str | None = None, **kwargs: Any) -> Function:
    """Compiles a callable from placeholders to outputs.

    Args:
        inputs: the placeholders, in call order.
        outputs: a tensor (the call returns an array) or a list of tensors (returns a list).
        updates: optional list of ``(variable, new_value)`` pairs applied after each call; all
            new values are computed from the values before the call.
        backend: "cpu" (numba, default) or "reference" (NumPy interpreter).

    Returns:
        A :class:`Function`; call it with NumPy arrays.

    Example:
        >>> x = kiln.placeholder((None, 3)); w = kiln.Variable(np.ones((3, 1)))
        >>> f = kiln.function([x], x @ w, updates=[(w, w * 0.5)])
        >>> f(np.ones((2, 3)))
        array([[3.], [3.]], dtype=float32)
    """
    return Function(inputs, outputs, updates, backend, **kwargs)
