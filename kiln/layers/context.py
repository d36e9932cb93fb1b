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


_current: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "kiln_trace", default=None)


def current() -> TraceContext | None:
    """The active tracing context, or None outside of a model trace."""
    return _current.get()


@contextlib.contextmanager
def trace(training: bool = False, rng_key: Node | None = None) -> Iterator[TraceContext]:
    """Opens a tracing context for one graph (training or inference)."""
    ctx = TraceContext(training=training, rng_key=rng_key)
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
