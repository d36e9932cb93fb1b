"""ModelCheckpoint files, CSVLogger rows, the progress output, History and CallbackList."""

from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
from cb_stub import StubModel, fit

from kiln.callbacks import (
    Callback,
    CallbackList,
    CSVLogger,
    History,
    LambdaCallback,
    ModelCheckpoint,
    ProgbarLogger,
)


def vloss(values, **extra):
    return [{"loss": 1.0 + i, "val_loss": v, **extra} for i, v in enumerate(values)]


# ---- ModelCheckpoint --------------------------------------------------------------------------
def test_checkpoint_every_epoch_formats_epoch_and_logs(tmp_path):
    pattern = str(tmp_path / "ckpt-{epoch:02d}-{val_loss:.3f}.weights.h5")
    model, _, _ = fit([ModelCheckpoint(pattern, save_weights_only=True)],
                      vloss([0.5, 0.25, 0.125]))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ckpt-01-0.500.weights.h5", "ckpt-02-0.250.weights.h5",
                     "ckpt-03-0.125.weights.h5"]
    assert [kind for kind, _ in model.saved] == ["weights"] * 3


def test_checkpoint_save_best_only(tmp_path):
    pattern = str(tmp_path / "best-{epoch}.keras")
    model, _, _ = fit([ModelCheckpoint(pattern, save_best_only=True)],
                      vloss([0.5, 0.7, 0.4, 0.45, 0.1]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best-1.keras", "best-3.keras",
                                                         "best-5.keras"]
    assert [kind for kind, _ in model.saved] == ["model"] * 3


def test_checkpoint_save_best_only_single_file_and_threshold(tmp_path):
    path = tmp_path / "best.weights.h5"
    cb = ModelCheckpoint(path, monitor="val_accuracy", save_best_only=True,
                         save_weights_only=True, initial_value_threshold=0.6)
    model, _, _ = fit([cb], [{"val_accuracy": a} for a in [0.5, 0.7, 0.65, 0.9]])
    assert [p for _, p in model.saved] == [str(path)] * 2  # 0.7 and 0.9 beat 0.6
    assert cb.best == 0.9


def test_checkpoint_every_n_batches(tmp_path):
    pattern = str(tmp_path / "e{epoch}-b{batch}.weights.h5")
    cb = ModelCheckpoint(pattern, save_weights_only=True, save_freq=2)
    fit([cb], vloss([0.5, 0.4, 0.3]), steps=3)
    # 9 batches in all, a save after every second one: global batches 2, 4, 6, 8
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["e1-b2.weights.h5", "e2-b1.weights.h5", "e2-b3.weights.h5", "e3-b2.weights.h5"])


def test_checkpoint_creates_directories_and_validates(tmp_path):
    pattern = str(tmp_path / "run" / "{epoch}" / "model.keras")
    fit([ModelCheckpoint(pattern)], vloss([0.5]))
    assert (tmp_path / "run" / "1" / "model.keras").read_text() == "model"
    with pytest.raises(ValueError, match=r"\.weights\.h5"):
        ModelCheckpoint(tmp_path / "w.h5", save_weights_only=True)
    with pytest.raises(ValueError, match=r"\.keras"):
        ModelCheckpoint(tmp_path / "model.pt")
    with pytest.raises(ValueError, match="save_freq"):
        ModelCheckpoint(tmp_path / "m.keras", save_freq="batch")
    with pytest.raises(KeyError, match="val_acc"):
        fit([ModelCheckpoint(str(tmp_path / "{val_acc}.keras"))], vloss([0.5]))


def test_checkpoint_state_round_trip(tmp_path):
    cb = ModelCheckpoint(tmp_path / "m.keras", save_best_only=True)
    fit([cb], vloss([0.5, 0.3]))
    state = json.loads(json.dumps(cb.get_state(), allow_nan=False))
    other = ModelCheckpoint(tmp_path / "m.keras", save_best_only=True)
    other.set_state(state)
    assert other.best == 0.3
    model, _, _ = fit([other], vloss([0.4, 0.2]))
    assert len(model.saved) == 1  # only 0.2 beats the restored best 0.3


# ---- CSVLogger ------------------------------------------------------------------------------
def read_csv(path, sep=","):
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter=sep))


def test_csv_logger_rows(tmp_path):
    path = tmp_path / "log.csv"
    fit([CSVLogger(path)], [{"loss": 0.5, "accuracy": 0.75, "val_loss": 0.6},
                            {"loss": 0.25, "accuracy": 0.875, "val_loss": 0.55}])
    assert read_csv(path) == [["epoch", "accuracy", "loss", "val_loss"],
                              ["0", "0.75", "0.5", "0.6"], ["1", "0.875", "0.25", "0.55"]]


