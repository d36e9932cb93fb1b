"""``Conv3D`` on inputs of unknown depth (``Input((None, h, w, c))``: videos of any number of
frames, as keras.io's conv_lstm example feeds them). NumPy direct convolution is the oracle."""

import numpy as np
import pytest

import kiln as keras
from kiln import layers


def _conv3d_ref(x, k, b, padding, dil):
    kd, kh, kw = k.shape[:3]
    eff = [(n - 1) * d + 1 for n, d in zip((kd, kh, kw), dil)]
    if padding == "same":
        pads = [((e - 1) // 2, e - 1 - (e - 1) // 2) for e in eff]
        x = np.pad(x, [(0, 0)] + pads + [(0, 0)])
    n, d, h, w, _ = x.shape
    od, oh, ow = d - eff[0] + 1, h - eff[1] + 1, w - eff[2] + 1
    out = np.zeros((n, od, oh, ow, k.shape[-1]))
    for i in range(kd):
        for j in range(kh):
            for m in range(kw):
                patch = x[:, i * dil[0]:i * dil[0] + od, j * dil[1]:j * dil[1] + oh,
                          m * dil[2]:m * dil[2] + ow]
                out += patch @ k[i, j, m]
    return out + b


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("dilation", [(1, 1, 1), (2, 1, 1)])
def test_unknown_depth_matches_numpy(padding, dilation):
    rng = np.random.default_rng(0)
    inputs = keras.Input((None, 6, 5, 3))
    conv = layers.Conv3D(4, (3, 3, 2), padding=padding, dilation_rate=dilation,
                         bias_initializer="glorot_uniform")
    outputs = conv(inputs)
    assert outputs.shape[1] is None and outputs.shape[-1] == 4
    model = keras.Model(inputs, outputs)
    for depth in (7, 9):  # one model, videos of two lengths
        a = rng.normal(size=(2, depth, 6, 5, 3)).astype("float32")
        ref = _conv3d_ref(a.astype(np.float64), conv.kernel.numpy(), conv.bias.numpy(),
                          padding, dilation)
        np.testing.assert_allclose(model.predict(a, verbose=0), ref, rtol=1e-4, atol=1e-4)


def _tf_same_pads(n, k_eff, s):
    """TensorFlow's "same" padding of an axis: ``(before, after)``."""
    total = max((-(-n // s) - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


@pytest.mark.parametrize("kernel,strides", [((3, 3, 2), (2, 2, 1)), ((2, 1, 1), (3, 1, 1)),
                                            ((4, 2, 2), (2, 1, 2))])
def test_same_padding_with_a_depth_stride_matches_numpy(kernel, strides):
    """TF's "same" pads the depth by an amount that depends on the depth modulo the stride:
    one model for depths of every residue gives NumPy's result."""
    rng = np.random.default_rng(3)
    inputs = keras.Input((None, 6, 5, 3))
    conv = layers.Conv3D(2, kernel, strides=strides, padding="same",
                         bias_initializer="glorot_uniform")
    model = keras.Model(inputs, conv(inputs))
    for depth in (1, 4, 5, 6, 7):
        a = rng.normal(size=(2, depth, 6, 5, 3))
        pads = [_tf_same_pads(n, k, s) for n, k, s in zip(a.shape[1:4], kernel, strides)]
        ref = _conv3d_ref(np.pad(a, [(0, 0)] + pads + [(0, 0)]), conv.kernel.numpy(),
                          conv.bias.numpy(), "valid", (1, 1, 1))
        ref = ref[:, ::strides[0], ::strides[1], ::strides[2]]
        np.testing.assert_allclose(model.predict(a.astype("float32"), verbose=0), ref,
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strides", [(2, 1, 1), (3, 2, 1)])
def test_valid_depth_stride_of_unknown_depth_matches_numpy(strides):
    rng = np.random.default_rng(2)
    inputs = keras.Input((None, 6, 5, 3))
    conv = layers.Conv3D(2, (3, 2, 2), strides=strides, bias_initializer="glorot_uniform")
    model = keras.Model(inputs, conv(inputs))
    for depth in (7, 8):  # 7 - 3 + 1 = 5 and 6 valid planes, every s-th kept
        a = rng.normal(size=(2, depth, 6, 5, 3)).astype("float32")
        ref = _conv3d_ref(a.astype(np.float64), conv.kernel.numpy(), conv.bias.numpy(),
                          "valid", (1, 1, 1))[:, ::strides[0], ::strides[1], ::strides[2]]
        np.testing.assert_allclose(model.predict(a, verbose=0), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["max", "average"])
def test_pooling_of_unknown_depth_matches_numpy(kind):
    rng = np.random.default_rng(1)
    layer = (layers.MaxPooling3D if kind == "max" else layers.AveragePooling3D)((2, 2, 2))
    inputs = keras.Input((None, 4, 6, 3))
    model = keras.Model(inputs, layer(inputs))
    for depth in (6, 8):
        a = rng.normal(size=(2, depth, 4, 6, 3)).astype("float32")
        blocks = a.reshape(2, depth // 2, 2, 2, 2, 3, 2, 3)
        ref = (blocks.max(axis=(2, 4, 6)) if kind == "max" else blocks.mean(axis=(2, 4, 6)))
        np.testing.assert_allclose(model.predict(a, verbose=0), ref, rtol=1e-5, atol=1e-6)
