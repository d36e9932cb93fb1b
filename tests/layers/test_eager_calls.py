"""A layer called on NumPy arrays: concrete batch sizes when call() needs them, Variable
updates in call(), and Keras' eager-tensor conveniences (.numpy(), ._keras_mask)."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import layers, ops


class StateZeros(layers.Layer):
    """call() builds a tensor from the batch size (the Keras guide's CustomRNN)."""

    def call(self, inputs):
        return inputs + ops.zeros((inputs.shape[0], inputs.shape[1]))


def test_call_that_needs_the_batch_size_runs_with_the_concrete_shape():
    x = np.arange(6, dtype="float32").reshape(2, 3)
    layer = StateZeros()
    np.testing.assert_array_equal(layer(x), x)
    x5 = np.ones((5, 3), "float32")
    np.testing.assert_array_equal(layer(x5), x5)  # another batch size: its own trace


class ComputeSum(layers.Layer):
    def __init__(self, input_dim):
        super().__init__()
        self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

    def call(self, inputs):
        self.total.assign_add(ops.sum(inputs, axis=0))
        return self.total


def test_assign_in_an_eager_call_updates_the_variable_each_call():
    layer = ComputeSum(2)
    x = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    np.testing.assert_array_equal(layer(x).numpy(), [4.0, 6.0])
    np.testing.assert_array_equal(layer(x).numpy(), [8.0, 12.0])
    np.testing.assert_array_equal(layer.total.numpy(), [8.0, 12.0])


def test_eager_results_carry_numpy_and_the_mask():
    tokens = np.array([[3, 5, 0, 0], [7, 0, 0, 0]], "int32")
    out = layers.Embedding(10, 4, mask_zero=True)(tokens)
    assert isinstance(out, np.ndarray) and type(out.numpy()) is np.ndarray
    np.testing.assert_array_equal(out._keras_mask, tokens != 0)
    masked = layers.Masking(0.0)(np.array([[[1.0], [0.0]], [[0.0], [2.0]]], "float32"))
    np.testing.assert_array_equal(masked._keras_mask, [[True, False], [False, True]])
    assert layers.Dense(2)(np.ones((1, 3), "float32"))._keras_mask is None
    assert (out + 1)._keras_mask is None  # derived arrays carry no mask


class ActivityRegularization(layers.Layer):
    def call(self, inputs):
        self.add_loss(0.5 * ops.sum(inputs))
        return inputs


def test_layer_losses_hold_the_last_eager_calls_add_loss_values():
    layer = ActivityRegularization()
    assert layer.losses == []
    layer(np.ones((2, 3), "float32"))
    assert [float(v) for v in layer.losses] == [3.0]
    layer(np.full((1, 2), 2.0, "float32"))  # reset at each call
    assert [float(v) for v in layer.losses] == [2.0]


def test_symbolic_tensors_carry_their_keras_mask():
    inp = kiln.Input((None,), dtype="int32")
    x = layers.Embedding(10, 4, mask_zero=True)(inp)
    assert x._keras_mask is not None and x._keras_mask.dtype == "bool"
    assert layers.Dense(2)(kiln.Input((3,)))._keras_mask is None


def test_fit_trains_a_model_without_trainable_weights_with_a_warning():
    import pytest

    inp = kiln.Input((3,))
    model = kiln.Model(inp, layers.Dense(1, trainable=False)(inp))
    model.compile("sgd", "mse")
    before = model.get_weights()
    with pytest.warns(UserWarning, match="does not have any trainable weights"):
        hist = model.fit(np.ones((4, 3), "float32"), np.zeros((4, 1), "float32"), verbose=0)
    w, b = before
    expected = float(np.mean((np.ones((4, 3)) @ w + b) ** 2))
    assert hist.history["loss"][0] == pytest.approx(expected, rel=1e-5)
    for a, c in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, c)
