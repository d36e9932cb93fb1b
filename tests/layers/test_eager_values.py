"""A user's layer called on concrete arrays runs its ``call()`` on the values, as Keras' eager
mode does: ``print``, NumPy and Python branches on values work inside ``call()``; the same
layer inside a model is still traced into the compiled graph. Oracles: NumPy forward passes
and closed-form gradients."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers, ops


class SignedProjection(layers.Layer):
    """call() reads values: NumPy on the input, a Python branch on a reduced value, print."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 2), initializer="ones")

    def call(self, x):
        print("sum of the batch:", float(np.asarray(x).sum()))
        if ops.sum(x) > 0:
            return ops.matmul(x, self.w)
        return -ops.matmul(x, self.w)


def test_call_runs_on_the_values(capsys):
    layer = SignedProjection()
    x = np.array([[1.0, 2.0, 3.0]], "float32")
    np.testing.assert_allclose(layer(x), [[6.0, 6.0]])
    np.testing.assert_allclose(layer(-x), [[6.0, 6.0]])  # the other branch: -(-x @ w)
    assert capsys.readouterr().out.splitlines() == ["sum of the batch: 6.0",
                                                    "sum of the batch: -6.0"]
    assert type(layer(x).numpy()) is np.ndarray


def test_the_same_layer_in_a_model_is_traced():
    class Scale(layers.Layer):
        def call(self, x):
            return x * 3.0

    inputs = kiln.Input((2,))
    model = kiln.Model(inputs, Scale()(inputs))
    np.testing.assert_allclose(model.predict(np.ones((2, 2), "float32"), verbose=0),
                               np.full((2, 2), 3.0))
    with pytest.raises(TypeError, match="symbolic kiln tensor"):
        SignedProjection()(kiln.Input((3,)))  # np.asarray on a symbolic input: clear error


def test_gradient_tape_through_an_eager_call():
    """d/dw sum(relu(x @ w)) = x^T @ (x @ w > 0)."""
    class Relu(layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 3), initializer="random_normal")

        def call(self, x):
            return ops.relu(ops.matmul(x, self.w))

    layer = Relu()
    x = np.random.default_rng(0).normal(size=(4, 2)).astype("float32")
    layer(x)
    with kiln.GradientTape() as tape:
        loss = ops.sum(layer(x))
    (g,) = tape.gradient(loss, [layer.w])
    w = layer.w.numpy()
    np.testing.assert_allclose(g, x.T @ (x @ w > 0).astype("float32"), rtol=1e-5, atol=1e-6)


def test_add_loss_and_variable_updates_in_an_eager_call():
    class Counter(layers.Layer):
        def build(self, input_shape):
            self.seen = self.add_weight(shape=(), initializer="zeros", trainable=False)

        def call(self, x):
            self.seen.assign_add(float(np.asarray(x).shape[0]))
            self.add_loss(0.5 * ops.sum(x))
            return self.seen

    layer = Counter()
    assert float(layer(np.ones((3, 2), "float32"))) == 3.0
    assert float(layer(np.ones((2, 2), "float32"))) == 5.0
    assert [float(v) for v in layer.losses] == [2.0]
