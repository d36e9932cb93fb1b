"""kiln's ``.keras`` files load in Keras 3 (runs only where Keras is installed; Keras is not a
kiln dependency: ``KERAS_BACKEND=torch python -m pytest tests/saving/test_keras_export.py``
in an environment with ``keras==3.15.1``). Oracle: kiln's own predictions and optimizer
variables."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")

import kiln  # noqa: E402
from kiln import layers  # noqa: E402


def _to_numpy(v):
    v = v.value if hasattr(v, "value") else v
    return np.asarray(keras.ops.convert_to_numpy(v))


def _models():
    mlp = kiln.Sequential([kiln.Input((6,)), layers.Dense(8, activation="relu"),
                           layers.Dropout(0.2), layers.Dense(3, activation="softmax")])
    cnn = kiln.Sequential([kiln.Input((6, 6, 2)),
                           layers.Conv2D(3, 3, padding="same", activation="relu"),
                           layers.BatchNormalization(), layers.MaxPooling2D(2),
                           layers.Flatten(), layers.Dense(3, activation="softmax")])
    a, b = kiln.Input((6,), name="a"), kiln.Input((6,), name="b")
    h = layers.Concatenate()([layers.Add()([layers.Dense(4)(a), layers.Dense(4)(b)]), a])
    fn = kiln.Model([a, b], layers.Dense(3, activation="softmax")(
        layers.LayerNormalization()(h)))
    return {"mlp": mlp, "cnn": cnn, "functional": fn}


@pytest.mark.parametrize("name", ["mlp", "cnn", "functional"])
def test_keras_loads_kiln_keras_file(tmp_path, name):
    model = _models()[name]
    rng = np.random.default_rng(0)
    if name == "functional":
        x = [rng.normal(size=(12, 6)).astype("float32") for _ in range(2)]
    elif name == "cnn":
        x = rng.normal(size=(12, 6, 6, 2)).astype("float32")
    else:
        x = rng.normal(size=(12, 6)).astype("float32")
    y = rng.integers(0, 3, size=(12,))
    model.compile(kiln.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    k = keras.saving.load_model(path)
    np.testing.assert_allclose(k.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-5)
    kv = [_to_numpy(v) for v in k.optimizer.variables]
    assert int(kv[0]) == int(model.optimizer.iterations.numpy()) == 6
    np.testing.assert_allclose(kv[1], model.optimizer.learning_rate, rtol=1e-7)
    assert len(kv) == len(model.optimizer.variables) + 1
    for a_, b_ in zip(kv[2:], model.optimizer.variables[1:]):
        np.testing.assert_array_equal(a_, b_.numpy())


def test_keras_loads_schedule_and_metrics(tmp_path):
    model = _models()["mlp"]
    sched = kiln.optimizers.schedules.ExponentialDecay(0.01, 10, 0.9)
    model.compile(kiln.optimizers.Adam(sched), "sparse_categorical_crossentropy",
                  metrics=["accuracy", kiln.metrics.SparseCategoricalAccuracy(name="sca")])
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(12, 6)).astype("float32"), np.arange(12) % 3
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    path = str(tmp_path / "s.keras")
    model.save(path)
    k = keras.saving.load_model(path)
    np.testing.assert_allclose(k.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-5)
    kv = [_to_numpy(v) for v in k.optimizer.variables]
    assert int(kv[0]) == 3 and len(kv) == len(model.optimizer.variables)  # no lr variable
    for a_, b_ in zip(kv[1:], model.optimizer.variables[1:]):
        np.testing.assert_array_equal(a_, b_.numpy())
