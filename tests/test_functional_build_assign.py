"""A symbolic ``Variable.assign`` in ``call()`` while a functional model is being built.

Keras builds functional models by calling each layer on symbolic tensors inside a
``StatelessScope``: an ``assign`` there is discarded, and the update happens when the model
runs (keras.io's PixelCNN masks its kernel so: ``kernel.assign(kernel * mask)``)."""

import numpy as np
import pytest

import kiln as keras
from kiln import layers, ops


class MaskedDense(layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units),
                                      initializer="ones", name="kernel")
        self.mask = np.tril(np.ones((input_shape[-1], self.units)))

    def call(self, inputs):
        self.kernel.assign(self.kernel * self.mask)
        return ops.matmul(inputs, self.kernel)


def test_building_the_functional_model_leaves_the_variable_alone():
    inputs = keras.Input(shape=(3,))
    layer = MaskedDense(3)
    outputs = layer(inputs)
    assert outputs.shape == (None, 3)
    np.testing.assert_array_equal(layer.kernel.numpy(), np.ones((3, 3)))  # discarded
    model = keras.Model(inputs, outputs)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    # running the model applies the update, and the matmul reads the masked kernel
    np.testing.assert_allclose(model.predict(x, verbose=0), x @ np.tril(np.ones((3, 3))))


def test_fit_trains_through_the_masked_kernel():
    # Keras (JAX trainer): the assign is the forward pass' value; the optimizer's update of
    # the trainable kernel is the step's update; every call masks the kernel again
    inputs = keras.Input(shape=(3,))
    layer = MaskedDense(3)
    model = keras.Model(inputs, layer(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=(8, 3)).astype("float32")
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    # one SGD step from the stored (unmasked) kernel with the gradient of the masked kernel's
    # use (NumPy reference; the read after the assign passes its gradient straight to the
    # kernel, as TensorFlow's variable reads do: the masked entries never reach an output)
    mask = np.tril(np.ones((3, 3)))
    w = np.ones((3, 3)) * mask
    g = x.T @ (2 * (x @ w - y) / y.size)
    expected = np.ones((3, 3)) - 0.1 * g
    kernel = layer.kernel.numpy()
    np.testing.assert_allclose(kernel, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(x, verbose=0), x @ (expected * mask),
                               rtol=1e-5, atol=1e-5)


def test_a_symbolic_assign_outside_any_layer_still_says_why():
    v = keras.Variable(np.ones(3, "float32"), name="v")
    x = keras.Input(shape=(3,))
    with pytest.raises(ValueError, match="'v': assign\\(\\) received a symbolic tensor "
                                         "outside a traced step"):
        v.assign(ops.sum(x, axis=0))
