"""Resizing, CenterCrop and Rescaling against NumPy oracles written from Keras' docs (crop or
pad to the aspect ratio, then a half-pixel-center resize), and their argument errors."""

from __future__ import annotations

import numpy as np
import pytest
from prep_oracles import resize_loop

import kiln
from kiln import layers as L


def images(*shape, seed=0, dtype="float32"):
    return np.random.default_rng(seed).uniform(0, 10, size=shape).astype(dtype)


def crop_box(h, w, th, tw):
    """Keras' largest centered crop with the target aspect ratio (from smart_resize's docs)."""
    ch = max(min(h, int(w * th / tw)), 1)
    cw = max(min(w, int(h * tw / th)), 1)
    return (h - ch) // 2, (w - cw) // 2, ch, cw


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [(3, 5), (8, 4), (6, 7)])
def test_resizing_is_the_half_pixel_resize(interpolation, size):
    x = images(2, 6, 7, 3)
    got = L.Resizing(*size, interpolation=interpolation)(x)
    np.testing.assert_allclose(got, resize_loop(x.astype(np.float64), *size, interpolation),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src,dst", [((6, 9), (4, 4)), ((9, 6), (3, 5)), ((5, 5), (2, 6))])
def test_resizing_crop_to_aspect_ratio(src, dst):
    x = images(2, *src, 2)
    top, left, ch, cw = crop_box(*src, *dst)
    expected = resize_loop(x[:, top:top + ch, left:left + cw].astype(np.float64), *dst,
                           "bilinear")
    got = L.Resizing(*dst, crop_to_aspect_ratio=True)(x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_resizing_pad_to_aspect_ratio_pads_both_sides_with_fill_value():
    x = images(1, 4, 8, 1)
    # target 8 x 8 -> pad 2 rows above and below with 5.0, then the image is already 8 x 8
    got = L.Resizing(8, 8, pad_to_aspect_ratio=True, fill_value=5.0)(x)
    expected = np.full((1, 8, 8, 1), 5.0, "float32")
    expected[:, 2:6] = x
    np.testing.assert_array_equal(got, expected)


def test_resizing_single_image_and_integer_pixels():
    x = images(5, 4, 3, dtype="float32").round().astype("uint8")
    got = L.Resizing(10, 8)(x)
    assert got.shape == (10, 8, 3) and got.dtype == np.float32
    np.testing.assert_allclose(got, resize_loop(x[None].astype(np.float64), 10, 8,
                                                "bilinear")[0], rtol=1e-5, atol=1e-5)


def test_resizing_in_a_model_is_differentiable():
    """A Resizing between two Dense-like layers trains: the gradient w.r.t. the first
    layer's kernel equals the closed form through resize^T."""
    inp = kiln.Input((2, 2, 1))
    mid = L.Conv2D(1, 1, use_bias=False, kernel_initializer="ones")(inp)
    out = L.Flatten()(L.Resizing(4, 4)(mid))
    model = kiln.Model(inp, out)
    x = images(3, 2, 2, 1)
    model.compile(kiln.optimizers.SGD(0.1), "mse")
    target = np.zeros((3, 16), "float32")
    model.fit(x, target, epochs=1, batch_size=3, verbose=0)
    # d mean((k * R x)^2) / dk = mean(2 k (R x)^2 / ...): with k = 1 the step is analytic
    rx = resize_loop(x.astype(np.float64), 4, 4, "bilinear").reshape(3, 16)
    grad = np.mean(2 * rx * rx)
    np.testing.assert_allclose(model.get_weights()[0].reshape(()), 1 - 0.1 * grad, rtol=1e-5)


def test_center_crop_crops_and_falls_back_to_resize():
    x = images(2, 7, 9, 3)
    np.testing.assert_array_equal(L.CenterCrop(4, 5)(x), x[:, 1:5, 2:7])
    # smaller than the target: crop to the aspect ratio, then resize (bilinear)
    top, left, ch, cw = crop_box(7, 9, 10, 5)
    expected = resize_loop(x[:, top:top + ch, left:left + cw].astype(np.float64), 10, 5,
                           "bilinear")
    np.testing.assert_allclose(L.CenterCrop(10, 5)(x), expected, rtol=1e-5, atol=1e-5)


def test_rescaling_scales_and_offsets_per_channel():
    x = images(2, 3, 3, dtype="float32").round().astype("uint8")
    np.testing.assert_allclose(L.Rescaling(1 / 127.5, offset=-1)(x), x / 127.5 - 1, rtol=1e-6)
    scale = np.array([1.0, 2.0, 3.0])
    got = L.Rescaling(scale, offset=[0.5, 0.0, -1.0])(x)
    np.testing.assert_allclose(got, x * scale + np.array([0.5, 0.0, -1.0]), rtol=1e-6)
    again = L.Rescaling.from_config(L.Rescaling(scale, 0.5).get_config())
    np.testing.assert_allclose(again(x), x * scale + 0.5, rtol=1e-6)
    keras_cfg = {"scale": {"class_name": "__numpy__",
                           "config": {"value": [2.0, 4.0, 6.0], "dtype": "float32"}},
                 "offset": 0.0}
    np.testing.assert_allclose(L.Rescaling.from_config(keras_cfg)(x), x * [2.0, 4.0, 6.0])


def test_image_layer_errors():
    with pytest.raises(ValueError, match="Resizing: interpolation must be one of.*'area'"):
        L.Resizing(4, 4, interpolation="gaussian")
    with pytest.raises(ValueError, match="Resizing: only one of crop_to_aspect_ratio"):
        L.Resizing(4, 4, crop_to_aspect_ratio=True, pad_to_aspect_ratio=True)
    with pytest.raises(ValueError, match="CenterCrop: height must be a positive int.*0"):
        L.CenterCrop(0, 4)
    with pytest.raises(ValueError, match="channels_first' is not supported"):
        L.Resizing(4, 4, data_format="channels_first")
    with pytest.raises(ValueError, match=r"expects images of rank 4.*\(None, 5\)"):
        L.Resizing(4, 4, name="rs")(kiln.placeholder((None, 5)))
    with pytest.raises(TypeError, match="Rescaling: scale must be a number"):
        L.Rescaling("big")
