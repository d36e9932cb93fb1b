"""Recurrent layers on inputs they cannot run (issue 46, items b and c): zero time steps and a
mask of another batch size raise ValueError naming the layer and the shapes, before the layer
is built or its weights change. (Keras' TensorFlow backend fails inside its loop on zero
steps: "slice index 0 of dimension 1 out of bounds".)"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers

CLASSES = [layers.SimpleRNN, layers.LSTM, layers.GRU]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("kwargs", [{}, {"return_sequences": True}, {"return_state": True}],
                         ids=["last", "sequences", "state"])
def test_zero_time_steps_raise_a_clear_error(cls, kwargs):
    layer = cls(5, name="rec", **kwargs)
    with pytest.raises(ValueError, match=r"Layer 'rec' \(" + cls.__name__ +
                       r"\) received inputs of shape \(4, 0, 3\): a sequence of 0 time steps"):
        layer(np.zeros((4, 0, 3), np.float32))
    assert not layer.built


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_zero_time_steps_in_a_functional_model(cls):
    with pytest.raises(ValueError, match=r"received inputs of shape \(None, 0, 3\)"):
        cls(2, name="rec")(kiln.Input((0, 3)))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_mask_of_another_batch_size_names_the_layer_and_both_shapes(cls):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    layer = cls(2, name="rec")
    want = layer(x, mask=np.ones((4, 5), bool))  # built, with weights
    weights = [w.copy() for w in layer.get_weights()]
    with pytest.raises(ValueError, match=r"Layer 'rec' \(" + cls.__name__ + r"\): the mask has "
                       r"shape \(3, 5\), expected \(batch, steps\) = \(4, 5\) for inputs of "
                       r"shape \(4, 5, 3\)"):
        layer(x, mask=np.ones((3, 5), bool))
    with pytest.raises(ValueError, match=r"the mask has shape \(4, 6\)"):
        layer(x, mask=np.ones((4, 6), bool))
    for a, b in zip(layer.get_weights(), weights):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(layer(x, mask=np.ones((4, 5), bool)), want)
