"""Training-loop integration: learning-rate changes from callbacks compile nothing; a memory
budget on a deep MLP fits and changes no numbers."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import layers
from kiln.core import Function


def _data(n=256, d=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    y = (x @ rng.normal(size=(d, 1))).astype("float32")
    return x, y


def test_learning_rate_from_callback_takes_effect_without_recompiling(monkeypatch):
    created = []
    original = Function.__init__

    def counting_init(self, *args, **kwargs):
        created.append(kwargs.get("name"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(Function, "__init__", counting_init)
    kiln.utils.set_random_seed(1)
    x, y = _data()
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(4, activation="tanh"),
                             layers.Dense(1)])
    model.compile(kiln.optimizers.SGD(0.05), "mse")
    seen = []

    class Record(kiln.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append((epoch, float(model.optimizer.learning_rate),
                         [w.copy() for w in model.get_weights()]))

    # epoch 0: lr 0.05; epoch 1: lr 0 (weights must not move); epoch 2: lr 0.05 again
    schedule = kiln.callbacks.LearningRateScheduler(lambda epoch, lr: 0.0 if epoch == 1
                                                    else 0.05)
    model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[schedule, Record()])
    after = model.get_weights()
    assert [round(lr, 6) for _, lr, _ in seen] == [0.05, 0.0, 0.05]
    w_epoch1, w_epoch2 = seen[1][2], seen[2][2]
    for a, b in zip(w_epoch1, w_epoch2):
        np.testing.assert_array_equal(a, b)  # lr 0 during epoch 1: nothing changed
    assert any(not np.array_equal(a, b) for a, b in zip(w_epoch2, after))
    train_fns = [n for n in created if n and "train" in n]
    assert len(train_fns) == 1, created


def _deep_mlp(budget):
    kiln.layers.base.reset_names()
    kiln.utils.set_random_seed(7)
    model = kiln.Sequential([kiln.Input((16,))] + [layers.Dense(16, activation="relu")
                                                    for _ in range(32)] + [layers.Dense(1)])
    model.compile(kiln.optimizers.SGD(0.01), "mse", memory_budget=budget)
    return model


def test_memory_budget_fits_and_gives_identical_losses():
    x, y = _data(n=128, d=16, seed=3)
    free = _deep_mlp(None)
    free._plan_batch_size = 64
    peak = free.compile_report().peak_bytes
    # 60%: relu's gradient reads its output, so the pre-activations are not kept (the peak
    # is about half what it was when they were) and recomputation reaches about 54% of it
    budget = peak * 6 // 10
    limited = _deep_mlp(budget)
    limited._plan_batch_size = 64
    report = limited.compile_report()
    assert report.peak_bytes <= budget < peak
    h1 = free.fit(x, y, batch_size=64, epochs=3, shuffle=False, verbose=0).history["loss"]
    h2 = limited.fit(x, y, batch_size=64, epochs=3, shuffle=False, verbose=0).history["loss"]
    assert h1 == h2
    for a, b in zip(free.get_weights(), limited.get_weights()):
        np.testing.assert_array_equal(a, b)
