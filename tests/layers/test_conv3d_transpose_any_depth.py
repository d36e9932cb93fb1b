"""``Conv3DTranspose`` (and strided ``Conv3D``) on inputs of unknown depth (``Input((None, h, w,
c))``): one model for videos of any number of frames. Oracles: a NumPy scatter-add transposed
convolution cropped by Keras' output-length rule and TensorFlow's "same" offset, and one SGD
step of the same layers on a model of known depth."""

import numpy as np
import pytest

import kiln as keras
from kiln import layers


def _out_len(n, k_eff, s, padding, opad):
    """Keras' ``compute_conv_transpose_output_length``."""
    if opad is None:
        return n * s + (max(k_eff - s, 0) if padding == "valid" else 0)
    pad = k_eff // 2 if padding == "same" else 0
    return (n - 1) * s + k_eff - 2 * pad + opad


def _conv3d_transpose_ref(x, k, b, strides, padding, opad, dil):
    """Every input voxel adds ``kernel[i, j, m] @ x`` at ``position * stride + tap *
    dilation``; the full result is cropped where the forward convolution of the output (TF's
    "same" padding) would read the input."""
    n, dims = x.shape[0], x.shape[1:4]
    kd = k.shape[:3]
    eff = [(kk - 1) * d + 1 for kk, d in zip(kd, dil)]
    full = np.zeros((n,) + tuple((m - 1) * s + e for m, s, e in zip(dims, strides, eff))
                    + (k.shape[3],))
    for z, y, w in np.ndindex(*dims):
        for i, j, m in np.ndindex(*kd):
            full[:, z * strides[0] + i * dil[0], y * strides[1] + j * dil[1],
                 w * strides[2] + m * dil[2]] += x[:, z, y, w] @ k[i, j, m].T
    out = full
    for axis in range(3):
        size = _out_len(dims[axis], eff[axis], strides[axis], padding,
                        None if opad is None else opad[axis])
        total = max((dims[axis] - 1) * strides[axis] + eff[axis] - size, 0)
        before = total // 2 if padding == "same" else 0
        pad_after = max(before + size - out.shape[1 + axis], 0)
        widths = [(0, 0)] * 5
        widths[1 + axis] = (0, pad_after)
        out = np.take(np.pad(out, widths), range(before, before + size), axis=1 + axis)
    return out + b


CASES = [  # kernel, strides, padding, output_padding, dilation
    ((3, 2, 2), (2, 1, 2), "valid", None, (1, 1, 1)),
    ((3, 3, 3), (2, 2, 1), "same", None, (1, 1, 1)),
    ((2, 3, 2), (3, 1, 1), "same", None, (1, 1, 1)),
    ((4, 3, 3), (2, 1, 1), "same", (1, 0, 0), (1, 1, 1)),
    ((3, 3, 3), (3, 1, 1), "same", (2, 0, 0), (1, 1, 1)),
    ((3, 2, 2), (2, 1, 1), "valid", (1, 0, 0), (1, 1, 1)),
    ((2, 2, 2), (1, 1, 1), "valid", None, (2, 1, 1)),
    ((1, 2, 2), (2, 1, 1), "valid", None, (1, 1, 1)),
]


@pytest.mark.parametrize("kernel,strides,padding,opad,dil", CASES)
def test_unknown_depth_matches_numpy(kernel, strides, padding, opad, dil):
    rng = np.random.default_rng(0)
    inputs = keras.Input((None, 3, 4, 2))
    conv = layers.Conv3DTranspose(3, kernel, strides=strides, padding=padding,
                                  output_padding=opad, dilation_rate=dil,
                                  bias_initializer="glorot_uniform")
    outputs = conv(inputs)
    assert outputs.shape[1] is None and outputs.shape[-1] == 3
    model = keras.Model(inputs, outputs)
    for depth in (1, 4, 5):  # one model, videos of three lengths
        a = rng.normal(size=(2, depth, 3, 4, 2)).astype("float32")
        ref = _conv3d_transpose_ref(a.astype(np.float64), conv.kernel.numpy(),
                                    conv.bias.numpy(), strides, padding, opad, dil)
        got = model.predict(a, verbose=0)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _video_model(depth):
    inputs = keras.Input((depth, 4, 4, 2))
    x = layers.Conv3D(3, (3, 2, 2), strides=(2, 1, 1), activation="tanh")(inputs)
    x = layers.Conv3D(3, (3, 3, 3), strides=(2, 1, 1), padding="same", activation="tanh")(x)
    x = layers.Conv3DTranspose(2, (3, 3, 3), strides=(2, 1, 1), padding="same")(x)
    x = layers.Conv3DTranspose(1, (2, 1, 1), strides=(3, 1, 1), output_padding=(1, 0, 0))(x)
    return keras.Model(inputs, x)


def test_one_model_trains_on_two_depths_like_known_depth_models():
    """An SGD step of the unknown-depth model on videos of 7 and then 9 frames (3 and 4
    planes into the "same" strided Conv3D: both of its paddings) gives the weights and losses
    of the same steps taken by models built for those depths."""
    rng = np.random.default_rng(1)
    dynamic = _video_model(None)
    dynamic.compile(keras.optimizers.SGD(0.1), "mse")
    weights = dynamic.get_weights()
    for depth in (7, 9):
        a = rng.normal(size=(2, depth, 4, 4, 2)).astype("float32")
        y = rng.normal(size=dynamic.predict(a, verbose=0).shape).astype("float32")
        known = _video_model(depth)
        known.compile(keras.optimizers.SGD(0.1), "mse")
        known.set_weights(weights)
        dynamic.reset_metrics()  # train_on_batch reports the running mean, as Keras 3's
        loss_dyn = dynamic.train_on_batch(a, y)
        loss_known = known.train_on_batch(a, y)
        np.testing.assert_allclose(loss_dyn, loss_known, rtol=1e-5)
        for w_dyn, w_known in zip(dynamic.get_weights(), known.get_weights()):
            np.testing.assert_allclose(w_dyn, w_known, rtol=1e-5, atol=1e-6)
        assert any(not np.allclose(w, w0) for w, w0 in zip(dynamic.get_weights(), weights))
        weights = dynamic.get_weights()
