"""The ``TensorBoard`` callback: Keras 3's scalars (and weight histograms) in real
TensorBoard event files, written by kiln itself (``kiln/callbacks/_events.py``)."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from kiln.callbacks._events import EventFileWriter, histogram_value, scalar_value
from kiln.callbacks.callback import Callback


def _scalar(value: Any) -> float | None:
    """A log value as a float, or None for values that are not a single number."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return float(a.reshape(-1)[0]) if a.size == 1 else None


class TensorBoard(Callback):
    """Writes the training logs as TensorBoard event files, like
    ``keras.callbacks.TensorBoard``: ``log_dir/train`` gets ``epoch_<metric>`` (and
    ``epoch_learning_rate``) every epoch, ``log_dir/validation`` gets the ``val_`` metrics
    under the same names, so TensorBoard draws training and validation on one chart. View
    with ``tensorboard --logdir log_dir``. No TensorFlow or TensorBoard is needed to write.

    Args:
        log_dir: Folder of the event files.
        histogram_freq: Every this many epochs, a histogram of every weight
            (``<layer>/<weight>/histogram``); 0 for none.
        write_graph: Accepted for compatibility; kiln's graph is not a TensorFlow graph, so
            nothing is written for it.
        write_images, write_steps_per_second, profile_batch, embeddings_freq,
            embeddings_metadata: Keras' arguments; only ``write_steps_per_second`` is used
            (``epoch_steps_per_second``); the others are accepted and ignored.
        update_freq: ``"epoch"``; or ``"batch"`` / an integer N: also ``batch_<metric>``
            every N training batches (step: the global batch count).

    Example:
        >>> model.fit(x, y, epochs=5, validation_split=0.2,
        ...           callbacks=[kiln.callbacks.TensorBoard("logs/run1")])  # doctest: +SKIP
    """

    chief_only = True  # with several ranks (kiln.distribution), only rank 0 writes

    def __init__(self, log_dir: str | os.PathLike[str] = "logs", histogram_freq: int = 0,
                 write_graph: bool = True, write_images: bool = False,
                 write_steps_per_second: bool = False, update_freq: str | int = "epoch",
                 profile_batch: Any = 0, embeddings_freq: int = 0,
                 embeddings_metadata: Any = None):
        super().__init__()
        if isinstance(histogram_freq, bool) or not isinstance(histogram_freq, int) or (
                histogram_freq < 0):
            raise ValueError(f"TensorBoard: histogram_freq must be a non-negative integer, "
                             f"received {histogram_freq!r}")
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and (isinstance(update_freq, bool) or not isinstance(
                update_freq, int) or update_freq < 1):
            raise ValueError(f"TensorBoard: update_freq must be 'epoch', 'batch' or a "
                             f"positive integer, received {update_freq!r}")
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = histogram_freq
        self.write_graph = write_graph
        self.write_images = write_images
        self.write_steps_per_second = write_steps_per_second
        self.update_freq = update_freq
        self._train_dir = os.path.join(self.log_dir, "train")
        self._val_dir = os.path.join(self.log_dir, "validation")
        self._writers: dict[str, EventFileWriter] = {}
        self._train_step = 0
        self._epoch_start = 0.0
        self._epoch_steps = 0

    def _writer(self, which: str) -> EventFileWriter:
        if which not in self._writers:
            self._writers[which] = EventFileWriter(
                self._train_dir if which == "train" else self._val_dir)
        return self._writers[which]

    def _write(self, which: str, step: int, values: dict[str, Any]) -> None:
        numbers = {tag: _scalar(v) for tag, v in values.items()}
        encoded = [scalar_value(tag, v) for tag, v in numbers.items() if v is not None]
        if encoded:
            writer = self._writer(which)
            writer.write(step, encoded)
            writer.flush()

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._train_step = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch_start = time.perf_counter()
        self._epoch_steps = 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._train_step += 1
        self._epoch_steps += 1
        if self.update_freq == "epoch" or self._train_step % int(self.update_freq):
            return
        logs = {f"batch_{k}": v for k, v in (logs or {}).items()
                if k not in ("batch", "size", "num_steps")}
        self._write("train", self._train_step, logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = dict(logs or {})
        train = {f"epoch_{k}": v for k, v in logs.items() if not k.startswith("val_")}
        val = {f"epoch_{k[4:]}": v for k, v in logs.items() if k.startswith("val_")}
        optimizer = getattr(self.model, "optimizer", None)
        if "epoch_learning_rate" not in train and optimizer is not None:
            try:
                train["epoch_learning_rate"] = float(optimizer.learning_rate)
            except (TypeError, ValueError, AttributeError):
                pass
        if self.write_steps_per_second:
            elapsed = time.perf_counter() - self._epoch_start
            if elapsed > 0:
                train["epoch_steps_per_second"] = self._epoch_steps / elapsed
        self._write("train", epoch, train)
        if val:
            self._write("validation", epoch, val)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            self._log_weights(epoch)

    def _log_weights(self, epoch: int) -> None:
        values = []
        for layer in getattr(self.model, "layers", []):
            for weight in getattr(layer, "weights", []):
                name = str(getattr(weight, "name", "weight")).replace(":", "_")
                if not name.startswith(f"{layer.name}/"):
                    name = f"{layer.name}/{name}"
                values.append(histogram_value(f"{name}/histogram", np.asarray(weight.numpy())))
        if values:
            writer = self._writer("train")
            writer.write(epoch, values)
            writer.flush()

    def on_test_end(self, logs: dict | None = None) -> None:
        # Keras' "evaluation_<metric>_vs_iterations" (each validation pass and evaluate()).
        iterations = getattr(getattr(self.model, "optimizer", None), "iterations", None)
        if iterations is None or not logs:
            return
        step = int(np.asarray(iterations.numpy() if hasattr(iterations, "numpy")
                              else iterations))
        self._write("validation", step,
                    {f"evaluation_{k}_vs_iterations": v for k, v in logs.items()})

    def on_train_end(self, logs: dict | None = None) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
