"""Every public activation (``kiln.activations``) and every activation of ``kiln.ops.nn`` on a
NumPy array returns a NumPy array, equal to a NumPy formula (Keras 3's definitions), and
still builds graph nodes on symbolic tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import activations as A
from kiln.ops import nn as N

X = np.array([[-6.0, -2.5, -1.0, -0.1, 0.0], [0.1, 0.7, 1.0, 2.5, 7.0]], "float32")
_erf = np.vectorize(math.erf)


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softplus(x):
    return np.log1p(np.exp(x))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _elu(x, a=1.0):
    return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


_SELU_A, _SELU_S = 1.6732632423543772, 1.0507009873554805
_GELU_TANH = lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))  # noqa: E731

def _sparsemax(x):
    z = -np.sort(-x, axis=-1)
    k = np.arange(1, x.shape[-1] + 1)
    cs = np.cumsum(z, axis=-1)
    support = (1 + k * z > cs).sum(-1, keepdims=True)
    tau = (np.take_along_axis(cs, support - 1, -1) - 1) / support
    return np.maximum(x - tau, 0)


def _glu0(x):  # glu along axis -2 (X has 2 rows)
    a, b = np.split(x, 2, axis=0)
    return a * _sig(b)


FORMULAS = {
    "relu": lambda x: np.maximum(x, 0), "relu6": lambda x: np.clip(x, 0, 6),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.2 * x), "sigmoid": _sig, "tanh": np.tanh,
    "softmax": _softmax, "log_softmax": lambda x: np.log(_softmax(x)), "linear": lambda x: x,
    "elu": _elu, "selu": lambda x: _SELU_S * _elu(x, _SELU_A),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "silu": lambda x: x * _sig(x), "swish": lambda x: x * _sig(x),
    "hard_silu": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "hard_swish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "softplus": _softplus, "softsign": lambda x: x / (1 + np.abs(x)),
    "mish": lambda x: x * np.tanh(_softplus(x)), "log_sigmoid": lambda x: -_softplus(-x),
    "exponential": np.exp, "hard_sigmoid": lambda x: np.clip(x / 6 + 0.5, 0, 1),
    # Keras 3.15's definitions (keras/src/ops/nn.py)
    "celu": lambda x: np.maximum(x, 0) + np.minimum(0, np.expm1(x)),
    "glu": _glu0, "hard_shrink": lambda x: np.where(np.abs(x) > 0.5, x, 0),
    "hard_tanh": lambda x: np.clip(x, -1, 1),
    "soft_shrink": lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)),
    "sparse_plus": lambda x: np.where(x <= -1, 0, np.where(x >= 1, x, (x + 1) ** 2 / 4)),
    "sparse_sigmoid": lambda x: np.clip((x + 1) / 2, 0, 1),
    "sparsemax": _sparsemax, "squareplus": lambda x: (x + np.sqrt(x * x + 4)) / 2,
    "tanh_shrink": lambda x: x - np.tanh(x),
    "threshold": lambda x: np.where(x > 0.5, x, -3.0),
}
ARGS = {"glu": (-2,), "threshold": (0.5, -3.0)}  # glu along the even axis; no defaults
OPS_NN = {**{k: FORMULAS[k] for k in ("relu", "relu6", "sigmoid", "tanh", "softplus",
                                      "softmax", "log_softmax", "leaky_relu", "elu", "selu",
                                      "silu", "swish", "softsign", "hard_sigmoid",
                                      "log_sigmoid", "hard_silu", "hard_swish")},
          **{k: FORMULAS[k] for k in ARGS.keys() | {"celu", "hard_shrink", "hard_tanh",
                                                      "soft_shrink", "sparse_plus",
                                                      "sparse_sigmoid", "sparsemax",
                                                      "squareplus", "tanh_shrink"}},
          "gelu": _GELU_TANH}  # keras.ops.nn.gelu defaults to approximate=True


def test_every_public_activation_has_a_formula():
    assert set(A._ALL) == set(FORMULAS)
    assert {k for k in N.__all__ if k in FORMULAS or k == "gelu"} == set(OPS_NN)


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_activation_on_arrays_is_eager(name):
    fn = A.get(name)
    args = ARGS.get(name, ())
    got = fn(X, *args)
    expected = FORMULAS[name](X.astype("float64"))
    assert type(got) is np.ndarray and got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)
    got64 = fn(X.astype("float64"), *args)
    assert got64.dtype == np.float64
    np.testing.assert_allclose(got64, FORMULAS[name](X.astype("float64")), rtol=1e-10,
                               atol=1e-12)
    node = fn(kiln.Input((2, 5)), *args)
    assert isinstance(node, kiln.Node)


@pytest.mark.parametrize("name", sorted(OPS_NN))
def test_ops_nn_activation_on_arrays_is_eager(name):
    got = getattr(N, name)(X, *ARGS.get(name, ()))
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, OPS_NN[name](X.astype("float64")), rtol=2e-5, atol=2e-6)


def test_activation_arguments_on_arrays():
    np.testing.assert_allclose(A.relu(X, negative_slope=0.1, max_value=2.0, threshold=0.5),
                               np.where(X < 0.5, 0.1 * (X - 0.5), np.minimum(X, 2.0)),
                               rtol=1e-6)
    np.testing.assert_allclose(A.elu(X, alpha=0.5), _elu(X, 0.5), rtol=1e-6)
    np.testing.assert_allclose(A.gelu(X, approximate=True), _GELU_TANH(X), rtol=2e-5,
                               atol=2e-6)
    np.testing.assert_allclose(np.asarray(A.relu([1.0, -2.0])), [1.0, 0.0])
