"""Small callbacks: LearningRateScheduler, CSVLogger, TerminateOnNaN, LambdaCallback."""

from __future__ import annotations

import collections
import csv
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.callbacks.callback import Callback


class LearningRateScheduler(Callback):
    """Sets the learning rate at the start of every epoch to ``schedule(epoch, lr)``
    (``epoch`` 0-based, ``lr`` the current rate); a one-argument ``schedule(epoch)`` works
    too. The rate is added to the epoch logs as ``learning_rate``.

    Args:
        schedule: the function; it must return a float.
        verbose: 1 prints the new rate every epoch.

    Example:
        >>> LearningRateScheduler(lambda epoch, lr: lr if epoch < 10 else lr * 0.9)
    """

    def __init__(self, schedule: Callable[..., float], verbose: int = 0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is None or not hasattr(optimizer, "learning_rate"):
            raise ValueError('LearningRateScheduler: the optimizer must have a "learning_rate" '
                             "attribute.")
        lr = float(optimizer.learning_rate)
        try:
            new_lr = self.schedule(epoch, lr)
        except TypeError:  # the old one-argument form
            new_lr = self.schedule(epoch)
        if not isinstance(new_lr, float | np.floating | int) or isinstance(new_lr, bool):
            raise ValueError("LearningRateScheduler: the output of the `schedule` function "
                             f"should be a float. Got: {new_lr!r}")
        optimizer.learning_rate = float(new_lr)
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to "
                  f"{float(new_lr)}.")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is not None:
            logs["learning_rate"] = float(self.model.optimizer.learning_rate)


class CSVLogger(Callback):
    """Streams the epoch logs to a CSV file: a header ``epoch,<sorted metric names>`` and one
    row per epoch (Keras 3 semantics: if the first epoch has no ``val_`` entries, ``val_``
    columns are added for every metric and filled with "NA" until they appear).

    Args:
        filename: the CSV file.
        separator: the field separator (",").
        append: append to an existing file (the header is written only if the file is empty).

    Example:
        >>> CSVLogger("training.log", append=True)
    """

    chief_only = True  # with several ranks (kiln.distribution), only rank 0 writes the file

    def __init__(self, filename: str | os.PathLike, separator: str = ",", append: bool = False):
        super().__init__()
        self.sep = separator
        self.filename = os.fspath(filename)
        self.append = append
        self.writer: Any = None
        self.keys: list[str] | None = None
        self.append_header = True
        self.csv_file: Any = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        if self.append:
            if os.path.exists(self.filename):
                with open(self.filename) as f:
                    self.append_header = not bool(len(f.readline()))
            mode = "a"
        else:
            mode = "w"
        self.writer = None
        self.csv_file = open(self.filename, mode, newline="")

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs or {}

        def handle_value(k: Any) -> Any:
            is_zero_dim = isinstance(k, np.ndarray) and k.ndim == 0
            if isinstance(k, str):
                return k
            if isinstance(k, collections.abc.Iterable) and not is_zero_dim:
                return f"\"[{', '.join(map(str, k))}]\""
            return k

        if self.keys is None:
            self.keys = sorted(logs.keys())
            if not any(k.startswith("val_") for k in self.keys):
                self.keys.extend(["val_" + k for k in self.keys])
        if self.csv_file is None:  # on_train_begin was not called
            self.on_train_begin()
        if self.writer is None:
            class Dialect(csv.excel):
                delimiter = self.sep

            self.writer = csv.DictWriter(self.csv_file, fieldnames=["epoch", *self.keys],
                                         dialect=Dialect)
            if self.append_header:
                self.writer.writeheader()
        row = {"epoch": epoch}
        row.update((k, handle_value(logs.get(k, "NA"))) for k in self.keys)
        self.writer.writerow(row)
        self.csv_file.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.csv_file is not None:
            self.csv_file.close()
        self.csv_file = None
        self.writer = None


class TerminateOnNaN(Callback):
    """Stops training (``model.stop_training = True``) when a batch's loss is NaN or inf;
    with ``raise_error=True`` raises RuntimeError at once instead (the other callbacks'
    end-of-training hooks do not run).

    Example:
        >>> model.fit(x, y, callbacks=[TerminateOnNaN()])
    """

    def __init__(self, raise_error: bool = False):
        super().__init__()
        self.raise_error = bool(raise_error)

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None:
            loss = float(loss)
            if math.isnan(loss) or math.isinf(loss):
                if self.raise_error:
                    raise RuntimeError(f"TerminateOnNaN: NaN or Inf loss encountered at batch "
                                       f"{batch} (loss={loss}); terminating training")
                print(f"Batch {batch}: Invalid loss, terminating training")
                self.model.stop_training = True


class LambdaCallback(Callback):
    """A callback from plain functions, for quick one-offs.

    ``on_epoch_begin(epoch, logs)``, ``on_epoch_end(epoch, logs)``,
    ``on_train_begin(logs)``, ``on_train_end(logs)``,
    ``on_train_batch_begin(batch, logs)``, ``on_train_batch_end(batch, logs)``; any other
    hook can be given as a keyword argument of the same name.

    Example:
        >>> LambdaCallback(on_epoch_end=lambda epoch, logs: print(epoch, logs["loss"]))
    """

    _HOOKS = ("on_batch_begin", "on_batch_end", "on_epoch_begin", "on_epoch_end",
              "on_train_batch_begin", "on_train_batch_end", "on_test_batch_begin",
              "on_test_batch_end", "on_predict_batch_begin", "on_predict_batch_end",
              "on_train_begin", "on_train_end", "on_test_begin", "on_test_end",
              "on_predict_begin", "on_predict_end")

    def __init__(self, on_epoch_begin: Callable | None = None,
                 on_epoch_end: Callable | None = None, on_train_begin: Callable | None = None,
                 on_train_end: Callable | None = None,
                 on_train_batch_begin: Callable | None = None,
                 on_train_batch_end: Callable | None = None, **kwargs: Callable):
        super().__init__()
        unknown = [k for k in kwargs if k not in self._HOOKS]
        if unknown:
            raise ValueError(f"LambdaCallback: unknown hook(s) {unknown}; valid: "
                             f"{list(self._HOOKS)}")
        hooks = dict(kwargs, on_epoch_begin=on_epoch_begin, on_epoch_end=on_epoch_end,
                     on_train_begin=on_train_begin, on_train_end=on_train_end,
                     on_train_batch_begin=on_train_batch_begin,
                     on_train_batch_end=on_train_batch_end)
        for name, fn in hooks.items():
            if fn is not None:
                setattr(self, name, fn)
