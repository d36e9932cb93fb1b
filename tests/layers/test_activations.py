"""Activations against NumPy formulas (forward and, through kiln.grad, finite gradients), and
get/serialize."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import activations

X = np.concatenate([np.linspace(-6, 6, 49), [-30.0, 30.0, 0.0, 1e-3, -1e-3]]).reshape(-1, 1)
_erf = np.vectorize(math.erf)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ALPHA, SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
FORMULAS = {
    "relu": lambda x: np.maximum(x, 0),
    "relu6": lambda x: np.clip(x, 0, 6),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.2 * x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "linear": lambda x: x,
    "elu": lambda x: np.where(x > 0, x, np.exp(x) - 1),
    "selu": lambda x: SCALE * np.where(x > 0, x, ALPHA * (np.exp(x) - 1)),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "silu": lambda x: x * _sigmoid(x),
    "swish": lambda x: x * _sigmoid(x),
    "hard_silu": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)),
    "log_sigmoid": lambda x: -(np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)),
    "exponential": np.exp,
    "hard_sigmoid": lambda x: np.maximum(0, np.minimum(6, x + 3)) / 6,  # relu6(x + 3) / 6
}


def _run(fn, x: np.ndarray, grad: bool = False):
    ph = kiln.placeholder(x.shape, "float64")
    y = fn(ph)
    outs = [y] + (kiln.grad(y, [ph]) if grad else [])
    return kiln.function([ph], outs, backend="reference")(x)


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_activation_matches_numpy_and_has_finite_gradient(name: str) -> None:
    fn = activations.get(name)
    x = X if name != "exponential" else X[np.abs(X[:, 0]) < 20]
    y, g = _run(fn, x, grad=True)
    np.testing.assert_allclose(y, FORMULAS[name](x), rtol=1e-10, atol=1e-12)
    assert np.all(np.isfinite(g)), f"{name}: non-finite gradient"


def test_gradient_matches_finite_differences() -> None:
    x = np.linspace(-3, 3, 13).reshape(-1, 1) + 0.05  # avoid the kinks at 0 and +-3
    eps = 1e-6
    for name in ["elu", "selu", "gelu", "silu", "softplus", "mish", "hard_sigmoid",
                 "leaky_relu"]:
        _, g = _run(activations.get(name), x, grad=True)
        fd = (FORMULAS[name](x + eps) - FORMULAS[name](x - eps)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8, err_msg=name)


def test_gelu_tanh_approximation() -> None:
    (y,) = _run(lambda t: activations.gelu(t, approximate=True), X)
    want = 0.5 * X * (1 + np.tanh(np.sqrt(2 / np.pi) * (X + 0.044715 * X**3)))
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(y, FORMULAS["gelu"](X), atol=1e-3)  # close to the exact form


def test_softmax_and_log_softmax() -> None:
    x = np.random.default_rng(0).normal(size=(3, 5)) * 10
    (y,) = _run(activations.softmax, x)
    np.testing.assert_allclose(y, _softmax(x), rtol=1e-10)
    (y,) = _run(lambda t: activations.softmax(t, axis=0), x)
    np.testing.assert_allclose(y, _softmax(x, 0), rtol=1e-10)
    (y,) = _run(activations.log_softmax, x)
    np.testing.assert_allclose(y, np.log(_softmax(x)), rtol=1e-10)


def test_relu_options_and_leaky_slope() -> None:
    (y,) = _run(lambda t: activations.relu(t, negative_slope=0.1, max_value=2.0, threshold=0.5),
                X)
    want = np.where(X >= 0.5, np.minimum(X, 2.0), 0.1 * (X - 0.5))
    np.testing.assert_allclose(y, want, rtol=1e-12)
    (y,) = _run(lambda t: activations.leaky_relu(t, negative_slope=0.01), X)
    np.testing.assert_allclose(y, np.where(X >= 0, X, 0.01 * X), rtol=1e-12)
    (y,) = _run(lambda t: activations.elu(t, alpha=0.5), X)
    np.testing.assert_allclose(y, np.where(X > 0, X, 0.5 * np.expm1(X)), rtol=1e-12)


def test_get_and_serialize() -> None:
    assert activations.get(None) is activations.linear
    assert activations.get("relu") is activations.relu
    assert activations.get({"class_name": "function", "config": "tanh"}) is activations.tanh
    custom = lambda t: t  # noqa: E731
    assert activations.get(custom) is custom
    for name in FORMULAS:
        fn = activations.get(name)
        assert activations.get(activations.serialize(fn)) is fn
    assert activations.serialize(activations.swish) == "silu"
    assert activations.serialize(None) == "linear"


def test_unknown_activation_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"Unknown activation 'relux'.*gelu.*relu.*tanh"):
        activations.get("relux")
    with pytest.raises(ValueError, match="valid names"):
        kiln.layers.Dense(3, activation="nope")
    with pytest.raises(TypeError):
        activations.get(3)
