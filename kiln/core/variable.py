"""Variables: persistent tensors (weights, optimizer slots) that graphs read and update."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from kiln.core import aligned
from kiln.core.ir import Node, canonical_dtype

_counter = itertools.count()


class VariableTrace:
    """While tracing one step graph: ``Variable.assign(node)`` (and ``assign_add``/``sub``)
    records an update instead of writing, and later reads of that Variable in the same trace
    see the updated node, as statements run in order (TensorFlow's graph mode behaves so).

    ``updates`` maps ``id(variable)`` to ``(variable, latest node)`` in first-update order:
    the step's updates, written when the compiled step runs."""

    def __init__(self) -> None:
        self.updates: dict[int, tuple[Variable, Node]] = {}
        self._reads: dict[int, Node] = {}

    def record(self, var: Variable, node: Node) -> None:
        from kiln.core.ops.registry import apply

        self.updates[id(var)] = (var, node)
        # a read after the update is the variable's new value, not a function of what
        # computed it: no gradient flows back through the update (a GAN's generator step
        # differentiates through the updated discriminator, not through its update). As in
        # TensorFlow (a read of a tf.Variable is a leaf of the tape), the gradient of a later
        # read of a trainable float Variable is the Variable's own: ``leaf + stop_gradient(
        # new - leaf)`` (PixelCNN's ``kernel.assign(kernel * mask)`` then ``conv(kernel)``
        # trains the kernel; a second discriminator step after the first one's update)
        read = apply("stop_gradient", node)
        if var.trainable and np.issubdtype(var.dtype, np.floating):
            leaf = var._leaf_node()
            read = apply("add", leaf, apply("stop_gradient", apply("sub", node, leaf)))
        self._reads[id(var)] = read

    def current(self, var: Variable) -> Node | None:
        return self._reads.get(id(var))

    def update_list(self) -> list[tuple[Variable, Node]]:
        return list(self.updates.values())


_TRACE: contextvars.ContextVar[VariableTrace | None] = contextvars.ContextVar(
    "kiln_variable_trace", default=None)


#: define-by-run (``compile(run_eagerly=True)``): while True (and no step is traced), a
#: Variable in a ``kiln.ops`` call or a Python operator reads as its current value, eagerly
#: (set by ``kiln.ops._eager.reading_values`` around a user's ``call()``)
EAGER_READS: contextvars.ContextVar[bool] = contextvars.ContextVar("kiln_eager_reads",
                                                                   default=False)
#: runs an operator of a Variable eagerly: ``eager_operator(name, builder, args)`` (set by
#: kiln.ops; the builder makes the graph node from the same arguments)
eager_operator: Any = None


def reads_values(values: tuple) -> bool:
    """Whether an operator on ``values`` runs eagerly: define-by-run, no traced step, no
    symbolic operand (Variables read as values)."""
    if not EAGER_READS.get() or _TRACE.get() is not None or eager_operator is None:
        return False
    return not any(isinstance(v, Node) or hasattr(v, "__kiln_node__") and not isinstance(
        v, Variable) for v in values)


#: while True (a layer called on a functional model's symbolic inputs, outside any traced
#: step), a symbolic ``Variable.assign`` is discarded, as in Keras' ``StatelessScope`` of
#: symbolic calls: the functional model replays ``call()`` inside its traced steps, where the
#: update is recorded (PixelCNN's masked kernel ``kernel.assign(kernel * mask)``)
DISCARD_SYMBOLIC_ASSIGNS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "kiln_discard_symbolic_assigns", default=False)


@contextlib.contextmanager
def discarding_symbolic_assigns() -> Iterator[None]:
    """Sets :data:`DISCARD_SYMBOLIC_ASSIGNS` for the block."""
    token = DISCARD_SYMBOLIC_ASSIGNS.set(True)
    try:
        yield
    finally:
        DISCARD_SYMBOLIC_ASSIGNS.reset(token)


@contextlib.contextmanager
def trace_variables() -> Iterator[VariableTrace]:
    """Activates a :class:`VariableTrace` (see there) for the block; yields it."""
    trace = VariableTrace()
    token = _TRACE.set(trace)
    try:
        yield trace
    finally:
        _TRACE.reset(token)


