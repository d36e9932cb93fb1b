"""BackupAndRestore tells the model where to resume through the public ``resume_at``."""

from __future__ import annotations

import kiln.saving
from kiln.callbacks import BackupAndRestore, CallbackList


class _Model:
    stop_training = False
    metrics: list = []

    def __init__(self):
        self.calls: list[tuple] = []

    def resume_at(self, epoch, step=0, metric_states=None):
        self.calls.append((epoch, step, metric_states))


def _restore(tmp_path, monkeypatch, epoch, step):
    (tmp_path / "backup.h5").write_bytes(b"")  # the callback only checks that it exists
    info = {"epoch": epoch, "step": step, "callbacks": {},
            "extra": {"metric_states": {"loss": [1.0, 2.0]}}}
    monkeypatch.setattr(kiln.saving, "load_checkpoint", lambda *a, **k: info)
    model = _Model()
    backup = BackupAndRestore(tmp_path)
    CallbackList([backup], model=model, epochs=5, steps=4).on_train_begin()
    return model, backup


def test_mid_epoch_backup_resumes_with_metric_states(tmp_path, monkeypatch):
    model, backup = _restore(tmp_path, monkeypatch, epoch=2, step=3)
    assert model.calls == [(2, 3, {"loss": [1.0, 2.0]})]
    assert backup.restored["epoch"] == 2


def test_epoch_end_backup_resumes_at_the_next_epoch_without_metric_states(tmp_path,
                                                                          monkeypatch):
    model, _ = _restore(tmp_path, monkeypatch, epoch=3, step=0)
    assert model.calls == [(3, 0, None)]
