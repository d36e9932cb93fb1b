"""Conv1D / pooling 1D / GlobalMaxPooling1D on ``Input((None, C))`` (sequences of unknown
length) train: the input gradient of a convolution or an average pool of unknown spatial size
(kiln/core/ops/conv_dynamic.py) equals the static-length gradient (float64), one is checked
against central finite differences, and fit runs on two different lengths with the losses a
static-length model of the same weights gives."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ops

rng = np.random.default_rng(0)
W = rng.normal(size=(3, 3, 4))
WD = rng.normal(size=(3, 3, 2))

CASES = {
    "valid": lambda t: ops.conv(t, W, padding="valid"),
    "valid_stride2": lambda t: ops.conv(t, W, strides=2),
    "valid_stride3_dilation1": lambda t: ops.conv(t, W, strides=3),
    "valid_dilation2": lambda t: ops.conv(t, W, dilation_rate=2),
    "same": lambda t: ops.conv(t, W, padding="same"),
    "same_dilation2": lambda t: ops.conv(t, W, padding="same", dilation_rate=2),
    "depthwise_same": lambda t: ops.depthwise_conv(t, WD, padding="same"),
    "avg_pool_valid_stride2": lambda t: ops.average_pool(t, 3, strides=2),
    "avg_pool_same": lambda t: ops.average_pool(t, 3, strides=1, padding="same"),
    "max_pool_valid_stride2": lambda t: ops.max_pool(t, 3, strides=2),
    "conv_then_pool": lambda t: ops.average_pool(ops.relu(ops.conv(t, W, padding="same")), 2),
}


def _loss_and_grad(build, x, length):
    ph = kiln.core.placeholder((x.shape[0], length, x.shape[2]), "float64")
    y = build(ph)
    loss = ops.sum(y * y * ops.cos(y))
    return kiln.function([ph], [loss, kiln.core.grad(loss, [ph])[0]])(x)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("length", [11, 16])
def test_unknown_length_gradient_equals_static(name, length):
    x = rng.normal(size=(2, length, 3))
    loss_d, g_d = _loss_and_grad(CASES[name], x, None)
    loss_s, g_s = _loss_and_grad(CASES[name], x, length)
    np.testing.assert_allclose(loss_d, loss_s, rtol=1e-12)
    np.testing.assert_allclose(g_d, g_s, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ["valid_stride2", "same_dilation2", "avg_pool_same"])
def test_unknown_length_gradient_matches_finite_differences(name):
    x = rng.normal(size=(1, 9, 3))
    _, g = _loss_and_grad(CASES[name], x, None)
    f = kiln.function([ph := kiln.core.placeholder((1, None, 3), "float64")],
                      [ops.sum(CASES[name](ph) ** 2 * ops.cos(CASES[name](ph)))])
    eps = 1e-6
    fd = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        fd[i] = (f(x + d)[0] - f(x - d)[0]) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


def test_same_padding_with_stride_needs_a_static_length():
    ph = kiln.core.placeholder((2, None, 3), "float64")
    loss = ops.sum(ops.conv(ph, W, strides=2, padding="same"))
    with pytest.raises(ValueError, match=r"'same' padding with stride 2 needs a static "
                                         r"spatial size"):
        kiln.core.grad(loss, [ph])


def _model(steps):
    kiln.utils.set_random_seed(3)
    L = kiln.layers
    i = kiln.Input((steps, 3))
    h = L.Conv1D(4, 3, padding="causal", dilation_rate=2, activation="relu")(i)
    h = L.MaxPooling1D(2)(h)
    h = L.Conv1D(4, 3, strides=2, activation="tanh")(h)
    h = L.AveragePooling1D(2, padding="same", strides=1)(h)
    h = L.SeparableConv1D(3, 2)(h)
    o = L.Dense(1)(L.GlobalMaxPooling1D()(h))
    model = kiln.Model(i, o)
    model.compile(kiln.optimizers.SGD(0.05), "mse")
    return model


def test_fit_on_two_lengths_matches_static_models():
    dynamic = _model(None)
    for length in (20, 29):
        x = rng.normal(size=(8, length, 3)).astype("float32")
        y = rng.normal(size=(8, 1)).astype("float32")
        static = _model(length)
        static.set_weights(dynamic.get_weights())
        want = static.fit(x, y, batch_size=4, shuffle=False, epochs=2, verbose=0)
        got = dynamic.fit(x, y, batch_size=4, shuffle=False, epochs=2, verbose=0)
        np.testing.assert_allclose(got.history["loss"], want.history["loss"], rtol=1e-4)
        for a, b in zip(dynamic.get_weights(), static.get_weights()):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
