"""One step's weights, never a mix: the lock that a training step and the weight readers and
writers share (``Model.get_weights``, ``set_weights``, ``save_weights``, ``save``).

A compiled training step updates the variables in place while it runs, so another thread
reading them at that moment could copy some layers before the update and some after. The fit
loop holds the model's weights lock around each step (one uncontended acquire, well under a
microsecond), and the readers take it for the whole copy or file write: a snapshot from another
thread during ``fit`` holds the weights after some step k, all of them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_GUARD = threading.Lock()


class _WeightsLock:
    """A model's re-entrant weights lock; a copy of the model gets a fresh one."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        self.lock = threading.RLock()

    def __reduce__(self) -> tuple:
        return (_WeightsLock, ())


def weights_lock(model: Any) -> Any:
    """The model's weights lock (created on first use; not setattr: models track their
    attributes)."""
    holder = model.__dict__.get("_weights_lock")
    if holder is None:
        with _GUARD:
            holder = model.__dict__.setdefault("_weights_lock", _WeightsLock())
    return holder.lock


def consistent(method: Callable) -> Callable:
    """Runs ``method`` under the model's weights lock (between two training steps)."""

    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with weights_lock(self):
            return method(self, *args, **kwargs)

    return locked


__all__ = ["consistent", "weights_lock"]
