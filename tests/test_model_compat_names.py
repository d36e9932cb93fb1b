"""Model.input / Model.output and tf.keras' compiled_loss / compiled_metrics (Keras 3 keeps
them for compatibility), checked against closed-form results."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


def test_functional_input_and_output_are_the_constructor_tensors():
    x = kiln.Input((3,))
    y = kiln.layers.Dense(2)(x)
    model = kiln.Model(x, y)
    assert model.input is x and model.output is y
    a, b = kiln.Input((3,)), kiln.Input((4,))
    two = kiln.Model([a, b], kiln.layers.Concatenate()([a, b]))
    assert two.input == [a, b]


def test_sequential_input_and_output_after_build():
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(2)])
    assert tuple(model.input.shape) == (None, 3)
    assert tuple(model.output.shape) == (None, 2)


def test_subclassed_model_has_input_only_once_called():
    class Net(kiln.Model):
        def __init__(self):
            super().__init__()
            self.dense = kiln.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    net = Net()
    with pytest.raises(AttributeError, match="has no defined input.*never been called"):
        _ = net.input
    assert not hasattr(net, "output")
    x = kiln.Input((3,))
    y = net(x)
    assert net.input is x and net.output is y


class CustomModel(kiln.Model):
    """keras.io "Customizing what happens in fit()" (the tf.keras-era version)."""

    def train_step(self, data):
        x, y = data
        with kiln.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compiled_loss(y, y_pred, regularization_losses=self.losses)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))
        self.compiled_metrics.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def test_compiled_loss_and_metrics_in_a_custom_train_step():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 2)).astype("float32")
    y = rng.normal(size=(8, 1)).astype("float32")
    inputs = kiln.Input((2,))
    outputs = kiln.layers.Dense(1, use_bias=False, kernel_initializer="ones")(inputs)
    model = CustomModel(inputs, outputs)
    model.compile(optimizer=kiln.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    history = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    w0 = np.ones((2, 1))
    err = x.astype(np.float64) @ w0 - y
    expected_w = w0 - 0.1 * 2.0 / 8 * x.T.astype(np.float64) @ err  # d mean(err^2) / dw
    np.testing.assert_allclose(model.get_weights()[0], expected_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(history.history["mae"][0], np.mean(np.abs(err)), rtol=1e-5)


def test_compiled_loss_eagerly_is_the_compiled_loss():
    inputs = kiln.Input((2,))
    model = kiln.Model(inputs, kiln.layers.Dense(1)(inputs))
    model.compile(optimizer="sgd", loss="mae")
    y, p = np.array([[1.0], [2.0]], "float32"), np.array([[0.5], [4.0]], "float32")
    value = model.compiled_loss(kiln.ops.convert_to_tensor(y), kiln.ops.convert_to_tensor(p))
    np.testing.assert_allclose(np.asarray(kiln.ops.convert_to_numpy(value)), 1.25, rtol=1e-6)


def test_compiled_metrics_needs_compile():
    inputs = kiln.Input((2,))
    model = kiln.Model(inputs, kiln.layers.Dense(1)(inputs))
    with pytest.raises(RuntimeError, match="compile"):
        model.compiled_metrics.update_state(np.zeros((1, 1)), np.zeros((1, 1)))
