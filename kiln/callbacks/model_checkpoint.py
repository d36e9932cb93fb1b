"""ModelCheckpoint: save the model or its weights every epoch or every N batches."""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from kiln.callbacks._monitor import check_mode, infer_mode
from kiln.callbacks.callback import Callback, float_from_json, float_to_json


class ModelCheckpoint(Callback):
    """Saves the model (``model.save(path)``) or its weights (``model.save_weights(path)``).

    ``filepath`` is formatted with ``filepath.format(epoch=epoch + 1, batch=batch + 1,
    **logs)`` (``batch`` only when saving every N batches), e.g.
    ``"ckpt-{epoch:02d}-{val_loss:.3f}.weights.h5"``. Missing directories are created.

    Args:
        filepath: the path pattern; must end in ``.weights.h5`` when ``save_weights_only``,
            else in ``.keras`` or ``.h5`` (as in Keras 3).
        monitor: the metric for ``save_best_only`` ("val_loss").
        verbose: 1 prints a message on each save decision.
        save_best_only: save only when ``monitor`` improves on the best value so far.
        save_weights_only: save weights only.
        mode: "min", "max" or "auto".
        save_freq: "epoch", or an int: save every that many training batches.
        initial_value_threshold: starting "best" value for ``save_best_only``.

    Example:
        >>> ckpt = ModelCheckpoint("ckpt/{epoch:02d}-{val_loss:.3f}.weights.h5",
        ...                        save_weights_only=True, save_best_only=True)
    """

    def __init__(self, filepath: str | os.PathLike, monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, save_weights_only: bool = False,
                 mode: str = "auto", save_freq: str | int = "epoch",
                 initial_value_threshold: float | None = None):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.mode = check_mode("ModelCheckpoint", mode)
        if save_freq != "epoch" and (isinstance(save_freq, bool) or
                                     not isinstance(save_freq, int) or save_freq < 1):
            raise ValueError(f"ModelCheckpoint: unrecognized save_freq {save_freq!r}; expected "
                             "'epoch' or a positive integer")
        self.save_freq = save_freq
        self.best: float | None = initial_value_threshold
        self._direction: str | None = None
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = -1  # so that a first end at batch b counts b + 1
        self._current_epoch = 0
        if save_weights_only:
            if not self.filepath.endswith(".weights.h5"):
                raise ValueError("ModelCheckpoint: with save_weights_only=True the filepath "
                                 "must end in `.weights.h5`. Received: "
                                 f"filepath={self.filepath}")
        elif not self.filepath.endswith((".keras", ".h5")):
            raise ValueError("ModelCheckpoint: the filepath must end in `.keras` or `.h5` "
                             f"(or use save_weights_only=True with `.weights.h5`). Received: "
                             f"filepath={self.filepath}")

    def _setup(self) -> None:
        self._direction = infer_mode("ModelCheckpoint", self.monitor, self.mode, self.model)
        if self.best is None:
            self.best = float("inf") if self._direction == "min" else -float("inf")

    def _is_improvement(self, value: float, reference: float | None) -> bool:
        if reference is None:
            return True
        return value < reference if self._direction == "min" else value > reference

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._current_epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._should_save_on_batch(batch):
            self._save_model(self._current_epoch, batch, logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.save_freq == "epoch":
            self._save_model(epoch, None, logs)

    def _should_save_on_batch(self, batch: int) -> bool:
        if self.save_freq == "epoch":
            return False
        if batch <= self._last_batch_seen:  # a new epoch
            add = batch + 1
        else:
            add = batch - self._last_batch_seen
        self._batches_seen_since_last_saving += add
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            return True
        return False

    def _get_file_path(self, epoch: int, batch: int | None, logs: dict) -> str:
        try:
            if batch is None or "batch" in logs:
                return self.filepath.format(epoch=epoch + 1, **logs)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        except KeyError as e:
            raise KeyError(f'ModelCheckpoint: failed to format the filepath "{self.filepath}" '
                           f"with logs {sorted(logs)}: missing {e}") from None

    def _should_save(self, epoch: int, logs: dict, filepath: str) -> bool:
        if not self.save_best_only:
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: saving model to {filepath}")
            return True
        if self._direction is None:
            self._setup()
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Can save best model only with {self.monitor} available.",
                          stacklevel=3)
            return True
        if np.ndim(current) > 0:
            warnings.warn(f"Can save best model only when `monitor` is a scalar value. "
                          f"Received: {current}. Falling back to `save_best_only=False`.",
                          stacklevel=3)
            return True
        current = float(current)
        best_str = "None" if self.best is None else f"{self.best:.5f}"
        if self._is_improvement(current, self.best):
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: {self.monitor} improved from {best_str} to "
                      f"{current:.5f}, saving model to {filepath}")
            self.best = current
            return True
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {best_str}")
        return False

    def _save_model(self, epoch: int, batch: int | None, logs: dict | None) -> None:
        logs = dict(logs or {})
        filepath = self._get_file_path(epoch, batch, logs)
        if os.path.isdir(filepath):
            raise OSError("ModelCheckpoint: please specify a non-directory filepath; "
                          f"{filepath} is an existing directory")
        if not self._should_save(epoch, logs, filepath):
            return
        dirname = os.path.dirname(filepath)
        if dirname:
            os.makedirs(dirname, exist_ok=True)
        if self.save_weights_only:
            self.model.save_weights(filepath)
        else:
            self.model.save(filepath)

    def get_state(self) -> dict[str, Any]:
        return {"best": float_to_json(self.best),
                "batches_seen_since_last_saving": self._batches_seen_since_last_saving,
                "last_batch_seen": self._last_batch_seen,
                "current_epoch": self._current_epoch}

    def set_state(self, state: dict[str, Any]) -> None:
        self.best = float_from_json(state.get("best"))
        self._batches_seen_since_last_saving = int(state.get("batches_seen_since_last_saving",
                                                             0))
        self._last_batch_seen = int(state.get("last_batch_seen", -1))
        self._current_epoch = int(state.get("current_epoch", 0))
