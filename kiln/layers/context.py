"""The tracing context: what a layer's ``call`` needs to know while it adds graph nodes.

When a model traces its training step it opens ``trace(training=True, rng_key=key)``. Inside,
``Dropout`` reads the random key, ``BatchNormalization`` records its moving-statistics updates
and any layer may add losses; the trainer collects them into the same graph.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kiln.core import Node


@dataclass
class TraceContext:
    training: bool = False
    rng_key: Node | None = None
    updates: list[tuple[Any, Node]] = field(default_factory=list)  # (Variable, new value)
    losses: list[Node] = field(default_factory=list)
    # data-parallel steps (kiln.distribution): this rank's share of the global batch, a
    # scalar placeholder (0 on a rank that got no rows); synchronized layers read it
    replica_weight: Node | None = None
    # symbolic Metric.update_state calls: (metric, its statistics nodes), merged after a step
    metric_updates: list[tuple[Any, list[Node]]] = field(default_factory=list)
    # optimizers whose apply() ran in this trace (a custom train_step): before_step each step
    optimizers: list[Any] = field(default_factory=list)
    # a custom train_step is traced: Metric.result() returns a DeferredResult, read after the
    # compiled step ran and the metrics merged its statistics
    defer_results: bool = False
    # kiln.random draws per SeedGenerator in this trace (each draw gets its own salt)
    random_draws: dict[int, int] = field(default_factory=dict)


class DeferredResult:
    """``metric.result()`` called while a custom step is traced: the logs read the metric's
    value after each run of the compiled step (see ``kiln/models/custom_steps.py``)."""

    __slots__ = ("metric",)

    def __init__(self, metric: Any):
        self.metric = metric

    def __repr__(self) -> str:
        return f"<result of metric {getattr(self.metric, 'name', '?')!r}, read after each step>"


_current: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "kiln_trace", default=None)


def current() -> TraceContext | None:
    """The active tracing context, or None outside of a model trace."""
    return _current.get()


@contextlib.contextmanager
def trace(training: bool = False, rng_key: Node | None = None,
          replica_weight: Node | None = None) -> Iterator[TraceContext]:
    """Opens a tracing context for one graph (training or inference)."""
    ctx = TraceContext(training=training, rng_key=rng_key, replica_weight=replica_weight)
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


def in_training(training: bool | None) -> bool:
    """Resolves a layer's ``training`` argument against the context (default: inference)."""
    if training is not None:
        return bool(training)
    ctx = current()
    return bool(ctx and ctx.training)
