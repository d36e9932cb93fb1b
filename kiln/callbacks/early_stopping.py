"""EarlyStopping: stop training when a monitored metric stops improving."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln.callbacks._monitor import check_mode, infer_mode
from kiln.callbacks.callback import (
    Callback,
    arrays_from_json,
    arrays_to_json,
    float_from_json,
    float_to_json,
)


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has not improved for ``patience`` epochs (Keras 3).

    At the end of every epoch from ``start_from_epoch`` on, a value counts as an improvement
    if it beats the best so far by more than ``min_delta``. After ``patience`` epochs without
    one (and never at epoch 0) it sets ``model.stop_training``. With a ``baseline``, the wait
    only restarts on values that also beat the baseline.

    Args:
        monitor: the metric to watch ("val_loss").
        min_delta: minimum change that counts as an improvement (absolute value used).
        patience: epochs without improvement before stopping.
        verbose: 1 prints a message when stopping and when restoring weights.
        mode: "min", "max" or "auto" (from the metric: losses and errors are minimized,
            accuracies maximized; metric objects with a direction are asked).
        baseline: a value the metric must beat.
        restore_best_weights: at the end of training, put back the weights of the best epoch
            (``model.get_weights`` / ``model.set_weights``).
        start_from_epoch: epochs of warm-up before monitoring starts.

    Example:
        >>> stop = EarlyStopping(monitor="val_loss", patience=3, restore_best_weights=True)
        >>> model.fit(x, y, validation_split=0.1, epochs=100, callbacks=[stop])
    """

    def __init__(self, monitor: str = "val_loss", min_delta: float = 0, patience: int = 0,
                 verbose: int = 0, mode: str = "auto", baseline: float | None = None,
                 restore_best_weights: bool = False, start_from_epoch: int = 0):
        super().__init__()
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.min_delta = abs(min_delta)
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.mode = check_mode("EarlyStopping", mode)
        self._direction: str | None = None
        self.best: float | None = None
        self.wait = 0
        self.stopped_epoch = 0
        self.best_epoch = 0
        self.best_weights: list | None = None

    def _setup(self) -> None:
        self._direction = infer_mode("EarlyStopping", self.monitor, self.mode, self.model)
        if self.best is None:
            self.best = float("inf") if self._direction == "min" else -float("inf")

    def _is_improvement(self, value: float, reference: float) -> bool:
        if self._direction == "min":
            return value + self.min_delta < reference
        return value - self.min_delta > reference

    def on_train_begin(self, logs: dict | None = None) -> None:
        # Allows reuse across fit calls. As in Keras, `best` is kept (a second fit must beat
        # the first one's best); restore a checkpointed state with set_state after this hook.
        self.wait = 0
        self.stopped_epoch = 0
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self._direction is None:
            self._setup()
        current = self.get_monitor_value(logs)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            # the current weights are the best seen so far
            self.best_weights = self._copy_weights()
            self.best_epoch = epoch
        self.wait += 1
        assert self.best is not None
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self._copy_weights()
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print("Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)

    def _copy_weights(self) -> list:
        # copies: a model may hand out its live buffers
        return [np.array(w, copy=True) for w in self.model.get_weights()]

    def get_monitor_value(self, logs: dict | None) -> float | None:
        logs = logs or {}
        value = logs.get(self.monitor)
        if value is None:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not "
                          f"available. Available metrics are: {','.join(logs)}", stacklevel=2)
            return None
        return float(value)

    def get_state(self) -> dict[str, Any]:
        return {"wait": self.wait, "stopped_epoch": self.stopped_epoch,
                "best": float_to_json(self.best), "best_epoch": self.best_epoch,
                "best_weights": arrays_to_json(self.best_weights)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.wait = int(state.get("wait", 0))
        self.stopped_epoch = int(state.get("stopped_epoch", 0))
        self.best = float_from_json(state.get("best"))
        self.best_epoch = int(state.get("best_epoch", 0))
        self.best_weights = arrays_from_json(state.get("best_weights"))
