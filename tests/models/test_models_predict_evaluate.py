"""predict / evaluate / *_on_batch: shapes, return types and agreement with each other."""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import blobs

import kiln
from kiln import layers


@pytest.fixture
def model():
    m = kiln.Sequential([kiln.Input((8,)), layers.Dense(12, activation="relu"),
                         layers.Dense(10, activation="softmax")])
    m.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


def test_predict_shapes_and_batching(model):
    x, _ = blobs(70)
    full = model.predict(x, verbose=0)
    assert full.shape == (70, 10) and full.dtype == np.float32
    # float32 GEMMs sum in a blocking order that depends on the batch size: a few ulp apart
    np.testing.assert_allclose(model.predict(x, batch_size=7, verbose=0), full, rtol=1e-5)
    np.testing.assert_allclose(model.predict_on_batch(x[:5]), full[:5], rtol=1e-6)
    np.testing.assert_allclose(model(x[:5]), full[:5], rtol=1e-6)
    assert model.predict(x, steps=2, batch_size=10, verbose=0).shape == (20, 10)
    # float64 and int inputs are converted once
    assert model.predict(x.astype(np.float64), verbose=0).shape == (70, 10)


def test_evaluate_return_types(model):
    x, y = blobs(50)
    values = model.evaluate(x, y, verbose=0)
    assert isinstance(values, list) and len(values) == 2
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    assert list(logs) == ["loss", "accuracy"] and all(isinstance(v, float)
                                                      for v in logs.values())
    assert logs["loss"] == pytest.approx(values[0]) and logs["accuracy"] == values[1]
    pred = model.predict(x, verbose=0)
    np.testing.assert_allclose(logs["loss"], np.mean(
        -np.log(pred[np.arange(50), y])), rtol=1e-5)
    only_loss = kiln.Sequential([kiln.Input((8,)), layers.Dense(1)])
    only_loss.compile("sgd", "mse")
    assert isinstance(only_loss.evaluate(x, y.astype(np.float32), verbose=0), float)
    assert model.metrics_names == ["loss", "accuracy"]


def test_on_batch_methods_accumulate_like_keras3(model):
    x, y = blobs(32)
    first = model.train_on_batch(x, y, return_dict=True)
    assert set(first) == {"loss", "accuracy"}
    loss = model.test_on_batch(x, y)
    assert isinstance(loss, list) and len(loss) == 2
    model.reset_metrics()
    single = model.test_on_batch(x, y, return_dict=True)
    np.testing.assert_allclose(single["loss"], model.evaluate(x, y, verbose=0)[0], rtol=1e-5)


def test_predict_multi_output_structures():
    inp = kiln.Input((3,))
    h = layers.Dense(4)(inp)
    as_list = kiln.Model(inp, [layers.Dense(1)(h), layers.Dense(2)(h)])
    out = as_list.predict(np.ones((5, 3)), verbose=0)
    assert isinstance(out, list) and [o.shape for o in out] == [(5, 1), (5, 2)]
    as_dict = kiln.Model(inp, {"p": layers.Dense(2)(h)})
    out = as_dict.predict(np.ones((5, 3)), verbose=0)
    assert isinstance(out, dict) and out["p"].shape == (5, 2)


def test_history_and_callbacks_see_float_logs(model):
    x, y = blobs(40)
    seen = []

    class Spy(kiln.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(dict(logs))

    history = model.fit(x, y, epochs=2, batch_size=16, callbacks=[Spy()], verbose=0)
    assert len(seen) == 6 and all(isinstance(v, float) for d in seen for v in d.values())
    assert history.epoch == [0, 1] and set(history.history) == {"loss", "accuracy"}
    # the last batch logs are the epoch's running means
    assert seen[-1] == pytest.approx({k: v[-1] for k, v in history.history.items()})
