"""compile(steps_per_execution=N): batches grouped in executions of N (Keras 3 semantics).

Oracles: the same fit with N=1 (weights, losses and metrics bit-identical, since every batch
still runs its own step), and the closed-form list of (first, last) batch indices of the
executions of ceil(steps / N) groups.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from model_helpers import blobs

import kiln
from kiln import layers

N_SAMPLES, BATCH = 100, 8  # 13 batches per epoch, the last one of 4 samples
STEPS = -(-N_SAMPLES // BATCH)


def _model(steps_per_execution: int = 1) -> kiln.Model:
    kiln.utils.set_random_seed(7)
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(16, activation="relu"),
                             layers.Dropout(0.25, seed=3),  # a stream independent of its name
                             layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"],
                  steps_per_execution=steps_per_execution)
    return model


def _groups(steps: int, n: int) -> list[tuple[int, int]]:
    """The (first, last) batch index of every execution."""
    return [(b, min(b + n, steps) - 1) for b in range(0, steps, n)]


class Recorder(kiln.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []

    def _pair(self, kind: str) -> list[tuple[int, int]]:
        begins = [b for k, b, _ in self.events if k == kind + "_begin"]
        ends = [b for k, b, _ in self.events if k == kind + "_end"]
        assert len(begins) == len(ends)
        return list(zip(begins, ends))

    def on_train_batch_begin(self, batch, logs=None):
        self.events.append(("train_begin", batch, None))

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(("train_end", batch, dict(logs or {})))

    def on_test_batch_begin(self, batch, logs=None):
        self.events.append(("test_begin", batch, None))

    def on_test_batch_end(self, batch, logs=None):
        self.events.append(("test_end", batch, dict(logs or {})))

    def on_predict_batch_begin(self, batch, logs=None):
        self.events.append(("predict_begin", batch, None))

    def on_predict_batch_end(self, batch, logs=None):
        self.events.append(("predict_end", batch, logs))

    def on_epoch_end(self, epoch, logs=None):
        self.events.append(("epoch_end", epoch, dict(logs or {})))


@pytest.mark.parametrize("n", [1, 3, 64])
def test_fit_weights_and_history_identical_to_one_step_per_execution(n):
    x, y = blobs(N_SAMPLES)
    reference = _model(1)
    h1 = reference.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, validation_split=0.2)
    model = _model(n)
    hn = model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, validation_split=0.2)
    assert model.steps_per_execution == n
    for a, b in zip(reference.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert hn.history == h1.history
    assert model._rng_counter == reference._rng_counter
    assert model.evaluate(x, y, verbose=0) == reference.evaluate(x, y, verbose=0)
    np.testing.assert_array_equal(model.predict(x, verbose=0), reference.predict(x, verbose=0))


@pytest.mark.parametrize("n", [1, 3, 4, 13, 64])
def test_fit_batch_callbacks_once_per_execution(n):
    x, y = blobs(N_SAMPLES)
    rec = Recorder()
    model = _model(n)
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[rec])
    expected = _groups(STEPS, n)
    assert rec._pair("train") == expected * 2
    # begin/end alternate, and each end comes before the epoch end
    kinds = [k for k, _, _ in rec.events]
    per_epoch = ["train_begin", "train_end"] * len(expected) + ["epoch_end"]
    assert kinds == per_epoch * 2
    # the logs of an execution end are the running metrics after its last batch: the last
    # one of an epoch equals the epoch's logs
    ends = [logs for k, _, logs in rec.events if k == "train_end"]
    epochs = [logs for k, _, logs in rec.events if k == "epoch_end"]
    assert ends[len(expected) - 1] == epochs[0]
    assert ends[-1] == epochs[1]


def test_fit_logs_at_execution_end_match_one_step_per_execution():
    x, y = blobs(N_SAMPLES)
    rec1, rec3 = Recorder(), Recorder()
    _model(1).fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[rec1])
    _model(3).fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[rec3])
    logs1 = {b: logs for k, b, logs in rec1.events if k == "train_end"}
    logs3 = {b: logs for k, b, logs in rec3.events if k == "train_end"}
    assert sorted(logs3) == [last for _, last in _groups(STEPS, 3)]
    for b, logs in logs3.items():
        assert logs == logs1[b]


@pytest.mark.parametrize("n", [1, 5, 64])
def test_evaluate_and_predict_batch_callbacks_once_per_execution(n):
    x, y = blobs(N_SAMPLES)
    model = _model(n)
    rec = Recorder()
    result = model.evaluate(x, y, batch_size=BATCH, verbose=0, callbacks=[rec],
                            return_dict=True)
    assert rec._pair("test") == _groups(STEPS, n)
    assert [logs for k, _, logs in rec.events if k == "test_end"][-1] == result
    rec = Recorder()
    pred = model.predict(x, batch_size=BATCH, verbose=0, callbacks=[rec])
    assert rec._pair("predict") == _groups(STEPS, n)
    # on_predict_batch_end receives the outputs of the execution's batches
    outs = [logs["outputs"][0] for k, _, logs in rec.events if k == "predict_end"]
    for (first, last), o in zip(_groups(STEPS, n), outs):
        np.testing.assert_array_equal(o, pred[first * BATCH:(last + 1) * BATCH])
    reference = _model(1)
    np.testing.assert_array_equal(pred, reference.predict(x, batch_size=BATCH, verbose=0))


def test_validation_inside_fit_is_grouped_too():
    x, y = blobs(N_SAMPLES)
    vx, vy = blobs(40, seed=1)  # 5 validation batches of 8
    rec = Recorder()
    _model(2).fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[rec],
                  validation_data=(vx, vy))
    assert rec._pair("test") == [(0, 1), (2, 3), (4, 4)]


def test_generator_data_of_unknown_length_ends_with_a_short_execution():
    x, y = blobs(N_SAMPLES)

    def batches():
        for i in range(0, N_SAMPLES, BATCH):
            yield x[i:i + BATCH], y[i:i + BATCH]

    rec = Recorder()
    model = _model(5)
    model.fit(batches(), epochs=1, verbose=0, callbacks=[rec])
    assert rec._pair("train") == _groups(STEPS, 5)
    reference = _model(1)

    def batches_again():
        for i in range(0, N_SAMPLES, BATCH):
            yield x[i:i + BATCH], y[i:i + BATCH]

    reference.fit(batches_again(), epochs=1, verbose=0)
    for a, b in zip(reference.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_stop_training_is_honoured_at_execution_end():
    x, y = blobs(N_SAMPLES)

    class StopAtFirstEnd(Recorder):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            self.model.stop_training = True

    rec = StopAtFirstEnd()
    model = _model(4)
    model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, callbacks=[rec])
    assert rec._pair("train") == [(0, 3)]
    assert model._rng_counter == 4  # the whole first execution ran, nothing after it


def test_terminate_on_nan_sees_a_nan_inside_an_execution(capsys):
    x, y = blobs(N_SAMPLES)
    x[20] = np.nan  # batch 2
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", steps_per_execution=4)
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, check_finite=False,
              callbacks=[kiln.callbacks.TerminateOnNaN()], shuffle=False)
    assert "Batch 3: Invalid loss, terminating training" in capsys.readouterr().out
    assert model._rng_counter == 4


@pytest.mark.parametrize("verbose", [1, 2])
def test_progress_output_ends_with_the_epoch_line(verbose):
    x, y = blobs(N_SAMPLES)
    out = io.StringIO()
    bar = kiln.callbacks.ProgbarLogger(file=out)
    model = _model(5)
    history = model.fit(x, y, batch_size=BATCH, epochs=2, verbose=verbose, callbacks=[bar])
    lines = out.getvalue().strip().splitlines()
    assert len(lines) == 2
    assert lines[-1].startswith("Epoch 2/2 - ")
    if verbose == 1:
        assert lines[-1].startswith(f"Epoch 2/2 - {STEPS}/{STEPS} - ")
    loss = history.history["loss"][-1]
    assert f"loss: {loss:.4f}" in lines[-1]


def test_progress_bar_advances_once_per_execution():
    x, y = blobs(N_SAMPLES)
    seen = []

    class Bar(kiln.callbacks.ProgbarLogger):
        def _advance(self, done, logs):
            seen.append(done)
            super()._advance(done, logs)

    model = _model(5)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=2, callbacks=[Bar(file=io.StringIO())])
    assert seen == [5, 10, 13]


def test_model_checkpoint_save_freq_counts_batches(tmp_path):
    """save_freq counts batches; with executions the check runs at execution ends (Keras):
    13 batches per epoch, N=2, save_freq=4: saves after the batches 4, 8 and 12 of each epoch
    (the last, 1-batch execution of epoch 1 carries over into epoch 2)."""
    x, y = blobs(N_SAMPLES)
    model = _model(2)
    pattern = str(tmp_path / "e{epoch}-b{batch}.weights.h5")
    cb = kiln.callbacks.ModelCheckpoint(pattern, save_weights_only=True, save_freq=4)
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[cb])
    assert sorted(os.listdir(tmp_path)) == sorted(
        f"e{e}-b{b}.weights.h5" for e in (1, 2) for b in (4, 8, 12))


def test_backup_and_restore_counts_batches_not_executions(tmp_path):
    x, y = blobs(N_SAMPLES)
    model = _model(3)

    class Killed(Exception):
        pass

    class Kill(kiln.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch >= 8:
                raise Killed

    backup = kiln.callbacks.BackupAndRestore(tmp_path / "bk", save_freq=2)
    with pytest.raises(Killed):
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[backup, Kill()])
    # backups after the executions ending at batches 2 and 5; the kill comes before the one
    # after batch 8
    from kiln.saving import load_checkpoint

    info = load_checkpoint(_model(3), str(tmp_path / "bk" / "backup.h5"), callbacks=None)
    assert info["step"] == 6


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", None, True])
def test_invalid_steps_per_execution_raises(bad):
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(10)])
    with pytest.raises(ValueError, match=r"compile: steps_per_execution must be an int >= 1, "
                                         rf"received steps_per_execution={bad!r}"):
        model.compile("adam", "mse", steps_per_execution=bad)
    assert not model.compiled


def test_steps_per_execution_in_the_compile_config():
    model = _model(3)
    config = model.get_compile_config()
    assert config["steps_per_execution"] == 3
    clone = _model(1)
    clone.compile_from_config(config)
    assert clone.steps_per_execution == 3
    assert _model(1).get_compile_config()["steps_per_execution"] == 1
    clone.compile("adam", "mse", steps_per_execution=np.int64(2))
    assert clone.steps_per_execution == 2
