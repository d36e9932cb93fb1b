"""Regularizers: penalties against their closed forms, Keras' string defaults,
serialization, and the penalties a layer contributes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln import regularizers as R

W = np.random.default_rng(0).normal(size=(4, 3))


def _value(node) -> float:
    return float(kiln.function([], node, backend="reference")())


@pytest.mark.parametrize("reg,want", [
    (R.L1(0.3), 0.3 * np.abs(W).sum()),
    (R.L2(0.2), 0.2 * (W**2).sum()),
    (R.L1L2(l1=0.1, l2=0.4), 0.1 * np.abs(W).sum() + 0.4 * (W**2).sum()),
    (R.L1L2(), 0.0),
    (R.get("l1"), 0.01 * np.abs(W).sum()),
    (R.get("l2"), 0.01 * (W**2).sum()),
    (R.get("l1_l2"), 0.01 * np.abs(W).sum() + 0.01 * (W**2).sum()),
], ids=["L1", "L2", "L1L2", "L1L2-zero", "l1", "l2", "l1_l2"])
def test_penalty_closed_form(reg, want) -> None:
    assert np.isclose(_value(reg(W)), want, rtol=1e-12)
    node = reg(kiln.Variable(W, dtype="float64"))
    assert node.shape == () and np.isclose(_value(node), want, rtol=1e-12)


def test_defaults_like_keras() -> None:
    assert R.L1().l1 == 0.01 and R.L2().l2 == 0.01
    assert R.L1L2().get_config() == {"l1": 0.0, "l2": 0.0}
    assert R.get("l1_l2").get_config() == {"l1": 0.01, "l2": 0.01}


@pytest.mark.parametrize("reg", [R.L1(0.5), R.L2(0.25), R.L1L2(0.1, 0.2)],
                         ids=lambda r: type(r).__name__)
def test_serialize_round_trip(reg) -> None:
    config = R.serialize(reg)
    assert config["class_name"] == type(reg).__name__ and config["module"] == "keras.regularizers"
    again = R.deserialize(json.loads(json.dumps(config)))
    assert type(again) is type(reg) and again.get_config() == reg.get_config()
    assert R.serialize(None) is None and R.get(None) is None


def test_layer_penalties_and_trainable_switch() -> None:
    layer = L.Conv2D(2, 3, kernel_regularizer=R.L2(0.1), bias_regularizer="l1",
                     bias_initializer="ones")
    layer(kiln.placeholder((None, 5, 5, 1)))
    kernel, bias = layer.get_weights()
    values = [_value(p) for p in layer.losses]
    np.testing.assert_allclose(values, [0.1 * (kernel**2).sum(), 0.01 * np.abs(bias).sum()],
                               rtol=1e-6)
    layer.trainable = False
    assert layer.losses == []


def test_invalid_and_unknown() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        R.L2(-1.0)
    with pytest.raises(ValueError, match=r"Unknown regularizer 'l3'.*l1_l2"):
        R.get("l3")
    with pytest.raises(ValueError, match="valid names"):
        L.Dense(2, kernel_regularizer="L3")
