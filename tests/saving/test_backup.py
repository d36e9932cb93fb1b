"""BackupAndRestore and training checkpoints. Oracle: an uninterrupted run of the same
seeded script (bit-identical weights, optimizer variables, learning rate, RNG counter and
callback states)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import layers
from kiln.callbacks import EarlyStopping, ReduceLROnPlateau
from kiln.callbacks.backup import BACKUP_NAME, BackupAndRestore
from kiln.saving import FileFormatError, load_checkpoint, save_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(HERE, "backup_script.py")


def _run(backup_dir, out, save_freq, kill=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, SCRIPT, str(backup_dir), str(out), str(save_freq)]
    if kill:
        args += [str(kill[0]), str(kill[1])]
    return subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def _compare(a_path, b_path):
    a, b = np.load(a_path), np.load(b_path)
    assert sorted(a.files) == sorted(b.files)
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("save_freq,kills", [("epoch", [(2, 3)]), (3, [(3, 4)]),
                                             (3, [(1, 7), (3, 4), (3, 6)])])
def test_killed_run_resumes_bit_identical(tmp_path, save_freq, kills):
    straight = tmp_path / "straight.npz"
    r = _run(tmp_path / "b0", straight, save_freq)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (tmp_path / "b0").exists()  # deleted when training finished

    backup = tmp_path / "b1"
    resumed = tmp_path / "resumed.npz"
    for kill in kills:  # killed, restarted, killed again ...
        r = _run(backup, resumed, save_freq, kill=kill)
        assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-3000:])
        assert (backup / BACKUP_NAME).exists() and not resumed.exists()
    r = _run(backup, resumed, save_freq)  # the same script, started again
    assert r.returncode == 0, r.stderr[-3000:]
    _compare(straight, resumed)
    assert not backup.exists()


def _model():
    m = kiln.Sequential([kiln.Input((4,)), layers.Dense(5, activation="relu"),
                         layers.Dropout(0.2), layers.Dense(2)])
    m.compile(kiln.optimizers.Adam(0.01), "mse")
    return m


def _fit(m, epochs=2):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 2)).astype("float32")
    m.fit(x, y, epochs=epochs, batch_size=4, verbose=0)


def test_checkpoint_round_trip_restores_everything(tmp_path):
    m = _model()
    _fit(m)
    m.optimizer.learning_rate = 0.004
    es = EarlyStopping(monitor="loss", patience=3)
    es.wait, es.best, es.best_epoch = 2, 0.5, 1
    rl = ReduceLROnPlateau(monitor="loss")
    rl.wait, rl.cooldown_counter, rl.best = 1, 2, 0.25
    gen_before = kiln.random_state.numpy_rng().bit_generator.state
    path = tmp_path / "ckpt.h5"
    save_checkpoint(m, path, epoch=3, step=2, callbacks=[es, rl])
    expected_draw = kiln.random_state.numpy_rng().random()

    other = _model()
    _fit(other, 1)
    es2, rl2 = EarlyStopping(monitor="loss", patience=3), ReduceLROnPlateau(monitor="loss")
    info = load_checkpoint(other, path, callbacks=[es2, rl2])
    assert (info["epoch"], info["step"]) == (3, 2)
    for a, b in zip(m.weights + m.optimizer.variables, other.weights + other.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert np.float32(other.optimizer.learning_rate) == np.float32(0.004)
    assert (other._rng_seed, other._rng_counter) == (m._rng_seed, m._rng_counter)
    assert (es2.wait, es2.best, es2.best_epoch) == (2, 0.5, 1)
    assert (rl2.wait, rl2.cooldown_counter, rl2.best) == (1, 2, 0.25)
    assert kiln.random_state.numpy_rng().bit_generator.state == gen_before
    assert kiln.random_state.numpy_rng().random() == expected_draw


def test_checkpoint_of_other_architecture_changes_nothing(tmp_path):
    m = _model()
    _fit(m, 1)
    path = tmp_path / "ckpt.h5"
    save_checkpoint(m, path, epoch=1)
    other = kiln.Sequential([kiln.Input((4,)), layers.Dense(6, activation="relu"),
                             layers.Dropout(0.2), layers.Dense(2)])
    other.compile(kiln.optimizers.Adam(0.01), "mse")
    _fit(other, 1)
    before = [v.numpy() for v in other.weights + other.optimizer.variables]
    counter = other._rng_counter
    with pytest.raises(ValueError, match=r"\(4, 6\).*\(4, 5\)"):
        load_checkpoint(other, path)
    for a, v in zip(before, other.weights + other.optimizer.variables):
        np.testing.assert_array_equal(a, v.numpy())
    assert other._rng_counter == counter


def test_checkpoint_bad_files(tmp_path):
    m = _model()
    bad = tmp_path / "x.h5"
    bad.write_text("nope")
    with pytest.raises(FileFormatError):
        load_checkpoint(m, bad)
    m.save_weights(tmp_path / "w.h5")
    with pytest.raises(FileFormatError, match="not a kiln checkpoint"):
        load_checkpoint(m, tmp_path / "w.h5")


def test_backup_arguments():
    with pytest.raises(ValueError):
        BackupAndRestore("")
    with pytest.raises(ValueError, match="save_freq"):
        BackupAndRestore("/tmp/x", save_freq=0)
    assert BackupAndRestore("/tmp/x", save_freq=5).save_freq == 5


def test_backup_kept_when_interrupted_and_deleted_when_done(tmp_path):
    m = _model()
    backup = BackupAndRestore(tmp_path / "bk", delete_checkpoint=True)

    class Boom(kiln.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 2)).astype("float32")
    with pytest.raises(KeyboardInterrupt):
        m.fit(x, y, epochs=4, batch_size=4, verbose=0, callbacks=[backup, Boom()])
    assert (tmp_path / "bk" / BACKUP_NAME).exists()
    it = int(m.optimizer.iterations.numpy())
    m2 = _model()
    m2.fit(x, y, epochs=4, batch_size=4, verbose=0, callbacks=[backup])
    # Epoch 1's end hooks did not complete, so the last backup is the one after epoch 0.
    assert backup.restored["epoch"] == 1 and it == 8
    assert int(m2.optimizer.iterations.numpy()) == 16
    assert not (tmp_path / "bk").exists()
