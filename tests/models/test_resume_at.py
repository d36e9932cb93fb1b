"""``Model.resume_at``: the next fit starts at an epoch, skips batches of it and restores
the metrics of that epoch; the request is consumed by that fit."""

from __future__ import annotations

import pytest
from model_helpers import blobs, weights_equal

import kiln
from kiln import layers
from kiln.layers.base import reset_names


def _model() -> kiln.Sequential:
    reset_names()
    kiln.utils.set_random_seed(3)
    m = kiln.Sequential([kiln.Input((8,)), layers.Dense(16, activation="relu"),
                         layers.Dense(10, activation="softmax")])
    m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


class _Record(kiln.callbacks.Callback):
    """Epochs and batches seen; the metric states after batch ``at`` of epoch 1."""

    def __init__(self, at: int = -1):
        super().__init__()
        self.at, self.epochs, self.batches, self.states = at, [], [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(batch)
        if self.epochs[-1] == 1 and batch == self.at:
            self.states = {m.name: m.get_state() for m in self.model.metrics}


def test_resume_mid_epoch_matches_an_uninterrupted_run():
    x, y = blobs(64)
    a = _model()
    rec_a = _Record(at=1)
    h_a = a.fit(x, y, epochs=2, batch_size=16, shuffle=False, callbacks=[rec_a], verbose=0)
    # b: epoch 0, then the first two batches of epoch 1, then "restart" with resume_at.
    b = _model()
    b.fit(x, y, epochs=1, batch_size=16, shuffle=False, verbose=0)
    for i in range(2):
        b.train_on_batch(x[16 * i:16 * (i + 1)], y[16 * i:16 * (i + 1)])
    b.resume_at(1, step=2, metric_states=rec_a.states)
    rec_b = _Record()
    h_b = b.fit(x, y, epochs=2, batch_size=16, shuffle=False, callbacks=[rec_b], verbose=0)
    assert rec_b.epochs == [1] and rec_b.batches == [2, 3]
    assert h_b.epoch == [1]
    assert {k: v[-1] for k, v in h_b.history.items()} == {k: v[-1] for k, v in
                                                          h_a.history.items()}
    assert weights_equal(a.get_weights(), b.get_weights())


def test_resume_is_consumed_by_one_fit_and_can_be_cancelled():
    x, y = blobs(32)
    m = _model()
    m.resume_at(2)
    assert m.fit(x, y, epochs=3, verbose=0).epoch == [2]
    assert m.fit(x, y, epochs=2, verbose=0).epoch == [0, 1]  # consumed
    m.resume_at(1, step=1)
    m.resume_at(None)
    assert m.fit(x, y, epochs=1, verbose=0).epoch == [0]


def test_resume_is_forgotten_when_fit_fails():
    x, y = blobs(32)
    m = _model()

    class Boom(kiln.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            raise RuntimeError("boom")

    m.resume_at(1)
    with pytest.raises(RuntimeError, match="boom"):
        m.fit(x, y, epochs=3, callbacks=[Boom()], verbose=0)
    assert m.fit(x, y, epochs=1, verbose=0).epoch == [0]


@pytest.mark.parametrize("args", [(-1,), (1.5,), (True,), (1, -2), (1, 0.5)])
def test_resume_at_rejects_bad_values(args):
    with pytest.raises(ValueError, match="resume_at"):
        _model().resume_at(*args)


def test_metric_states_are_restored_for_the_resumed_epoch():
    x, y = blobs(64)
    m = _model()
    m.resume_at(0, step=2, metric_states={"loss": [1e6, 32.0]})
    h = m.fit(x, y, epochs=1, batch_size=16, shuffle=False, verbose=0)
    assert h.history["loss"][0] > 1e4  # (1e6 + the last two batches' losses) / 64
