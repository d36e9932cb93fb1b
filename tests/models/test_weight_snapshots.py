"""get_weights / save_weights called from another thread during fit see the weights after
one step, all of them, never a mix of two steps (kiln/models/snapshot.py)."""

from __future__ import annotations

import threading

import numpy as np

import kiln


def _model() -> kiln.Model:
    model = kiln.Sequential([kiln.layers.Input((64,)),
                             kiln.layers.Dense(256, activation="relu"),
                             kiln.layers.Dense(256, activation="relu"),
                             kiln.layers.Dense(4)])
    model.compile(kiln.optimizers.SGD(0.01), "mse")
    return model


class _Record(kiln.callbacks.Callback):
    """Each step's weights, read in the training thread between steps (the oracle)."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[list[np.ndarray]] = []

    def on_train_begin(self, logs=None):
        self.states.append([w.numpy() for w in self.model.weights])

    def on_train_batch_end(self, batch, logs=None):
        self.states.append([w.numpy() for w in self.model.weights])


def _which_step(snap: list[np.ndarray], states: list[list[np.ndarray]]) -> list[int]:
    """For each weight, the steps whose value it equals exactly."""
    return [[k for k, st in enumerate(states) if np.array_equal(w, st[i])]
            for i, w in enumerate(snap)]


def test_snapshots_from_another_thread_hold_one_steps_weights(tmp_path):
    kiln.utils.set_random_seed(0)
    model = _model()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 64)).astype("float32")
    y = rng.standard_normal((512, 4)).astype("float32")
    record = _Record()
    snaps: list[list[np.ndarray]] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            snaps.append(model.get_weights())

    model.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0)  # compile before the race
    record.states.clear()
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[record])
    finally:
        done.set()
        thread.join()
    assert len(snaps) > 5
    mixed = []
    for n, snap in enumerate(snaps):
        steps = _which_step(snap, record.states)
        common = set(steps[0]).intersection(*map(set, steps[1:]))
        if not common:
            mixed.append((n, steps))
    assert not mixed, f"{len(mixed)} of {len(snaps)} snapshots mix steps, e.g. {mixed[0]}"


def test_save_weights_during_fit_writes_one_steps_weights(tmp_path):
    kiln.utils.set_random_seed(1)
    model = _model()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 64)).astype("float32")
    y = rng.standard_normal((256, 4)).astype("float32")
    record = _Record()
    model.fit(x[:8], y[:8], batch_size=8, epochs=1, verbose=0)
    record.states.clear()
    files: list[str] = []
    done = threading.Event()

    def saver() -> None:
        k = 0
        while not done.is_set() and k < 8:
            path = str(tmp_path / f"s{k}.weights.h5")
            model.save_weights(path)
            files.append(path)
            k += 1

    thread = threading.Thread(target=saver)
    thread.start()
    try:
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[record])
    finally:
        done.set()
        thread.join()
    assert files
    probe = _model()
    for path in files:
        probe.load_weights(path)
        steps = _which_step([w.numpy() for w in probe.weights], record.states)
        assert set(steps[0]).intersection(*map(set, steps[1:])), f"{path} mixes steps"
