"""ReduceLROnPlateau: lower the learning rate when a metric stops improving."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kiln.callbacks.callback import Callback, float_from_json, float_to_json


class ReduceLROnPlateau(Callback):
    """Multiplies ``model.optimizer.learning_rate`` by ``factor`` after ``patience`` epochs
    without improvement of ``monitor`` (Keras 3 semantics).

    An improvement is ``current < best - min_delta`` (mode "min") or
    ``current > best + min_delta`` ("max"); "auto" means "max" when the name contains "acc",
    else "min". After a reduction, ``cooldown`` epochs pass before counting again. The rate
    never goes below ``min_lr``. The current rate is added to the epoch logs as
    ``learning_rate``.

    Args:
        monitor: the metric ("val_loss").
        factor: the multiplier, < 1 (0.1).
        patience: epochs without improvement before reducing (10).
        verbose: 1 prints a message on each reduction.
        mode: "auto", "min" or "max".
        min_delta: threshold for an improvement (1e-4).
        cooldown: epochs to wait after a reduction (0).
        min_lr: lower bound of the rate (0.0).

    Example:
        >>> ReduceLROnPlateau(monitor="val_loss", factor=0.2, patience=5, min_lr=1e-4)
    """

    def __init__(self, monitor: str = "val_loss", factor: float = 0.1, patience: int = 10,
                 verbose: int = 0, mode: str = "auto", min_delta: float = 1e-4,
                 cooldown: int = 0, min_lr: float = 0.0, **kwargs: Any):
        super().__init__()
        if kwargs:
            raise ValueError(f"ReduceLROnPlateau: argument(s) not recognized: {kwargs}")
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau does not support a factor >= 1.0. "
                             f"Received factor={factor}")
        self.monitor = monitor
        self.factor = factor
        self.min_lr = min_lr
        self.min_delta = min_delta
        self.patience = patience
        self.verbose = verbose
        self.cooldown = cooldown
        self.cooldown_counter = 0
        self.wait = 0
        self.mode = mode
        self.best = 0.0
        self._reset()

    def _reset(self) -> None:
        if self.mode not in ("auto", "min", "max"):
            warnings.warn(f"Learning rate reduction mode {self.mode} is unknown, fallback to "
                          "auto mode.", stacklevel=2)
            self.mode = "auto"
        self._maximize = self.mode == "max" or (self.mode == "auto" and "acc" in self.monitor)
        self.best = -np.inf if self._maximize else np.inf
        self.cooldown_counter = 0
        self.wait = 0

    def _improved(self, current: float) -> bool:
        if self._maximize:
            return current > self.best + self.min_delta
        return current < self.best - self.min_delta

    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._reset()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        optimizer = self.model.optimizer
        logs["learning_rate"] = float(optimizer.learning_rate)
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Learning rate reduction is conditioned on metric `{self.monitor}` "
                          f"which is not available. Available metrics are: {','.join(logs)}.",
                          stacklevel=2)
            return
        current = float(current)
        if self.in_cooldown():
            self.cooldown_counter -= 1
            self.wait = 0
        if self._improved(current):
            self.best = current
            self.wait = 0
        elif not self.in_cooldown():
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = float(optimizer.learning_rate)
                if old_lr > np.float32(self.min_lr):
                    new_lr = max(old_lr * self.factor, self.min_lr)
                    optimizer.learning_rate = new_lr
                    if self.verbose > 0:
                        print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate "
                              f"to {new_lr}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0

    def get_state(self) -> dict[str, Any]:
        return {"wait": self.wait, "cooldown_counter": self.cooldown_counter,
                "best": float_to_json(self.best)}

    def set_state(self, state: dict[str, Any]) -> None:
        self.wait = int(state.get("wait", 0))
        self.cooldown_counter = int(state.get("cooldown_counter", 0))
        self.best = float_from_json(state.get("best", self.best))