class Variable:
    """A persistent, mutable tensor usable wherever a symbolic tensor is.

    In a graph a Variable appears as a ``param`` node; compiled functions read its current
    value on every call and may update it in place (``kiln.function(..., updates=...)``).

    Args:
        value: initial value (array-like); float values default to float32.
        name: optional name.
        trainable: the initial value of :attr:`trainable`.
        dtype: optional dtype; otherwise float32 for floats, the array's dtype for the rest.

    Example:
        >>> w = kiln.Variable(np.zeros((3, 2)), name="w")
        >>> y = x @ w
        >>> w.assign(np.ones((3, 2)))
    """

    # Device backends (kiln.core.backends.cuda) keep copies of the value: `_version` counts
    # host-side writes (assign, the executor's update writes); `_device_pull`, while set, copies
    # a newer device value back into `_value` before the host buffer is read.
    _version: int = 0
    _device_pull: Any = None

    def __init__(self, value: Any, name: str | None = None, trainable: bool = True,
                 dtype: str | None = None):
        arr = np.asarray(value)
        if dtype is None:
            dtype = "float32" if arr.dtype.kind == "f" else canonical_dtype(arr.dtype)
        self.dtype = canonical_dtype(dtype)
        # C order always: compiled programs read a Variable through its flat buffer; its
        # first element starts a cache line (kiln/core/aligned.py)
        self._value = aligned.copy(arr, self.dtype)
        self.name = name or f"variable_{next(_counter)}"
        self.trainable = trainable
        self._node: Node | None = None

    @property
    def trainable(self) -> bool:
        """Whether training updates this variable (default True); settable.

        ``Layer.add_weight(..., trainable=...)`` sets it. A layer's ``trainable_weights`` are
        its weights with ``trainable`` set (while the layer itself is trainable), and Keras'
        weight layout stores them first. ``Layer.trainable = False`` freezes a whole layer
        without changing this flag."""
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._value.shape

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def value(self) -> np.ndarray:
        """The live host buffer (compiled functions update it in place); do not resize it.

        A newer copy on a device is copied back first. Write through :meth:`assign` (which
        bumps ``_version``) so that device copies see the change."""
        if self._device_pull is not None:
            self._device_pull(self)
        return self._value

    def numpy(self) -> np.ndarray:
        """A copy of the current value."""
        return self.value.copy()

    def assign(self, value: Any) -> Variable:
        """Overwrites the value in place; the shape must match.

        With a symbolic ``value`` (a graph node) inside a traced step (a layer's ``call``, a
        custom ``train_step``), records a graph update instead: the compiled step writes it,
        and later reads in the same trace see it (:class:`VariableTrace`)."""
        if isinstance(value, Node) or hasattr(value, "__kiln_node__") and not isinstance(
                value, Variable):
            return self._assign_symbolic(value)
        trace = _TRACE.get()
        if isinstance(value, Variable) and trace is not None:
            return self._assign_symbolic(value)
        arr = np.asarray(value, dtype=self.dtype)
        if arr.shape != self._value.shape:
            arr = np.broadcast_to(arr, self._value.shape) if arr.ndim == 0 else arr
            if arr.shape != self._value.shape:
                raise ValueError(f"Variable {self.name!r}: cannot assign a value of shape "
                                 f"{arr.shape} to a variable of shape {self._value.shape}")
        self._device_pull = None  # the host value now wins over any device copy
        self._value[...] = arr
        self._version += 1
        return self

    def assign_add(self, delta: Any) -> Variable:
        """``assign(value + delta)`` (symbolic in a traced step, like :meth:`assign`)."""
        if _symbolic_context(delta):
            return self._assign_symbolic(self.__kiln_node__() + delta)
        return self.assign(self.value + np.asarray(delta, dtype=self.dtype))

    def assign_sub(self, delta: Any) -> Variable:
        """``assign(value - delta)`` (symbolic in a traced step, like :meth:`assign`)."""
        if _symbolic_context(delta):
            return self._assign_symbolic(self.__kiln_node__() - delta)
        return self.assign(self.value - np.asarray(delta, dtype=self.dtype))

    def _assign_symbolic(self, value: Any) -> Variable:
        from kiln.core.ops._rules import as_node
        from kiln.core.ops.elementwise import cast

        trace = _TRACE.get()
        if trace is None and DISCARD_SYMBOLIC_ASSIGNS.get():
            return self
        if trace is None:
            raise ValueError(f"Variable {self.name!r}: assign() received a symbolic tensor "
                             "outside a traced step; symbolic updates happen inside a layer's "
                             "call() or a train_step traced by fit (or pass a NumPy value)")
        node = as_node(value, self.dtype)
        if node.dtype != self.dtype:
            node = cast(node, self.dtype)
        if node.shape != self._value.shape:
            from kiln.core.ops.movement import broadcast_to
            try:
                node = broadcast_to(node, self._value.shape)
            except (ValueError, TypeError) as exc:
                raise ValueError(f"Variable {self.name!r}: cannot assign a value of shape "
                                 f"{node.shape} to a variable of shape {self._value.shape}"
                                 ) from exc
        trace.record(self, node)
        return self

    def __kiln_node__(self) -> Node:
        trace = _TRACE.get()
        if trace is not None:
            current = trace.current(self)
            if current is not None:
                return current
        return self._leaf_node()

    def _leaf_node(self) -> Node:
        """The graph's parameter node of this Variable (what gradients are taken against)."""
        if self._node is None:
            from kiln.core.ops.source import param_node

            self._node = param_node(self, self._value.shape, self.dtype, self.name)
        return self._node

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.value
        return value if dtype is None else value.astype(dtype)

    def __jax_array__(self) -> np.ndarray:
        """JAX reads a Variable as its current value (``jax.jit(step)(model.trainable_variables
        ...)``, as with Keras' variables on the JAX backend)."""
        return self.value.copy()

    def __repr__(self) -> str:
        return f"<kiln.Variable {self.name!r} shape={self.shape} dtype={self.dtype}>"

    # Arithmetic works like on the param node (operators are attached by kiln.core.ops).


def _symbolic_context(value: Any) -> bool:
    """Whether ``assign_add``/``assign_sub`` of ``value`` is a graph update: a symbolic value,
    or any value inside a traced step (``self.count.assign_add(1)`` in ``call`` counts calls
    of the compiled step, not traces). ``assign`` of a NumPy value stays immediate even in a
    trace: layers built lazily inside a trace initialize their weights with it."""
    return isinstance(value, Node) or hasattr(value, "__kiln_node__") or \
        _TRACE.get() is not None
