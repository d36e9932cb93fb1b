"""Crash-safe training with ``BackupAndRestore``: a run that is killed resumes where it stopped.

Long training runs get killed: preemptible machines, out-of-memory killers, Ctrl-C, power.
Add one callback and start the same script again after a crash::

    model.fit(x, y, epochs=20, callbacks=[
        kiln.callbacks.BackupAndRestore("runs/mnist/backup", save_freq=100)])

How it works:

1. During ``fit`` the callback writes ``backup_dir/backup.h5`` at every epoch end (and every
   ``save_freq`` batches when it is an int). The file holds everything training depends
   on: the weights, the optimizer's slots and step count, the learning rate, the dropout
   random stream, the shuffling generator, the epoch and the batch reached, and the state of
   the other callbacks (History, EarlyStopping ...). It is written atomically (a temporary
   file renamed over the old backup), so a kill in the middle of a write leaves the previous
   backup intact.
2. When ``fit`` starts and a backup exists, the callback restores all of it and ``fit``
   continues from that epoch and batch, skipping the batches already trained, in the same
   shuffled order. The work since the last backup is done again; nothing else is lost.
3. When ``fit`` finishes normally the backup is deleted, so the next run starts fresh.

This script shows it for real. It trains a small model in a child process that kills itself
with SIGKILL (no cleanup, no ``finally``) part-way through the second epoch, starts the same
training again, which resumes from the backup, and then trains once more without any
interruption to compare: the resumed run ends with the same weights.

    python examples/resume_training.py [--quick] [--workdir DIR]
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile

import numpy as np

import kiln
from kiln import layers
from kiln.datasets import mnist

try:
    from kiln.callbacks import BackupAndRestore
except ImportError:  # older kiln without the export
    from kiln.callbacks.backup import BackupAndRestore

BATCH_SIZE = 64
SAVE_FREQ = 20      # back up every 20 batches (and at every epoch end)


class KillAfter(kiln.callbacks.Callback):
    """Simulates a crash: SIGKILL to this very process after ``n`` training batches."""

    def __init__(self, n: int):
        super().__init__()
        self.n, self.seen, self.epoch = n, 0, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.n:
            print(f"\n*** SIGKILL: the training process dies in epoch {self.epoch + 1}, "
                  f"after batch {batch + 1} ***", flush=True)
            if hasattr(signal, "SIGKILL"):
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(137)  # no SIGKILL (Windows): exit at once, without any cleanup


def train(backup_dir: str, weights_out: str, epochs: int, n_train: int,
          kill_after: int | None, seed: int) -> None:
    """One training process: the part a real script would contain."""
    kiln.utils.set_random_seed(seed)   # the same initial weights in every run
    (x_train, y_train), (x_test, y_test) = mnist.load_sample()
    x_train = x_train[:n_train].reshape(-1, 784).astype("float32") / 255
    y_train = y_train[:n_train]
    x_test = x_test.reshape(-1, 784).astype("float32") / 255

    model = kiln.Sequential([
        kiln.Input((784,)),
        layers.Dense(128, activation="relu"),
        layers.Dropout(0.2),
        layers.Dense(10, activation="softmax"),
    ])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    backup = BackupAndRestore(backup_dir, save_freq=SAVE_FREQ)
    callbacks = [backup] + ([KillAfter(kill_after)] if kill_after else [])
    history = model.fit(x_train, y_train, batch_size=BATCH_SIZE, epochs=epochs,
                        callbacks=callbacks, verbose=1)
    if backup.restored is not None:
        print(f"(this run resumed from the backup: epoch {backup.restored['epoch'] + 1}, "
              f"after batch {backup.restored['step']})")
    print(f"epochs recorded in the History: {[e + 1 for e in history.epoch]}")
    _, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    print(f"Test accuracy: {accuracy:.4f}")
    model.save_weights(weights_out)


def run_child(args: list[str]) -> int:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", *args]
    return subprocess.run(cmd).returncode


def main(quick: bool = False, workdir: str | None = None, seed: int = 1337) -> float:
    epochs, n_train = (2, 3200) if quick else (4, 10000)
    steps = -(-n_train // BATCH_SIZE)
    kill_after = steps + steps // 2 + 7   # mid-way through epoch 2, between two backups
    with tempfile.TemporaryDirectory() as tmp:
        work = workdir or tmp
        os.makedirs(work, exist_ok=True)
        backup_dir = os.path.join(work, "backup")
        common = ["--epochs", str(epochs), "--n-train", str(n_train), "--seed", str(seed)]

        print(f"== 1. Train for {epochs} epochs of {steps} batches, backing up every "
              f"{SAVE_FREQ} batches into {backup_dir}; the process is killed after "
              f"{kill_after} batches.", flush=True)
        code = run_child(["--backup-dir", backup_dir, "--weights-out",
                          os.path.join(work, "never.weights.h5"),
                          "--kill-after", str(kill_after), *common])
        left = os.listdir(backup_dir) if os.path.isdir(backup_dir) else []
        print(f"The training process ended with exit code {code}; backup left behind: {left}",
              flush=True)

        print("\n== 2. Start the same training again: it resumes from the backup.", flush=True)
        resumed = os.path.join(work, "resumed.weights.h5")
        if run_child(["--backup-dir", backup_dir, "--weights-out", resumed, *common]) != 0:
            raise SystemExit("the resumed run failed")
        print(f"Backup deleted after the finished run: {not os.path.exists(backup_dir)}")

        print("\n== 3. For comparison, the same training without any interruption.",
              flush=True)
        straight = os.path.join(work, "straight.weights.h5")
        if run_child(["--backup-dir", os.path.join(work, "backup_straight"),
                      "--weights-out", straight, *common]) != 0:
            raise SystemExit("the uninterrupted run failed")

        import h5py

        def arrays(path: str) -> list[np.ndarray]:
            out: list[np.ndarray] = []
            with h5py.File(path, "r") as f:
                f.visititems(lambda name, obj: out.append(obj[()])
                             if isinstance(obj, h5py.Dataset) else None)
            return out

        diff = max(float(np.max(np.abs(a - b))) if a.shape else 0.0
                   for a, b in zip(arrays(resumed), arrays(straight)))
    print(f"\nLargest weight difference between the resumed and the uninterrupted run: "
          f"{diff:.3g}" + ("  (identical: the kill cost nothing but time)" if diff == 0 else ""))
    return diff


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 epochs on 3,200 digits (CI)")
    parser.add_argument("--workdir", default=None,
                        help="folder for the backup and weights (default: a temporary one)")
    parser.add_argument("--seed", type=int, default=1337)
    # The child process (internal).
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backup-dir", help=argparse.SUPPRESS)
    parser.add_argument("--weights-out", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--n-train", type=int, default=10000, help=argparse.SUPPRESS)
    parser.add_argument("--kill-after", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        train(args.backup_dir, args.weights_out, args.epochs, args.n_train, args.kill_after,
              args.seed)
    else:
        main(args.quick, args.workdir, args.seed)
