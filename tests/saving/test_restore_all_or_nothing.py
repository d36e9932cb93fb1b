"""Restoring a checkpoint is all or nothing (issue 17, item 5): every field of the training
state invalid in turn (position, learning rate, RNG streams, each stateful callback's state,
optimizer attributes) is refused with a FileFormatError naming the file and the field,
before anything is applied: the weights, the optimizer's slots and learning rate, the
dropout stream, kiln's and NumPy's global generators and every callback are unchanged. A
generator state naming anything but NumPy's bit generators is refused, never called.

Oracle: the snapshot before the call; for the valid file, the values that were saved.
"""

from __future__ import annotations

import copy
import shutil

import h5py
import numpy as np
import pytest
from hostile_helpers import (
    assert_unchanged,
    data,
    digest,
    read_state,
    snapshot,
    trained,
    write_state,
)

from kiln.callbacks import Callback, EarlyStopping, History, ModelCheckpoint, ReduceLROnPlateau
from kiln.saving import FileFormatError, load_checkpoint, save_checkpoint


class Counter(Callback):
    """A user callback with a state (``set_state`` raises on a non-integer count)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def get_state(self):
        return {"n": self.n}

    def set_state(self, state):
        self.n = int(state["n"])


def _callbacks(tmp_path, model=None):
    es = EarlyStopping(monitor="loss", restore_best_weights=True)
    rl = ReduceLROnPlateau(monitor="loss")
    hist = History()
    ckpt = ModelCheckpoint(str(tmp_path / "best.keras"))
    counter = Counter()
    if model is not None:  # the saved run's progress
        es.wait, es.best, es.best_epoch = 2, 0.5, 1
        es.best_weights = [w.numpy().copy() for w in model.weights]
        rl.wait, rl.cooldown_counter, rl.best = 1, 2, 0.25
        hist.history, hist.epoch = {"loss": [1.0, 0.5]}, [0, 1]
        ckpt.best, ckpt._last_batch_seen, ckpt._current_epoch = 0.3, 3, 1
        counter.n = 7
    else:  # the new run's own, different state
        es.wait, rl.wait, counter.n = 1, 3, 2
    return [es, rl, hist, ckpt, counter]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt")
    model = trained(epochs=2)
    model.optimizer.learning_rate = 0.004
    path = folder / "ckpt.h5"
    save_checkpoint(model, path, epoch=2, step=1, callbacks=_callbacks(folder, model))
    return model, path


def _copy(saved, tmp_path):
    path = tmp_path / "ckpt.h5"
    shutil.copy(saved[1], path)
    return path


def _put(state, keys, value):
    for key in keys[:-1]:
        state = state[key]
    state[keys[-1]] = value


def test_the_valid_checkpoint_restores_everything(saved, tmp_path):
    model, path = saved
    target = trained()
    cbs = _callbacks(tmp_path)
    info = load_checkpoint(target, _copy(saved, tmp_path), callbacks=cbs)
    assert (info["epoch"], info["step"]) == (2, 1)
    for a, b in zip(model.weights + model.optimizer.variables,
                    target.weights + target.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert (target._rng_seed, target._rng_counter) == (model._rng_seed, model._rng_counter)
    assert np.float32(target.optimizer.learning_rate) == np.float32(0.004)
    assert [cb.get_state() for cb in cbs] == [cb.get_state() for cb in _callbacks(tmp_path,
                                                                                  model)]
    x, y = data()
    target.fit(x, y, epochs=1, batch_size=4, verbose=0)  # and training goes on


PCG = ("rng", "numpy_generator")
ES, RL = ("callbacks", "EarlyStopping"), ("callbacks", "ReduceLROnPlateau")
HI, MC = ("callbacks", "History"), ("callbacks", "ModelCheckpoint")
CASES = [
    # the position
    (("epoch",), -1, "training_state.epoch"), (("epoch",), "3", "training_state.epoch"),
    (("epoch",), 1.5, "training_state.epoch"), (("epoch",), True, "training_state.epoch"),
    (("epoch",), None, "training_state.epoch"), (("step",), -2, "training_state.step"),
    (("step",), "x", "training_state.step"), (("step",), 2**64, "training_state.step"),
    (("learning_rate",), "fast", "learning_rate"), (("learning_rate",), -0.1, "learning_rate"),
    (("learning_rate",), float("nan"), "learning_rate"),
    # the random streams
    (("rng",), [1], "RNG state should be a dict"),
    (("rng", "rng_seed"), "abc", "rng.rng_seed"), (("rng", "rng_seed"), 2**70, "rng.rng_seed"),
    (("rng", "rng_seed"), 1.5, "rng.rng_seed"), (("rng", "rng_counter"), -1, "rng.rng_counter"),
    (("rng", "rng_counter"), "5", "rng.rng_counter"),
    (("rng", "rng_counter"), 2**64, "rng.rng_counter"),
    (("rng", "global_seed"), "x", "rng.global_seed"),
    (PCG, "PCG64", "rng.numpy_generator should be a NumPy generator state"),
    (PCG + ("bit_generator",), "seed", "bit generator 'seed'"),
    (PCG + ("bit_generator",), "default_rng", "bit generator 'default_rng'"),
    (PCG + ("bit_generator",), "RandomState", "bit generator 'RandomState'"),
    (PCG + ("bit_generator",), "__class__", "bit generator '__class__'"),
    (PCG + ("bit_generator",), "MT19937", "not a valid MT19937 state"),
    (PCG + ("state",), "garbage", "not a valid PCG64 state"),
    (PCG + ("state", "state"), "x", "not a valid PCG64 state"),
    # the callbacks
    (("callbacks",), [1, 2], "training_state.callbacks"),
    (ES, 5, "training_state.callbacks"),
    (ES + ("wait",), "abc", "callbacks.EarlyStopping.wait"),
    (ES + ("wait",), -1, "callbacks.EarlyStopping.wait"),
    (ES + ("best",), "fast", "callbacks.EarlyStopping.best"),
    (ES + ("best_epoch",), 1.5, "callbacks.EarlyStopping.best_epoch"),
    (ES + ("best_weights",), [], "best_weights should hold the model's 4 weights"),
    (ES + ("best_weights", 0, "shape"), [5, 4], r"best_weights\[0\].*\(4, 5\)"),
    (ES + ("best_weights", 0, "dtype"), "object", r"best_weights\[0\].*numeric dtype"),
    (ES + ("best_weights", 0, "data"), ["a"] * 20, r"best_weights\[0\]\.data.*numbers"),
    (ES + ("best_weights", 1, "data"), [1.0], r"best_weights\[1\]\.data.*shape \(5,\)"),
    (RL + ("cooldown_counter",), "x", "callbacks.ReduceLROnPlateau.cooldown_counter"),
    (RL + ("best",), [1], "callbacks.ReduceLROnPlateau.best"),
    (HI + ("history",), {"loss": ["a"]}, "callbacks.History.history"),
    (HI + ("epoch",), [-1], "callbacks.History.epoch"),
    (MC + ("last_batch_seen",), -5, "callbacks.ModelCheckpoint.last_batch_seen"),
    (MC + ("current_epoch",), "x", "callbacks.ModelCheckpoint.current_epoch"),
    (("callbacks", "Counter", "n"), "many", "callbacks.Counter.*ValueError"),
    (("callbacks", "Counter"), {}, "callbacks.Counter.*KeyError"),
    (("extra",), [1], "training_state.extra"),
]


@pytest.mark.parametrize("keys,value,match", CASES,
                         ids=[".".join(map(str, k)) + "=" + repr(v)[:20] for k, v, _ in CASES])
def test_each_invalid_field_is_refused_before_anything_is_applied(saved, tmp_path, keys, value,
                                                                  match):
    path = _copy(saved, tmp_path)
    state = read_state(path)
    _put(state, list(keys), copy.deepcopy(value))
    write_state(path, state)
    target = trained()
    cbs = _callbacks(tmp_path)
    before, sha = snapshot(target, cbs), digest(path)
    with pytest.raises(FileFormatError, match=match) as info:
        load_checkpoint(target, path, callbacks=cbs)
    assert "ckpt.h5" in str(info.value)
    assert_unchanged(target, before, cbs)
    assert digest(path) == sha


@pytest.mark.parametrize("value", ["abc", np.nan, -1.0, np.array([0.1, 0.2])])
def test_invalid_saved_learning_rate_attribute(saved, tmp_path, value):
    path = _copy(saved, tmp_path)
    with h5py.File(path, "a") as f:
        f["optimizer"].attrs["learning_rate"] = value
    target = trained()
    before = snapshot(target)
    with pytest.raises(FileFormatError, match=r"ckpt\.h5.*'learning_rate'.*finite"):
        load_checkpoint(target, path)
    assert_unchanged(target, before)


@pytest.mark.parametrize("value", [np.nan, 2.5, 1e30])
def test_iterations_that_are_not_a_whole_number(saved, tmp_path, value):
    path = _copy(saved, tmp_path)
    with h5py.File(path, "a") as f:
        del f["optimizer/0"]
        f["optimizer/0"] = np.float64(value)
    target = trained()
    before = snapshot(target)
    with pytest.raises(FileFormatError, match=r"ckpt\.h5.*iteration.*whole numbers"):
        load_checkpoint(target, path)
    assert_unchanged(target, before)


def test_callback_state_is_checked_even_for_a_callback_that_cannot_be_copied(saved, tmp_path):
    """A callback holding something deepcopy refuses is still checked by its fields."""
    path = _copy(saved, tmp_path)
    state = read_state(path)
    state["callbacks"]["EarlyStopping"]["wait"] = "soon"
    write_state(path, state)
    cbs = _callbacks(tmp_path)
    cbs[0].handle = open(path, "rb")  # noqa: SIM115 - deepcopy cannot copy a file object
    try:
        target = trained()
        before = snapshot(target, cbs)
        with pytest.raises(FileFormatError, match="EarlyStopping.wait"):
            load_checkpoint(target, path, callbacks=cbs)
        assert_unchanged(target, before, cbs)
    finally:
        cbs[0].handle.close()