def test_csv_logger_adds_val_columns_when_first_epoch_has_none(tmp_path):
    path = tmp_path / "log.csv"
    fit([CSVLogger(path, separator=";")], [{"loss": 0.5}, {"loss": 0.4, "val_loss": 0.3}])
    assert read_csv(path, ";") == [["epoch", "loss", "val_loss"], ["0", "0.5", "NA"],
                                   ["1", "0.4", "0.3"]]


def test_csv_logger_append(tmp_path):
    path = tmp_path / "log.csv"
    fit([CSVLogger(path, append=True)], [{"loss": 0.5}])
    fit([CSVLogger(path, append=True)], [{"loss": 0.4}, {"loss": 0.3}])
    assert read_csv(path) == [["epoch", "loss", "val_loss"], ["0", "0.5", "NA"],
                              ["0", "0.4", "NA"], ["1", "0.3", "NA"]]
    fit([CSVLogger(path)], [{"loss": 0.1}])  # append=False overwrites
    assert read_csv(path) == [["epoch", "loss", "val_loss"], ["0", "0.1", "NA"]]


# ---- ProgbarLogger -----------------------------------------------------------------------------
class TTY(io.StringIO):
    def isatty(self):
        return True


EPOCHS = [{"loss": 0.5, "accuracy": 0.9, "val_loss": 0.25, "val_accuracy": 0.95},
          {"loss": 0.0004, "accuracy": 0.95, "val_loss": 0.2, "val_accuracy": 0.96},
          {"loss": 0.3, "accuracy": 0.97, "val_loss": 0.1, "val_accuracy": 0.97}]

LINE2 = re.compile(r"^Epoch (\d)/3 - \d+\.\ds - loss: (\S+) - accuracy: (\S+) - "
                   r"val_loss: (\S+) - val_accuracy: (\S+)$")


