"""A stub model and a scripted training loop for callback tests (no real models needed).

The loop mirrors the trainer's contract: hooks in Keras order, ``model.stop_training``
honoured after each batch and each epoch, and the weights changed by every "epoch" of
training (the weights after epoch e are ``[full(2, e), full(3, 10 * e)]``) so that restored
weights identify the epoch they came from.
"""

from __future__ import annotations

import numpy as np

from kiln import optimizers
from kiln.callbacks import CallbackList


class StubModel:
    def __init__(self, lr: float = 0.1):
        self.stop_training = False
        self.optimizer = optimizers.SGD(lr)
        self.weights = [np.zeros(2, np.float32), np.zeros(3, np.float32)]
        self.saved: list[tuple[str, str]] = []

    def get_weights(self):
        return [w.copy() for w in self.weights]

    def set_weights(self, weights):
        assert [np.shape(w) for w in weights] == [w.shape for w in self.weights]
        self.weights = [np.array(w, dtype=np.float32) for w in weights]

    def save(self, path):
        with open(path, "w") as f:
            f.write("model")
        self.saved.append(("model", str(path)))

    def save_weights(self, path):
        with open(path, "w") as f:
            f.write("weights")
        self.saved.append(("weights", str(path)))


def weights_of_epoch(e: int) -> list[np.ndarray]:
    return [np.full(2, e, np.float32), np.full(3, 10 * e, np.float32)]


def fit(callbacks, epoch_logs, model=None, steps=3, batch_logs=None, verbose=0,
        validation=False):
    """Runs the hooks for ``len(epoch_logs)`` epochs (fewer if a callback stops training).

    Args:
        epoch_logs: one logs dict per epoch (what the trainer passes to on_epoch_end).
        batch_logs: optional function (epoch, batch) -> logs for on_train_batch_end.
        validation: also run on_test_* hooks before each epoch end, as fit does.

    Returns:
        (model, number of epochs run, the CallbackList).
    """
    model = model or StubModel()
    cbs = CallbackList(callbacks, add_history=True, model=model, verbose=verbose,
                       epochs=len(epoch_logs), steps=steps)
    model.stop_training = False
    cbs.on_train_begin()
    run = 0
    for epoch, logs in enumerate(epoch_logs):
        cbs.on_epoch_begin(epoch)
        for batch in range(steps):
            cbs.on_train_batch_begin(batch)
            blogs = batch_logs(epoch, batch) if batch_logs else {"loss": logs.get("loss", 0.0)}
            cbs.on_train_batch_end(batch, blogs)
            if model.stop_training:
                break
        model.weights = weights_of_epoch(epoch)
        if validation:
            cbs.on_test_begin()
            for batch in range(2):
                cbs.on_test_batch_begin(batch)
                cbs.on_test_batch_end(batch, {"loss": 1.0})
            cbs.on_test_end({"loss": 1.0})
        cbs.on_epoch_end(epoch, dict(logs))
        run += 1
        if model.stop_training:
            break
    cbs.on_train_end()
    return model, run, cbs
