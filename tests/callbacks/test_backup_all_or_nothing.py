"""BackupAndRestore restores a backup all or nothing (issue 17, item 5): an invalid field of
the backup (the position, the generator state at the interrupted epoch's start, the metrics
accumulated in it, another callback's state, wherever that callback sits in the list) makes
``fit`` fail with a FileFormatError naming the backup and the field before anything is
restored: the model's weights, optimizer, dropout stream, the global generators and the
other callbacks are unchanged, and the backup stays as it was.

Oracle: the snapshot before ``fit``; for the valid backup, the interrupted run's position.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "saving"))
from hostile_helpers import (  # noqa: E402
    assert_unchanged,
    data,
    digest,
    read_state,
    snapshot,
    trained,
    write_state,
)

import kiln  # noqa: E402
from kiln.callbacks import BackupAndRestore, EarlyStopping  # noqa: E402
from kiln.callbacks.backup import BACKUP_NAME  # noqa: E402
from kiln.saving import FileFormatError  # noqa: E402


class _Stop(kiln.callbacks.Callback):
    """Interrupts training in epoch 1 after its third batch (after a mid-epoch backup)."""

    def __init__(self):
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch == 2:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def backup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bk")
    model = trained()
    x, y = data()
    callbacks = [BackupAndRestore(folder / "run", save_freq=2),
                 EarlyStopping(monitor="loss", patience=5), _Stop()]
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=callbacks)
    path = folder / "run" / BACKUP_NAME
    state = read_state(path)
    assert (state["epoch"], state["step"]) == (1, 2)  # a mid-epoch backup
    assert "epoch_start_rng" in state["extra"] and "loss" in state["extra"]["metric_states"]
    return path


def _resume(backup, tmp_path, edit, early_first=False):
    run = tmp_path / "run"
    run.mkdir()
    path = run / BACKUP_NAME
    shutil.copy(backup, path)
    state = read_state(path)
    edit(state)
    write_state(path, state)
    target = trained()
    es = EarlyStopping(monitor="loss", patience=5)
    es.best = 0.75  # kept by on_train_begin (which resets the counters), unlike the backup's
    bk = BackupAndRestore(run, save_freq=2)
    callbacks = [es, bk] if early_first else [bk, es]
    return target, es, callbacks, path


def test_the_valid_backup_resumes(backup, tmp_path):
    target, es, callbacks, path = _resume(backup, tmp_path, lambda s: None)
    x, y = data()
    target.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=callbacks)
    assert callbacks[0].restored["epoch"] == 1 and callbacks[0].restored["step"] == 2
    # 4 (trained) + 4 (epoch 0) + 2 (before the interruption) restored, then 2 + 4 more
    assert int(target.optimizer.iterations.numpy()) == 16


def _set(*keys, value):
    def edit(state):
        for key in keys[:-1]:
            state = state[key]
        state[keys[-1]] = value
    return edit


RNG = ("extra", "epoch_start_rng")
CASES = [
    (_set(*RNG, "bit_generator", value="seed"), "epoch_start_rng.*bit generator 'seed'"),
    (_set(*RNG, "bit_generator", value="MT19937"), "epoch_start_rng.*not a valid MT19937"),
    (_set(*RNG, value=[1, 2]), "epoch_start_rng should be a NumPy generator state"),
    (_set("extra", "metric_states", "loss", value=[1.0]), "metric_states.loss.*2 values"),
    (_set("extra", "metric_states", "loss", value=["a", "b"]), r"metric_states.loss\[0\]"),
    (_set("extra", "metric_states", value="x"), "metric_states should be a dict"),
    (_set("epoch", value="1"), "training_state.epoch"),
    (_set("step", value=-1), "training_state.step"),
    (_set("callbacks", "EarlyStopping", value={"wait": "x"}), "EarlyStopping.wait"),
    (_set("callbacks", "EarlyStopping", value={"best_weights": [[1]]}),
     "EarlyStopping.best_weights"),
]


@pytest.mark.parametrize("early_first", [False, True])
@pytest.mark.parametrize("edit,match", CASES, ids=[m[:30] for _, m in CASES])
def test_an_invalid_backup_changes_nothing(backup, tmp_path, edit, match, early_first):
    target, es, callbacks, path = _resume(backup, tmp_path, edit, early_first)
    before, sha = snapshot(target, [es]), digest(path)
    x, y = data()
    with pytest.raises(FileFormatError, match=match) as info:
        target.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=callbacks)
    assert BACKUP_NAME in str(info.value)
    assert_unchanged(target, before, [es])
    assert digest(path) == sha  # the backup is kept as it was
    # and the model still trains from where it was (no half-restored resume point)
    target.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert int(target.optimizer.iterations.numpy()) == int(before["optimizer"][0]) + 4
    assert np.isfinite(target.get_weights()[0]).all()