def test_progbar_verbose_2_prints_one_line_per_epoch():
    out = io.StringIO()
    fit([ProgbarLogger(file=out)], EPOCHS, verbose=2, steps=50, validation=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    parsed = [LINE2.match(line) for line in lines]
    assert all(parsed), lines
    assert [m.group(1) for m in parsed] == ["1", "2", "3"]
    assert parsed[0].groups()[1:] == ("0.5000", "0.9000", "0.2500", "0.9500")
    assert parsed[1].group(2) == "4.0000e-04"  # Keras: scientific below 1e-3


def test_progbar_verbose_1_not_a_tty_prints_one_line_per_epoch(capsys):
    # 500 batches per epoch, written to captured stdout (not a terminal): no flood
    fit([ProgbarLogger()], EPOCHS, verbose=1, steps=500, validation=True)
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("Epoch 1/3 - 500/500 - ")
    assert lines[0].endswith("loss: 0.5000 - accuracy: 0.9000 - val_loss: 0.2500 - "
                             "val_accuracy: 0.9500")


def test_progbar_verbose_1_on_a_tty_draws_a_throttled_bar():
    out = TTY()
    fit([ProgbarLogger(file=out, mininterval=0.0)], EPOCHS, verbose=1, steps=4,
        batch_logs=lambda e, b: {"loss": 1.0 / (b + 1), "accuracy": 0.5})
    text = out.getvalue()
    assert "\r" in text  # redrawn in place
    for e in (1, 2, 3):
        assert f"Epoch {e}/3" in text
    assert "4/4" in text
    assert "loss: 0.2500" in text  # the running batch logs in the postfix
    assert "val_accuracy: 0.9700" in text  # the epoch's final logs on the final bar
    # throttling: with a long mininterval most batches are not drawn
    slow = TTY()
    fit([ProgbarLogger(file=slow, mininterval=60.0)], EPOCHS[:1], verbose=1, steps=200)
    assert slow.getvalue().count("\r") < 10


def test_progbar_verbose_0_is_silent(capsys):
    out = io.StringIO()
    fit([ProgbarLogger(file=out)], EPOCHS, verbose=0)
    assert out.getvalue() == "" and capsys.readouterr().out == ""


def test_progbar_evaluate_outside_fit_prints_one_line():
    out = io.StringIO()
    cbs = CallbackList([ProgbarLogger(file=out)], verbose=1, steps=10)
    cbs.on_test_begin()
    for b in range(10):
        cbs.on_test_batch_begin(b)
        cbs.on_test_batch_end(b, {"loss": 0.3})
    cbs.on_test_end({"loss": 0.3, "accuracy": 0.5})
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert re.match(r"^Evaluate - 10/10 - \d+\.\ds - loss: 0\.3000 - accuracy: 0\.5000$",
                    lines[0])


def test_callback_list_adds_progbar():
    cbs = CallbackList(add_progbar=True, verbose=2, epochs=1, steps=1)
    assert any(isinstance(cb, ProgbarLogger) for cb in cbs)
    assert cbs.callbacks[-1].verbose == 2


# ---- History, CallbackList, LambdaCallback, base Callback -------------------------------------
def test_history_records_epochs_and_sets_model_history():
    model, _, cbs = fit([], [{"loss": 0.5, "val_loss": 0.6}, {"loss": 0.4, "val_loss": 0.5}])
    h = cbs.history
    assert isinstance(h, History) and model.history is h
    assert h.history == {"loss": [0.5, 0.4], "val_loss": [0.6, 0.5]}
    assert h.epoch == [0, 1]
    state = json.loads(json.dumps(h.get_state(), allow_nan=False))
    other = History()
    other.set_state(state)
    assert other.history == h.history and other.epoch == h.epoch


def test_callback_list_params_model_logs_and_order():
    calls = []

    class Recorder(Callback):
        def on_train_batch_end(self, batch, logs=None):
            calls.append(("batch", batch, logs))

        def on_epoch_end(self, epoch, logs=None):
            calls.append(("epoch", epoch, dict(logs)))

    rec = Recorder()
    model = StubModel()
    cbs = CallbackList([[rec]], model=model, verbose=1, epochs=2, steps=5)
    assert rec.model is model and rec.params == {"verbose": 1, "epochs": 2, "steps": 5}
    assert cbs.history is None and len(cbs) == 1
    cbs.on_train_batch_end(3, {"loss": np.float32(0.5), "acc": np.array(0.25)})
    _, _, logs = calls[0]
    assert logs == {"loss": 0.5, "acc": 0.25}
    assert all(type(v) is float for v in logs.values())
    with pytest.raises(TypeError, match="Callback"):
        CallbackList([object()])


def test_callback_list_state():
    from kiln.callbacks import EarlyStopping

    es = EarlyStopping(patience=5)
    _, _, cbs = fit([es], vloss([0.5, 0.6]))
    state = json.loads(json.dumps(cbs.get_state(), allow_nan=False))
    assert "0:EarlyStopping" in state and "1:History" in state
    es2 = EarlyStopping(patience=5)
    cbs2 = CallbackList([es2], add_history=True)
    cbs2.set_state(state)
    assert es2.wait == 1 and es2.best == 0.5
    assert cbs2.history.history["val_loss"] == [0.5, 0.6]


def test_lambda_callback_hooks():
    events = []
    cb = LambdaCallback(
        on_train_begin=lambda logs: events.append("train_begin"),
        on_epoch_begin=lambda epoch, logs: events.append(f"epoch_begin {epoch}"),
        on_epoch_end=lambda epoch, logs: events.append(f"epoch_end {epoch} {logs['loss']}"),
        on_train_batch_end=lambda batch, logs: events.append(f"batch {batch}"),
        on_train_end=lambda logs: events.append("train_end"),
        on_test_begin=lambda logs: events.append("test_begin"))
    fit([cb], [{"loss": 0.5}], steps=2, validation=True)
    assert events == ["train_begin", "epoch_begin 0", "batch 0", "batch 1", "test_begin",
                      "epoch_end 0 0.5", "train_end"]
    with pytest.raises(ValueError, match="unknown hook"):
        LambdaCallback(on_epoch_finished=print)


def test_base_callback_batch_aliases_and_all_hooks():
    seen = []

    class Old(Callback):
        def on_batch_begin(self, batch, logs=None):
            seen.append(("begin", batch))

        def on_batch_end(self, batch, logs=None):
            seen.append(("end", batch))

    cb = Old()
    cb.on_train_batch_begin(0)
    cb.on_train_batch_end(0, {})
    assert seen == [("begin", 0), ("end", 0)]
    base = Callback()
    for hook in ["on_train_begin", "on_train_end", "on_test_begin", "on_test_end",
                 "on_predict_begin", "on_predict_end"]:
        assert getattr(base, hook)({}) is None
    for hook in ["on_epoch_begin", "on_epoch_end", "on_test_batch_begin", "on_test_batch_end",
                 "on_predict_batch_begin", "on_predict_batch_end"]:
        assert getattr(base, hook)(0, {}) is None
    assert base.get_state() == {} and base.set_state({}) is None
