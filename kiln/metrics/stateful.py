"""Keras-style metrics with variables: ``add_variable``/``add_weight`` in ``__init__``,
``update_state`` with ``kiln.ops`` and ``assign``/``assign_add``, ``result`` from the
variables (docs/features.md, "Metrics with variables").

kiln compiles a metric's statistics into the step graph (:class:`~kiln.metrics.Metric`'s
``stats``). For such a metric ``stats`` traces ``update_state`` under
:func:`kiln.core.trace_variables`: every assignment is recorded, not written, and the metric's
statistics are the *increments* of its variables (``new - old``; an ``assign_add(x)`` chain
gives ``x`` itself, exactly). ``merge`` adds them to the variables. So the variables must be
updated additively (``assign_add``, or ``assign(v + x)``) for data-parallel training, where
the increments of the processes are summed; an update such as a running maximum is correct on
one process only.
"""

from __future__ import annotations

import contextvars
import inspect
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, Variable, is_tensor, trace_variables
from kiln.foreign import register_type as register_pytree_type


class MetricVariable(Variable):
    """A metric's state variable (``Metric.add_variable``): a :class:`kiln.Variable` with
    Keras' ``aggregation`` (how processes combine it; only ``"sum"`` is exact, see the
    module)."""

    def __init__(self, value: Any, name: str, dtype: str, aggregation: str = "sum"):
        super().__init__(value, name=name, trainable=False, dtype=dtype)
        self.aggregation = aggregation


class StateVariable(Variable):
    """One slot of a built-in metric's state (kept as NumPy values) seen as a Variable, what
    ``Metric.variables`` gives there as Keras' metrics give their Variables:
    ``variable.assign(value)`` writes the metric's state (keras.io's JAX training loop writes
    the state its jitted step returned back this way)."""

    def __init__(self, metric: Any, index: int, value: Any):
        value = np.asarray(value)
        super().__init__(value, name=f"{metric.name}/state_{index}", trainable=False,
                         dtype=value.dtype.name)
        self._metric, self._index = metric, index

    def assign(self, value: Any) -> Variable:
        out = super().assign(value)
        state = list(self._metric._state_values())
        state[self._index] = np.asarray(self.value)
        self._metric._set_state_values(state)
        return out


register_pytree_type(MetricVariable)
register_pytree_type(StateVariable)


def make_variable(owner: str, shape: Any, initializer: Any, dtype: Any, aggregation: str,
                  name: str | None, count: int) -> MetricVariable:
    """Creates one metric variable (zeros without an initializer)."""
    from kiln import initializers

    if shape is None:
        shape = ()
    shape = tuple(int(d) for d in shape) if isinstance(shape, (tuple, list)) else (int(shape),)
    if aggregation not in ("sum", "mean", "only_first_replica", "none", None):
        raise ValueError(f"{owner}.add_variable: aggregation must be 'sum', 'mean', "
                         f"'only_first_replica' or 'none', received {aggregation!r}")
    if initializer is None:
        value = np.zeros(shape, dtype)
    else:
        value = np.asarray(initializers.get(initializer)(shape, dtype=dtype), dtype=dtype)
    if value.shape != shape:
        raise ValueError(f"{owner}.add_variable: the initializer of {name!r} returned shape "
                         f"{value.shape}, expected {shape}")
    return MetricVariable(value, name=f"{owner}/{name or f'variable_{count}'}", dtype=dtype,
                          aggregation=aggregation or "none")


def _increment(node: Node, old: Node) -> Node:
    """``node - old``, read off exactly when ``node`` is ``old + x (+ y ...)``."""
    terms: list[Node] = []
    while node.op == "add" and len(node.inputs) == 2:
        a, b = node.inputs
        if a is old or a.op == "add":
            terms.append(b)
            node = a
        else:
            break
    if node is old and terms:
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return K.broadcast_to(total, old.shape) if total.shape != old.shape else total
    return node - old


_RECORDERS: contextvars.ContextVar[dict[int, list] | None] = contextvars.ContextVar(
    "kiln_metric_recorders", default=None)


def recorder(metric: Any) -> list | None:
    """While ``metric``'s ``update_state`` is traced: the list that collects the built-in
    statistics of its ``super().update_state(...)`` calls (else None)."""
    table = _RECORDERS.get()
    return None if table is None else table.get(id(metric))


def traced_increments(metric: Any, update: Any, args: tuple, sample_weight: Any) -> list[Node]:
    """Runs ``update(*args, sample_weight=...)`` recording assignments; returns one increment
    node per variable of ``metric`` (zeros for a variable it leaves alone), then the built-in
    statistics of its ``super().update_state`` calls (summed when it makes several)."""
    calls: list[list[Node]] = []
    token = _RECORDERS.set({**(_RECORDERS.get() or {}), id(metric): calls})
    try:
        with trace_variables() as trace:
            update(*args, sample_weight=sample_weight)
    finally:
        _RECORDERS.reset(token)
    out = []
    for v in metric._metric_variables:
        new = trace.current(v)
        old = v.__kiln_node__()
        out.append(K.zeros_like(old) if new is None or new is old else _increment(new, old))
    if metric._builtin_stats is not None:
        if not calls:
            raise ValueError(f"{metric.name}: update_state of this subclass of "
                             f"{type(metric).__mro__[1].__name__} never called "
                             "super().update_state(...), so the built-in statistics have no "
                             "values (call it, or subclass kiln.metrics.Metric instead)")
        total = calls[0]
        for more in calls[1:]:
            total = [a + b for a, b in zip(total, more)]
        out.extend(total)
    return out


def n_tensor_args(update: Any) -> int:
    """The number of tensor arguments of an ``update_state`` before ``sample_weight``."""
    params = list(inspect.signature(update).parameters.values())[1:]
    return sum(1 for p in params if p.name != "sample_weight" and p.kind in (
        p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)) or 2


def evaluate(value: Any) -> Any:
    """A ``result()`` built with ``kiln.ops`` on the variables, computed now (NumPy
    reference backend; floats as Python floats, arrays as arrays)."""
    import kiln

    def one(x: Any) -> Any:
        if not (isinstance(x, Node) or is_tensor(x) or isinstance(x, Variable)):
            return x
        out = np.asarray(kiln.function([], [K.identity(x)], backend="reference")()[0])
        return float(out) if out.ndim == 0 else out

    if isinstance(value, dict):
        return {k: one(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(one(v) for v in value)
    return one(value)


def computed(result: Any) -> Any:
    """Wraps a ``result`` so that graph nodes it returns are computed (:func:`evaluate`)."""

    def wrapped(self: Any) -> Any:
        return evaluate(result(self))

    wrapped.__name__ = result.__name__
    wrapped.__doc__ = result.__doc__
    wrapped.__wrapped__ = result  # type: ignore[attr-defined]
    return wrapped


def routed(user_update: Any, base_update: Any) -> Any:
    """A Keras-style ``update_state`` routed through ``Metric.update_state``: on NumPy arrays
    the compiled statistics (then ``merge``), inside a traced step the step's outputs; the
    user's method itself runs only while ``Metric.stats`` records it."""

    def update_state(self: Any, *args: Any, sample_weight: Any = None) -> Any:
        if sample_weight is None and len(args) == self.n_inputs + 1:  # Keras allows it
            args, sample_weight = args[:-1], args[-1]
        return base_update(self, *args, sample_weight=sample_weight)

    update_state.__doc__ = user_update.__doc__
    update_state.__wrapped__ = user_update  # type: ignore[attr-defined]
    return update_state
