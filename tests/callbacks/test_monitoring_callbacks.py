"""EarlyStopping, ReduceLROnPlateau, TerminateOnNaN and LearningRateScheduler driven by
scripted logs; expected epochs and values are worked out by hand from Keras 3's rules."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from cb_stub import StubModel, fit, weights_of_epoch

from kiln.callbacks import EarlyStopping, LearningRateScheduler, ReduceLROnPlateau, TerminateOnNaN


def vals(name, values):
    return [{"loss": 1.0, name: v} for v in values]


# ---- EarlyStopping ----------------------------------------------------------------------------
def test_early_stopping_stops_after_patience_and_restores_best_weights():
    # best at epoch 1 (0.8); epochs 2 and 3 do not improve -> wait reaches 2 at epoch 3
    es = EarlyStopping(patience=2, restore_best_weights=True)
    model, run, _ = fit([es], vals("val_loss", [1.0, 0.8, 0.9, 0.85, 0.95, 0.7]))
    assert run == 4
    assert es.stopped_epoch == 3 and es.best_epoch == 1 and es.best == 0.8
    assert model.stop_training is True
    for got, want in zip(model.weights, weights_of_epoch(1)):
        np.testing.assert_array_equal(got, want)


def test_early_stopping_without_restore_keeps_last_weights():
    es = EarlyStopping(patience=1)
    model, run, _ = fit([es], vals("val_loss", [1.0, 0.8, 0.9, 0.85]))
    assert run == 3  # epoch 2 does not improve, wait 1 >= patience 1
    np.testing.assert_array_equal(model.weights[0], weights_of_epoch(2)[0])


def test_early_stopping_patience_zero_never_stops_at_epoch_zero():
    es = EarlyStopping(patience=0)
    _, run, _ = fit([es], vals("val_loss", [1.0, 1.0, 1.0]))
    assert run == 2 and es.stopped_epoch == 1


def test_early_stopping_min_delta():
    # improvements of 0.01 are below min_delta=0.05: no improvement after epoch 0
    es = EarlyStopping(monitor="loss", min_delta=0.05, patience=2)
    _, run, _ = fit([es], [{"loss": v} for v in [1.0, 0.99, 0.98, 0.97, 0.96]])
    assert run == 3 and es.stopped_epoch == 2


def test_early_stopping_max_mode_from_metric_name():
    es = EarlyStopping(monitor="val_accuracy", patience=1, restore_best_weights=True)
    model, run, _ = fit([es], vals("val_accuracy", [0.5, 0.7, 0.6, 0.9]))
    assert run == 3 and es.best == 0.7
    np.testing.assert_array_equal(model.weights[0], weights_of_epoch(1)[0])


def test_early_stopping_explicit_min_mode_on_accuracy_name():
    es = EarlyStopping(monitor="val_accuracy", mode="min", patience=1)
    _, run, _ = fit([es], vals("val_accuracy", [0.5, 0.7, 0.6, 0.9]))
    assert run == 2


def test_early_stopping_baseline():
    # Nothing beats the baseline 0.5, so the wait never restarts: stop when it reaches 2.
    es = EarlyStopping(patience=2, baseline=0.5)
    _, run, _ = fit([es], vals("val_loss", [0.9, 0.95, 0.97, 0.99]))
    assert run == 2 and es.stopped_epoch == 1
    es = EarlyStopping(patience=2)
    _, run, _ = fit([es], vals("val_loss", [0.9, 0.95, 0.97, 0.99]))
    assert run == 3


def test_early_stopping_start_from_epoch():
    es = EarlyStopping(patience=1, start_from_epoch=2, restore_best_weights=True)
    model, run, _ = fit([es], vals("val_loss", [0.1, 0.1, 1.0, 2.0, 3.0]))
    assert run == 4 and es.best == 1.0
    np.testing.assert_array_equal(model.weights[0], weights_of_epoch(2)[0])


def test_early_stopping_missing_metric_warns_and_continues():
    es = EarlyStopping(monitor="val_loss", patience=0)
    with pytest.warns(UserWarning, match="not available"):
        _, run, _ = fit([es], [{"loss": 1.0}] * 3)
    assert run == 3


def test_early_stopping_unknown_direction_raises():
    es = EarlyStopping(monitor="val_wobble")
    with pytest.raises(ValueError, match="mode='max'"):
        fit([es], vals("val_wobble", [1.0, 2.0]))


def test_early_stopping_direction_from_model_metric_objects():
    class Metric:
        name = "wobble"
        _direction = "up"

    model = StubModel()
    model.metrics = [Metric()]
    es = EarlyStopping(monitor="val_wobble", patience=1)
    _, run, _ = fit([es], vals("val_wobble", [1.0, 2.0, 1.5, 3.0]), model=model)
    assert run == 3


def test_early_stopping_state_round_trip_is_strict_json():
    es = EarlyStopping(patience=3, restore_best_weights=True)
    model = StubModel()
    fit([es], vals("val_loss", [1.0, 0.5, 0.7]), model=model)
    state = json.loads(json.dumps(es.get_state(), allow_nan=False))
    other = EarlyStopping(patience=3, restore_best_weights=True)
    other.set_state(state)
    assert (other.wait, other.best, other.best_epoch) == (1, 0.5, 1)
    for got, want in zip(other.best_weights, weights_of_epoch(1)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    assert json.dumps(EarlyStopping().get_state(), allow_nan=False)


# ---- ReduceLROnPlateau --------------------------------------------------------------------------
def test_reduce_lr_on_plateau_reduces_when_patience_runs_out():
    cb = ReduceLROnPlateau(factor=0.5, patience=2)
    logs = vals("val_loss", [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    model, _, cbs = fit([cb], logs, model=StubModel(0.1))
    # logs["learning_rate"] is the rate during that epoch (set before any reduction)
    rates = cbs.history.history["learning_rate"]
    assert rates == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025], rel=1e-6)
    assert model.optimizer.learning_rate == pytest.approx(0.025, rel=1e-6)


def test_reduce_lr_min_delta_cooldown_and_min_lr():
    # min_delta=0.1: a drop of 0.05 is no improvement; cooldown=2 skips the epoch after a
    # reduction (the counter is decremented before the check); min_lr caps the reduction.
    cb = ReduceLROnPlateau(factor=0.1, patience=1, min_delta=0.1, cooldown=2, min_lr=0.002)
    logs = vals("val_loss", [1.0, 0.95, 0.95, 0.8, 0.78, 0.78, 0.78])
    model, _, cbs = fit([cb], logs, model=StubModel(0.1))
    # e0 best 1.0; e1 wait 1 -> 0.01, cooldown 2; e2 cooldown 1, nothing; e3 cooldown 0 and
    # 0.8 < 1.0 - 0.1 improves; e4 wait 1 -> max(0.001, 0.002); e5 cooldown; e6 wait 1 but
    # the rate is already min_lr
    assert cbs.history.history["learning_rate"] == pytest.approx(
        [0.1, 0.1, 0.01, 0.01, 0.01, 0.002, 0.002], rel=1e-6)
    assert model.optimizer.learning_rate == pytest.approx(0.002, rel=1e-6)


def test_reduce_lr_accuracy_is_maximized():
    cb = ReduceLROnPlateau(monitor="val_accuracy", factor=0.5, patience=1, min_delta=0)
    model, _, _ = fit([cb], vals("val_accuracy", [0.5, 0.6, 0.7, 0.8]), model=StubModel(0.1))
    assert model.optimizer.learning_rate == pytest.approx(0.1, rel=1e-6)
    cb = ReduceLROnPlateau(monitor="val_accuracy", factor=0.5, patience=1, min_delta=0)
    model, _, _ = fit([cb], vals("val_accuracy", [0.5, 0.4, 0.3]), model=StubModel(0.1))
    assert model.optimizer.learning_rate == pytest.approx(0.025, rel=1e-6)


def test_reduce_lr_errors_and_state():
    with pytest.raises(ValueError, match="factor"):
        ReduceLROnPlateau(factor=1.5)
    cb = ReduceLROnPlateau(patience=5)
    fit([cb], vals("val_loss", [1.0, 2.0]))
    state = json.loads(json.dumps(cb.get_state(), allow_nan=False))
    assert state == {"wait": 1, "cooldown_counter": 0, "best": 1.0}
    fresh = ReduceLROnPlateau()
    assert json.dumps(fresh.get_state(), allow_nan=False)
    fresh.set_state(state)
    assert fresh.wait == 1 and fresh.best == 1.0


# ---- TerminateOnNaN ----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [math.nan, math.inf, np.float32("nan")])
def test_terminate_on_nan(bad, capsys):
    def batch_logs(epoch, batch):
        return {"loss": bad if (epoch, batch) == (1, 1) else 0.5}

    model, run, cbs = fit([TerminateOnNaN()], [{"loss": 0.5}] * 5, batch_logs=batch_logs)
    assert model.stop_training is True
    assert run == 2
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out


def test_terminate_on_nan_ignores_finite_losses():
    model, run, _ = fit([TerminateOnNaN()], [{"loss": 0.5}] * 3)
    assert run == 3 and model.stop_training is False


# ---- LearningRateScheduler ------------------------------------------------------------------
def test_learning_rate_scheduler_two_argument_form():
    seen = []

    def schedule(epoch, lr):
        seen.append((epoch, lr))
        return lr * 0.5 if epoch >= 2 else lr

    model, _, cbs = fit([LearningRateScheduler(schedule)], [{"loss": 1.0}] * 4,
                        model=StubModel(0.1))
    assert [e for e, _ in seen] == [0, 1, 2, 3]
    assert cbs.history.history["learning_rate"] == pytest.approx([0.1, 0.1, 0.05, 0.025],
                                                                 rel=1e-6)
    assert model.optimizer.learning_rate == pytest.approx(0.025, rel=1e-6)


def test_learning_rate_scheduler_one_argument_form_and_errors():
    model, _, _ = fit([LearningRateScheduler(lambda epoch: 0.01 * (epoch + 1))],
                      [{"loss": 1.0}] * 3)
    assert model.optimizer.learning_rate == pytest.approx(0.03, rel=1e-6)
    with pytest.raises(ValueError, match="should be a float"):
        fit([LearningRateScheduler(lambda epoch, lr: "fast")], [{"loss": 1.0}])
