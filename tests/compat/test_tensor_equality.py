"""``==`` / ``!=`` on symbolic tensors are elementwise (Keras' KerasTensor), nodes stay usable
as dict keys and set members, and the Keras guide's custom metric ``CategoricalTruePositives``
(keras.io guide "Training & evaluation with the built-in methods", custom metrics) counts."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import metrics as M
from kiln import ops


def test_eq_ne_are_elementwise_eager_and_symbolic():
    a = np.array([[1.0, 2.0, 3.0]], "float32")
    b = np.array([[1.0, 5.0, 3.0]], "float32")
    x = kiln.Input((3,))
    y = kiln.Input((3,))
    eq, ne, eq_scalar = x == y, x != y, x == 2.0
    assert isinstance(eq, kiln.Node) and eq.dtype == "bool" and ne.dtype == "bool"
    f = kiln.function([x, y], [eq, ne, eq_scalar])
    got = f(a, b)
    np.testing.assert_array_equal(got[0], a == b)
    np.testing.assert_array_equal(got[1], a != b)
    np.testing.assert_array_equal(got[2], a == 2.0)


def test_truth_value_raises_but_nodes_stay_hashable():
    x = kiln.Input((3,))
    y = kiln.Input((3,))
    with pytest.raises(TypeError, match="truth value of a symbolic kiln tensor"):
        bool(x == y)
    assert {x: 1, y: 2}[y] == 2 and x in {x} and y not in {x}
    assert (x == None) is False and (x != None) is True  # noqa: E711  (identity fallback)
    assert x in [None, "a", x]


class CategoricalTruePositives(M.Metric):
    """The guide's metric, as written there (with kiln for keras)."""

    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
        values = ops.cast(y_true, "int32") == ops.cast(y_pred, "int32")
        values = ops.cast(values, "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            values = ops.multiply(values, sample_weight)
        self.true_positives.assign_add(ops.sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        self.true_positives.assign(0.0)


def test_guide_categorical_true_positives_in_fit_and_evaluate():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype("float32")
    y = rng.integers(0, 4, size=(64, 1)).astype("int32")
    inputs = kiln.Input((8,))
    outputs = kiln.layers.Dense(4)(inputs)
    model = kiln.Model(inputs, outputs)
    # learning rate 0: the predictions are those of the initial weights in every batch, so the
    # count is known from predict (NumPy oracle).
    model.compile(optimizer=kiln.optimizers.SGD(learning_rate=0.0),
                  loss="sparse_categorical_crossentropy", metrics=[CategoricalTruePositives()])
    expected = float(np.sum(np.argmax(model.predict(x, verbose=0), axis=1) == y[:, 0]))
    assert 0 < expected < 64
    hist = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert hist.history["categorical_true_positives"][0] == pytest.approx(expected)
    logs = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    assert logs["categorical_true_positives"] == pytest.approx(expected)
