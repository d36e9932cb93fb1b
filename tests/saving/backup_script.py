"""A training script for the BackupAndRestore tests (run as a subprocess).

Usage: python backup_script.py BACKUP_DIR OUT.npz SAVE_FREQ [KILL_EPOCH KILL_BATCH]

Trains a small seeded model with Dropout, shuffling, ReduceLROnPlateau and EarlyStopping. With
KILL_EPOCH/KILL_BATCH the process SIGKILLs itself after that training batch (0-based), the
way a crash or a pre-empted job would end. On normal completion it writes the final weights,
optimizer variables, learning rate and the logged epoch metrics to OUT.npz.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

import kiln
from kiln import layers
from kiln.callbacks import Callback, EarlyStopping, ReduceLROnPlateau
from kiln.callbacks.backup import BackupAndRestore


class KillAt(Callback):
    def __init__(self, epoch: int, batch: int):
        super().__init__()
        self.kill_epoch, self.kill_batch, self.epoch = epoch, batch, -1

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == (self.kill_epoch, self.kill_batch):
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    backup_dir, out = sys.argv[1], sys.argv[2]
    save_freq = sys.argv[3] if sys.argv[3] == "epoch" else int(sys.argv[3])
    kiln.utils.set_random_seed(1234)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype("int64") + (x[:, 2] > 1).astype("int64")
    model = kiln.Sequential([kiln.Input((5,)), layers.Dense(12, activation="relu"),
                             layers.Dropout(0.3), layers.Dense(3, activation="softmax")])
    model.compile(kiln.optimizers.Adam(0.02), "sparse_categorical_crossentropy",
                  metrics=["accuracy", kiln.metrics.SparseTopKCategoricalAccuracy(k=2)])
    callbacks = [BackupAndRestore(backup_dir, save_freq=save_freq),
                 ReduceLROnPlateau(monitor="loss", factor=0.5, patience=0, min_delta=10.0),
                 EarlyStopping(monitor="loss", patience=50, min_delta=10.0)]
    if len(sys.argv) > 5:
        callbacks.append(KillAt(int(sys.argv[4]), int(sys.argv[5])))
    history = model.fit(x, y, epochs=5, batch_size=8, shuffle=True, callbacks=callbacks,
                        verbose=0)
    np.savez(out, *[w.numpy() for w in model.weights],
             *[v.numpy() for v in model.optimizer.variables],
             lr=np.float64(model.optimizer.learning_rate), counter=model._rng_counter,
             epochs=np.array(history.epoch), es_wait=callbacks[2].wait,
             **{f"log_{k}": np.array(v) for k, v in history.history.items()})


if __name__ == "__main__":
    main()
