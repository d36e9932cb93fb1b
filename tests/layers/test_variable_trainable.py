"""``Variable.trainable``: the public flag that layers set from ``add_weight(trainable=...)``
and that the weight files (Keras' layout: trainable weights first) read."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import layers
from kiln.saving.weights import keras_own_order


class _Two(layers.Layer):
    def build(self, input_shape):
        self.frozen = self.add_weight("frozen", (2,), initializer="ones", trainable=False)
        self.w = self.add_weight("w", (2,), initializer="zeros")

    def call(self, x):
        return x * self.w + self.frozen


def test_variable_trainable_defaults_to_true_and_is_a_settable_bool():
    v = kiln.Variable(np.zeros(2))
    assert v.trainable is True
    v.trainable = 0
    assert v.trainable is False
    assert kiln.Variable(np.zeros(2), trainable=False).trainable is False


def test_layers_set_it_and_read_it():
    layer = _Two()
    layer.build((None, 2))
    assert (layer.frozen.trainable, layer.w.trainable) == (False, True)
    assert layer.trainable_weights == [layer.w]
    assert layer.non_trainable_weights == [layer.frozen]
    layer.trainable = False  # freezes the layer, leaves the variables' own flags alone
    assert layer.trainable_weights == [] and layer.w.trainable is True
    layer.trainable = True
    layer.frozen.trainable = True  # a variable can be unfrozen on its own
    assert layer.trainable_weights == [layer.frozen, layer.w]


def test_keras_weight_order_puts_trainable_variables_first():
    layer = _Two()
    layer.build((None, 2))
    assert keras_own_order(layer) == [layer.w, layer.frozen]
    layer.trainable = False  # the layer flag does not change the file layout
    assert keras_own_order(layer) == [layer.w, layer.frozen]
