"""Subclassed models: layers as attributes and a ``call`` traced into the graph."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import blobs

import kiln
from kiln import layers
from kiln.layers.base import reset_names


class MLP(kiln.Model):
    def __init__(self, units: int = 16, rate: float = 0.3, **kwargs):
        super().__init__(**kwargs)
        self.hidden = layers.Dense(units, activation="relu")
        self.drop = layers.Dropout(rate)
        self.out = layers.Dense(10, activation="softmax")

    def call(self, x, training=None):
        return self.out(self.drop(self.hidden(x), training=training))


def _run(subclassed: bool):
    reset_names()
    kiln.utils.set_random_seed(7)
    x, y = blobs(300)
    if subclassed:
        model = MLP()
    else:
        model = kiln.Sequential([layers.Dense(16, activation="relu"), layers.Dropout(0.3),
                                 layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    return model, history.history


def test_subclassed_trains_like_its_sequential_twin():
    sub, h_sub = _run(True)
    seq, h_seq = _run(False)
    assert h_sub == h_seq
    for a, b in zip(sub.get_weights(), seq.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert h_sub["loss"][-1] < h_sub["loss"][0]


def test_subclassed_summary_and_config():
    model = MLP(units=8)
    model.build((None, 8))
    lines: list[str] = []
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "(None, 8)" in text and "(None, 10)" in text and "?" not in text
    assert "Total params: 162" in text
    assert model.get_config() == {"name": "mlp", "trainable": True, "units": 8, "rate": 0.3}
    clone = MLP.from_config(model.get_config())
    assert clone.get_config()["units"] == 8


def test_subclassed_multi_input_dict():
    class Two(kiln.Model):
        def __init__(self):
            super().__init__()
            self.a = layers.Dense(4)
            self.b = layers.Dense(4)
            self.head = layers.Dense(1)

        def call(self, inputs):
            return self.head(self.a(inputs["left"]) + self.b(inputs["right"]))

    rng = np.random.default_rng(0)
    left, right = rng.normal(size=(20, 3)), rng.normal(size=(20, 5))
    model = Two()
    model.compile("sgd", "mse")
    model.fit({"left": left, "right": right}, np.zeros((20, 1)), epochs=1, verbose=0)
    assert model.predict({"left": left, "right": right}, verbose=0).shape == (20, 1)
    assert model.count_params() == 16 + 24 + 5


def test_forgetting_super_init_is_explained():
    class Bad(kiln.Model):
        def __init__(self):
            self.dense = layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    with pytest.raises(RuntimeError, match=r"super\(\).__init__\(\)"):
        Bad().compile("sgd", "mse")


def test_unbuilt_summary_prints_like_keras():
    # Keras 3.15 prints the layers of an unbuilt model with "?" shapes and "0 (unbuilt)"
    lines = []
    MLP().summary(print_fn=lines.append)
    rows = [line for line in lines if line.startswith("│")]
    assert rows and all("?" in r and "0 (unbuilt)" in r for r in rows), lines
    assert " Total params: 0 (0.00 B)" in lines
    lines = []
    kiln.Sequential([layers.Dense(3), layers.Dense(2)]).summary(print_fn=lines.append)
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 2 and all("0 (unbuilt)" in r for r in rows), lines
