"""The Callback base class: every Keras 3 hook, ``set_model``/``set_params``, and
``get_state``/``set_state`` for callbacks whose progress must survive a checkpoint."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


class Callback:
    """Base class of training callbacks (Keras 3 hooks and semantics).

    The trainer calls the hooks; ``self.model`` is the model being trained (set with
    :meth:`set_model`) and ``self.params`` the loop's parameters (``verbose``, ``epochs``,
    ``steps``). ``on_train_batch_begin/end`` call ``on_batch_begin/end`` by default, as in
    Keras. Stateful callbacks override :meth:`get_state` / :meth:`set_state` with JSON-able
    dicts so that checkpoints can store them.

    Example:
        >>> class PrintLoss(kiln.callbacks.Callback):
        ...     def on_epoch_end(self, epoch, logs=None):
        ...         print(epoch, logs["loss"])
    """

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.model: Any = None

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_model(self, model: Any) -> None:
        self.model = model

    # ---- state for checkpoints ---------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """The callback's progress as a JSON-able dict (empty for stateless callbacks)."""
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restores what :meth:`get_state` returned."""

    # ---- hooks -----------------------------------------------------------------------------
    def on_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Alias of ``on_train_batch_begin`` (backward compatibility)."""

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """Alias of ``on_train_batch_end`` (backward compatibility)."""

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """At the start of an epoch (``epoch`` is 0-based)."""

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """At the end of an epoch; ``logs`` holds the epoch's metrics (``val_`` prefixed
        for validation)."""

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self.on_batch_begin(batch, logs=logs)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.on_batch_end(batch, logs=logs)

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Before a batch of ``evaluate`` (or of validation inside ``fit``)."""

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """After a batch of ``evaluate`` (or of validation inside ``fit``)."""

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        """Before a batch of ``predict``."""

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        """After a batch of ``predict``."""

    def on_train_begin(self, logs: dict | None = None) -> None:
        """At the start of ``fit``."""

    def on_train_end(self, logs: dict | None = None) -> None:
        """At the end of ``fit`` (also after ``stop_training``)."""

    def on_test_begin(self, logs: dict | None = None) -> None:
        """At the start of ``evaluate`` (or of validation inside ``fit``)."""

    def on_test_end(self, logs: dict | None = None) -> None:
        """At the end of ``evaluate`` (or of validation inside ``fit``)."""

    def on_predict_begin(self, logs: dict | None = None) -> None:
        """At the start of ``predict``."""

    def on_predict_end(self, logs: dict | None = None) -> None:
        """At the end of ``predict``."""


# ---- JSON helpers for get_state ---------------------------------------------------------------
def float_to_json(x: Any) -> Any:
    """A float for JSON: inf/-inf/nan become the strings "inf"/"-inf"/"nan" (strict JSON has
    no such numbers); None stays None."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def float_from_json(x: Any) -> Any:
    if x is None:
        return None
    return float(x)


def arrays_to_json(arrays: list[np.ndarray] | None) -> Any:
    """Weights as ``[{"dtype", "shape", "data"}]`` with exact float round trips."""
    if arrays is None:
        return None
    return [{"dtype": np.asarray(a).dtype.name, "shape": list(np.shape(a)),
             "data": np.asarray(a).ravel().tolist()} for a in arrays]


def arrays_from_json(data: Any) -> list[np.ndarray] | None:
    if data is None:
        return None
    return [np.asarray(d["data"], dtype=d["dtype"]).reshape(d["shape"]) for d in data]
