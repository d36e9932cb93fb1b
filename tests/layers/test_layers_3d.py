"""The 3-D layers and adaptive pooling (issue 44): Keras live as the oracle (weights copied
over), the standard layer checks, ``.keras`` round trips, and float64 finite differences for
the composed 3-D convolutions."""

from __future__ import annotations

import os

import numpy as np
import pytest
from fd_oracle import numeric_grad
from layer_helpers import run_layer_test
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
import kiln.ops as K
from kiln import layers as L

RNG = np.random.default_rng(44)

# (class, kwargs, input shape with batch, expected output shape, params, weight shapes)
CASES = [
    (L.Conv3D, {"filters": 3, "kernel_size": (2, 3, 2), "strides": (2, 1, 2),
                "padding": "same"}, (2, 5, 6, 5, 4), (2, 3, 6, 3, 3), 2 * 3 * 2 * 4 * 3 + 3,
     [(2, 3, 2, 4, 3), (3,)]),
    (L.Conv3D, {"filters": 4, "kernel_size": 3, "groups": 2, "dilation_rate": (2, 1, 1)},
     (2, 6, 5, 5, 4), (2, 2, 3, 3, 4), 27 * 2 * 4 + 4, [(3, 3, 3, 2, 4), (4,)]),
    (L.Conv3DTranspose, {"filters": 3, "kernel_size": (3, 2, 3), "strides": (2, 2, 1),
                         "padding": "same"}, (2, 3, 4, 3, 2), (2, 6, 8, 3, 3),
     18 * 3 * 2 + 3, [(3, 2, 3, 3, 2), (3,)]),
    (L.Conv3DTranspose, {"filters": 2, "kernel_size": 3, "strides": 2, "padding": "same",
                         "output_padding": 1, "use_bias": False}, (1, 3, 3, 3, 2),
     (1, 6, 6, 6, 2), 27 * 4, [(3, 3, 3, 2, 2)]),
    (L.MaxPooling3D, {"pool_size": (2, 3, 2), "strides": (1, 2, 2), "padding": "same"},
     (2, 5, 6, 5, 3), (2, 5, 3, 3, 3), 0, []),
    (L.AveragePooling3D, {"pool_size": 2, "padding": "same"}, (2, 5, 4, 3, 2),
     (2, 3, 2, 2, 2), 0, []),
    (L.AveragePooling3D, {"pool_size": (3, 2, 2), "strides": (2, 1, 2)}, (2, 7, 4, 4, 2),
     (2, 3, 3, 2, 2), 0, []),
    (L.GlobalAveragePooling3D, {}, (2, 3, 4, 2, 3), (2, 3), 0, []),
    (L.GlobalMaxPooling3D, {"keepdims": True}, (2, 3, 4, 2, 3), (2, 1, 1, 1, 3), 0, []),
    (L.AdaptiveAveragePooling1D, {"output_size": 3}, (2, 7, 3), (2, 3, 3), 0, []),
    (L.AdaptiveMaxPooling1D, {"output_size": 4}, (2, 10, 2), (2, 4, 2), 0, []),
    (L.AdaptiveAveragePooling2D, {"output_size": (2, 3)}, (2, 5, 7, 2), (2, 2, 3, 2), 0, []),
    (L.AdaptiveMaxPooling2D, {"output_size": 3}, (2, 7, 6, 2), (2, 3, 3, 2), 0, []),
    (L.AdaptiveAveragePooling3D, {"output_size": (2, 2, 3)}, (2, 5, 4, 7, 2),
     (2, 2, 2, 3, 2), 0, []),
    (L.AdaptiveMaxPooling3D, {"output_size": 2}, (2, 5, 4, 3, 2), (2, 2, 2, 2, 2), 0, []),
    (L.ZeroPadding3D, {"padding": ((1, 0), (2, 1), 1)}, (2, 2, 3, 2, 2), (2, 3, 6, 4, 2), 0,
     []),
    (L.Cropping3D, {"cropping": ((1, 0), (1, 1), (0, 2))}, (2, 5, 5, 5, 1), (2, 4, 3, 3, 1),
     0, []),
    (L.UpSampling3D, {"size": (2, 1, 3)}, (2, 2, 3, 2, 2), (2, 4, 3, 6, 2), 0, []),
    (L.SpatialDropout3D, {"rate": 0.3, "seed": 2}, (2, 3, 3, 3, 4), (2, 3, 3, 3, 4), 0, []),
]
IDS = [f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_standard_layer_checks(case):
    cls, kwargs, in_shape, out_shape, params, _ = case
    run_layer_test(cls, kwargs, in_shape, out_shape, params)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_keras_file_round_trip(case, tmp_path):
    _round_trip(case, tmp_path)


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


@pytest.mark.parametrize("case", [c for c in CASES if c[0] is not L.SpatialDropout3D],
                         ids=[i for i, c in zip(IDS, CASES) if c[0] is not L.SpatialDropout3D])
def test_matches_keras(case, keras):
    cls, kwargs, in_shape, *_ = case
    x = RNG.normal(size=in_shape).astype("float32")
    theirs = getattr(keras.layers, cls.__name__)(**kwargs)
    want = np.asarray(theirs(x))
    ours = cls(**kwargs)
    ours(x)
    ours.set_weights([np.asarray(w.numpy()) for w in theirs.weights])
    np.testing.assert_allclose(ours(x), want, rtol=1e-5, atol=1e-5)


def np_conv3d(x, k, strides, dil):
    """Direct "valid" 3-D convolution, the definition (float64)."""
    kd, kh, kw = k.shape[:3]
    eff = [(n - 1) * d + 1 for n, d in zip((kd, kh, kw), dil)]
    out = [(x.shape[1 + i] - eff[i]) // strides[i] + 1 for i in range(3)]
    y = np.zeros((x.shape[0], *out, k.shape[-1]))
    for a in range(kd):
        for b in range(kh):
            for c in range(kw):
                o = [a * dil[0], b * dil[1], c * dil[2]]
                patch = x[:, o[0]:o[0] + (out[0] - 1) * strides[0] + 1:strides[0],
                          o[1]:o[1] + (out[1] - 1) * strides[1] + 1:strides[1],
                          o[2]:o[2] + (out[2] - 1) * strides[2] + 1:strides[2]]
                y += patch @ k[a, b, c]
    return y


def test_conv3d_matches_the_definition_in_float64():
    x = RNG.normal(size=(2, 6, 5, 7, 3))
    layer = L.Conv3D(4, (3, 2, 3), strides=(2, 1, 2), use_bias=False, dtype="float64")
    layer(x)
    np.testing.assert_allclose(layer(x), np_conv3d(x, layer.kernel.numpy(), (2, 1, 2),
                                                   (1, 1, 1)), rtol=1e-12, atol=1e-12)


def test_conv3d_transpose_is_the_adjoint_of_conv3d():
    """<conv3d(u), v> == <u, conv3d_transpose(v)> with the same kernel (valid, strided)."""
    k = RNG.normal(size=(3, 2, 2, 3, 2))  # conv: 3 -> 2 channels; transpose: 2 -> 3
    u = RNG.normal(size=(1, 7, 5, 6, 3))
    conv = L.Conv3D(2, (3, 2, 2), strides=(2, 1, 2), use_bias=False, dtype="float64")
    conv(u)
    conv.set_weights([k])
    cu = np.asarray(conv(u))
    v = RNG.normal(size=cu.shape)
    tr = L.Conv3DTranspose(3, (3, 2, 2), strides=(2, 1, 2), use_bias=False, dtype="float64")
    tr(v)
    tr.set_weights([k])
    tv = np.asarray(tr(v))
    assert tv.shape == u.shape
    np.testing.assert_allclose(np.sum(cu * v), np.sum(u * tv), rtol=1e-10)


@pytest.mark.parametrize("cls,kwargs", [
    (L.Conv3D, {"filters": 2, "kernel_size": 2, "strides": (2, 1, 1), "padding": "same"}),
    (L.Conv3D, {"filters": 2, "kernel_size": 2, "groups": 2}),
    (L.Conv3DTranspose, {"filters": 2, "kernel_size": (2, 2, 1), "strides": (2, 1, 1)}),
    (L.AveragePooling3D, {"pool_size": 2, "padding": "same"}),
    (L.MaxPooling3D, {"pool_size": 2}),
    (L.AdaptiveAveragePooling3D, {"output_size": 2}),
])
def test_gradients_match_finite_differences(cls, kwargs):
    x = RNG.normal(size=(1, 3, 3, 3, 2))
    layer = cls(dtype="float64", **kwargs)
    layer(x)
    xp = kiln.placeholder(x.shape, "float64")
    ct = RNG.normal(size=layer.compute_output_shape(x.shape))
    loss = K.sum(layer(xp) * K.constant(ct))
    targets = [xp] + list(layer.weights)
    f = kiln.function([xp], [loss] + kiln.grad(loss, targets))
    got = f(x)[1:]
    np.testing.assert_allclose(got[0], numeric_grad(lambda: float(f(x)[0]), x), rtol=1e-6,
                               atol=1e-8)
    for w, g in zip(layer.weights, got[1:]):
        np.testing.assert_allclose(g, numeric_grad(lambda: float(f(x)[0]), w.value),
                                   rtol=1e-6, atol=1e-8)


def test_spatial_dropout3d_drops_whole_channels():
    layer = L.SpatialDropout3D(0.5, seed=1)
    x = np.ones((4, 2, 3, 2, 16), "float32")
    y = np.asarray(layer(x, training=True))
    per_channel = y.reshape(4, -1, 16)
    assert np.all(per_channel.min(axis=1) == per_channel.max(axis=1))
    assert set(np.unique(y)) <= {0.0, 2.0}
    np.testing.assert_array_equal(layer(x, training=False), x)


@pytest.mark.parametrize("make,match", [
    (lambda: L.MaxPooling3D()(kiln.Input((4, 4, 1))), "expected ndim=5"),
    (lambda: L.AdaptiveAveragePooling2D((1, 2, 3)), "output_size"),
    (lambda: L.ZeroPadding3D((1, 2)), "ZeroPadding3D"),
    (lambda: L.Conv3DTranspose(2, 3, strides=2, output_padding=2), "smaller than the strides"),
    (lambda: L.Conv3D(2, 3, data_format="channels_middle"), "channels_last"),
])
def test_bad_input_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_keras_positional_arguments():
    """Keras 3.15's argument order: Conv3DTranspose(filters, kernel_size, strides, padding,
    data_format, output_padding, ...); SpatialDropout3D(rate, data_format, seed, name, dtype);
    AveragePooling3D's pool_size is required, MaxPooling3D's defaults to 2 per axis."""
    tr = L.Conv3DTranspose(2, 3, 2, "valid", None, 1)
    assert tr.output_padding == (1, 1, 1)
    # (n - 1) * stride + k - 2 * 0 + output_padding = 2 * 2 + 3 + 1, against 3 * 2 + 1 without
    assert tr(kiln.Input((3, 3, 3, 1))).shape == (None, 8, 8, 8, 2)
    conv = L.Conv3D(2, 3)
    assert conv.strides == (1, 1, 1) and conv.dilation_rate == (1, 1, 1)
    drop = L.SpatialDropout3D(0.25, None, 3, "drop", "float64")
    assert (drop.name, drop.dtype, drop.seed) == ("drop", "float64", 3)
    assert L.MaxPooling3D(name="mp").pool_size == (2, 2, 2)
    with pytest.raises(TypeError, match="pool_size"):
        L.AveragePooling3D()
