"""A Keras 3-style custom Metric (``add_variable``/``add_weight``, ``update_state`` with
``kiln.ops`` and ``assign_add``, ``result`` from the variables, ``reset_state``) standalone and
in ``compile(metrics=[...])``, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import metrics as M

rng = np.random.default_rng(5)


@kiln.saving.register_serializable(package="TestMetrics")
class WeightedMAE(M.Metric):
    """Keras' idiom, written as a user would."""

    def __init__(self, name="weighted_mae", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_weight(name="count", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        values = K.mean(K.abs(y_true - y_pred), axis=-1)
        if sample_weight is None:
            self.count.assign_add(K.cast(K.size_of(values), "float32"))
        else:
            values = values * K.reshape(sample_weight, (-1,))
            self.count.assign(self.count + K.sum(sample_weight))
        self.total.assign_add(K.sum(values))

    def result(self):
        return self.total / K.maximum(self.count, 1e-12)


class PerClassHits(M.Metric):
    """A vector variable and a custom reset_state."""

    def __init__(self, classes=3, name="hits", **kwargs):
        super().__init__(name=name, **kwargs)
        self.classes = classes
        self.hits = self.add_variable(shape=(classes,), name="hits")

    def update_state(self, y_true, y_pred, sample_weight=None):
        onehot = K.one_hot(K.argmax(y_pred, axis=-1), self.classes)
        self.hits.assign_add(K.sum(onehot * K.cast(y_true, "float32"), axis=0))

    def result(self):
        return self.hits

    def reset_state(self):
        self.hits.assign(np.zeros(self.classes, "float32"))

    def get_config(self):
        return {**super().get_config(), "classes": self.classes}


def _np_wmae(y, p, w=None):
    v = np.abs(y - p).mean(-1)
    w = np.ones(len(v)) if w is None else w
    return np.sum(v * w) / np.sum(w)


def test_standalone_update_result_reset_and_state():
    y, p = rng.normal(size=(9, 4)), rng.normal(size=(9, 4))
    w = rng.uniform(0.1, 2.0, 9)
    m = WeightedMAE()
    m.update_state(y[:4], p[:4], sample_weight=w[:4])
    m.update_state(y[4:], p[4:], sample_weight=w[4:])
    np.testing.assert_allclose(m.result(), _np_wmae(y, p, w), rtol=1e-5)
    state = m.get_state()
    m.reset_state()
    assert m.result() == 0.0 and [v.numpy() for v in m.variables] == [0.0, 0.0]
    m.set_state(state)
    np.testing.assert_allclose(m.result(), _np_wmae(y, p, w), rtol=1e-5)
    hits = PerClassHits()
    labels = np.eye(3)[[0, 1, 2, 2]]
    scores = np.array([[0.9, 0.0, 0.1], [0.8, 0.1, 0.1], [0.0, 0.2, 0.7], [0.1, 0.1, 0.8]])
    hits.update_state(labels, scores)
    np.testing.assert_array_equal(hits.result(), [1.0, 0.0, 2.0])
    hits.reset_state()
    np.testing.assert_array_equal(hits.result(), [0.0, 0.0, 0.0])


def test_in_compile_fit_and_evaluate():
    x = rng.normal(size=(22, 4)).astype("float32")
    y = rng.normal(size=(22, 2)).astype("float32")
    sw = rng.uniform(0.2, 1.5, 22)
    model = kiln.Sequential([kiln.Input((4,)), kiln.layers.Dense(2)])
    model.compile("sgd", "mse", metrics=[WeightedMAE(name="u")],
                  weighted_metrics=[WeightedMAE(name="wu")])
    history = model.fit(x, y, batch_size=5, epochs=2, verbose=0)
    assert len(history.history["u"]) == 2
    logs = model.evaluate(x, y, sample_weight=sw, batch_size=6, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    np.testing.assert_allclose(logs["u"], _np_wmae(y, pred), rtol=1e-5)
    np.testing.assert_allclose(logs["wu"], _np_wmae(y, pred, sw), rtol=1e-5)
    # evaluate starts from a reset state: a second run gives the same value
    again = model.evaluate(x, y, sample_weight=sw, batch_size=11, verbose=0, return_dict=True)
    np.testing.assert_allclose(again["wu"], logs["wu"], rtol=1e-5)


def test_keras_file_round_trip(tmp_path):
    x = rng.normal(size=(10, 4)).astype("float32")
    y = rng.normal(size=(10, 2)).astype("float32")
    model = kiln.Sequential([kiln.Input((4,)), kiln.layers.Dense(2)])
    model.compile("sgd", "mse", metrics=[WeightedMAE(name="u")])
    model.fit(x, y, batch_size=5, epochs=1, verbose=0)
    path = str(tmp_path / "c.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    logs = loaded.evaluate(x, y, verbose=0, return_dict=True)
    np.testing.assert_allclose(logs["u"], _np_wmae(y, loaded.predict(x, verbose=0)), rtol=1e-5)


def test_symbolic_update_outside_a_step_is_refused():
    m = WeightedMAE()
    ph = kiln.placeholder((None, 2))
    with pytest.raises(TypeError, match="outside a traced step"):
        m.update_state(ph, ph)
    assert m.get_state() == [0.0, 0.0]


def test_bad_variable_arguments():
    class Bad(M.Metric):
        def __init__(self):
            super().__init__(name="bad")
            self.v = self.add_variable(shape=(2,), aggregation="max", name="v")

        def update_state(self, y_true, y_pred, sample_weight=None):
            pass

    with pytest.raises(ValueError, match="aggregation must be"):
        Bad()


class ScaledMean(M.Mean):
    """Keras' older idiom: a subclass of a built-in metric whose update_state preprocesses and
    calls super().update_state (the built-in statistics), plus a variable of its own."""

    def __init__(self, scale=2.0, name="scaled_mean", **kwargs):
        super().__init__(name=name, **kwargs)
        self.scale = scale
        self.calls = self.add_variable(shape=(), name="calls")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.calls.assign_add(1.0)
        err = K.mean(K.square(y_true - y_pred), axis=-1) * self.scale
        super().update_state(err, sample_weight=sample_weight)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


def test_subclass_of_a_builtin_metric_with_its_own_update_state():
    y, p = rng.normal(size=(10, 3)), rng.normal(size=(10, 3))
    w = rng.uniform(0.1, 2.0, 10)
    m = ScaledMean(scale=3.0)
    m.update_state(y[:4], p[:4], w[:4])  # sample_weight passed positionally, as Keras allows
    m.update_state(y[4:], p[4:], sample_weight=w[4:])
    want = np.sum(3.0 * np.square(y - p).mean(-1) * w) / np.sum(w)
    np.testing.assert_allclose(m.result(), want, rtol=1e-5)
    assert m.calls.numpy() == 2.0
    x = rng.normal(size=(13, 4)).astype("float32")
    t = rng.normal(size=(13, 3)).astype("float32")
    model = kiln.Sequential([kiln.Input((4,)), kiln.layers.Dense(3)])
    model.compile("sgd", "mse", metrics=[ScaledMean(scale=0.5, name="half_mse")])
    logs = model.evaluate(x, t, batch_size=5, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    np.testing.assert_allclose(logs["half_mse"], 0.5 * np.mean(np.square(t - pred)), rtol=1e-5)
    np.testing.assert_allclose(logs["half_mse"], 0.5 * logs["loss"], rtol=1e-5)


def test_subclass_that_forgets_super_update_state_is_refused():
    class Forgot(M.Mean):
        def update_state(self, y_true, y_pred, sample_weight=None):
            pass

    with pytest.raises(ValueError, match="never called super"):
        Forgot().update_state(np.ones((2, 2)), np.ones((2, 2)))
