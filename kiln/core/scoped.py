"""A value set for one block of one thread (a context variable), as the CPU backend's options
(``backends/cpu/options.py``) and the passes' (``passes/_util.py``) are: docs/architecture.md,
"The CPU target" (Options)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")


@contextlib.contextmanager
def scoped(var: contextvars.ContextVar, value: T, kind: type, who: str) -> Iterator[T]:
    """``var`` holds ``value`` in this thread inside the block, and what it held before after
    it (also on an error).

    Raises:
        TypeError: ``value`` is not a ``kind`` (``who`` names the caller).
    """
    if not isinstance(value, kind):
        raise TypeError(f"{who}: expected a {kind.__name__}, received {type(value).__name__}")
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)
