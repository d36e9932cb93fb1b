"""The random augmentation layers: in a training trace each one equals the NumPy formula of
Keras' docs applied with the numbers kiln's counter-based generator draws for its stream
(``uniform_bits(key, salt, n)``: the generator's own reference); outside training they are
the identity (RandomCrop: center crop and resize); called on arrays they augment."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prep_oracles import affine_loop, resize_loop

import kiln
from kiln import layers as L
from kiln.core.ops.random import uniform_bits
from kiln.layers.context import trace

KEY = np.array([11, 4], np.int64)


def images(b=4, h=5, w=6, c=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, size=(b, h, w, c)).astype("float32")


def train(layer, x, key=KEY):
    ph = kiln.placeholder((None,) + x.shape[1:], "float32")
    k = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=k):
        out = layer(ph)
    return kiln.function([ph, k], out)(x, key)


def draws(layer, b, count, key=KEY):
    """The layer's uniform numbers: ``count`` per image, as its ``_uniform`` lays them out."""
    return uniform_bits(key, layer.salt, b * count).reshape(b, count)


@pytest.mark.parametrize("mode", ["horizontal", "vertical", "horizontal_and_vertical"])
def test_random_flip(mode):
    x = images(b=8)
    layer = L.RandomFlip(mode, seed=3)
    u = draws(layer, 8, 1)[:, 0]
    expected = x.copy()
    for i in np.nonzero(u <= 0.5)[0]:
        if mode != "vertical":
            expected[i] = expected[i, :, ::-1]
        if mode != "horizontal":
            expected[i] = expected[i, ::-1]
    assert 0 < np.sum(u <= 0.5) < 8
    np.testing.assert_array_equal(train(layer, x), expected)


def _rotation_rows(deg, h, w):
    rad = np.deg2rad(deg)
    cx, cy = 0.5 * (w - 1), 0.5 * (h - 1)
    c, s = np.cos(rad), np.sin(rad)
    return np.stack([c, -s, cx - c * cx + s * cy, s, c, cy - s * cx - c * cy,
                     0 * c, 0 * c], axis=1)


@pytest.mark.parametrize("fill_mode", ["reflect", "constant"])
def test_random_rotation(fill_mode):
    x = images()
    layer = L.RandomRotation((-0.1, 0.2), fill_mode=fill_mode, fill_value=0.5, seed=5)
    deg = draws(layer, 4, 1)[:, 0] * 0.3 * 360.0 - 36.0
    expected = affine_loop(x.astype(np.float64), _rotation_rows(deg, 5, 6), "bilinear",
                           fill_mode, 0.5)
    np.testing.assert_allclose(train(layer, x), expected, rtol=1e-4, atol=1e-4)


def test_random_rotation_quarter_turn_is_rot90():
    x = images(h=6, w=6)
    got = train(L.RandomRotation((0.25, 0.25), interpolation="nearest"), x)
    np.testing.assert_array_equal(got, np.rot90(x, k=1, axes=(1, 2)))


def test_random_zoom():
    x = images()
    layer = L.RandomZoom((-0.3, 0.2), (0.1, 0.4), fill_mode="nearest", seed=6)
    u = draws(layer, 4, 2)
    zh, zw = 1 - 0.3 + 0.5 * u[:, 0], 1 + 0.1 + 0.3 * u[:, 1]
    rows = np.stack([zw, 0 * zw, 2.5 * (1 - zw), 0 * zw, zh, 2.0 * (1 - zh), 0 * zw, 0 * zw],
                    axis=1)
    expected = affine_loop(x.astype(np.float64), rows, "bilinear", "nearest", 0.0)
    np.testing.assert_allclose(train(layer, x), expected, rtol=1e-4, atol=1e-4)
    # without width_factor the aspect ratio is kept: the same factor on both axes
    keep = L.RandomZoom(0.3, seed=6)
    zh = 0.7 + 0.6 * draws(keep, 4, 2)[:, 0]
    rows = np.stack([zh, 0 * zh, 2.5 * (1 - zh), 0 * zh, zh, 2.0 * (1 - zh), 0 * zh, 0 * zh],
                    axis=1)
    np.testing.assert_allclose(train(keep, x), affine_loop(x.astype(np.float64), rows,
                                                            "bilinear", "reflect", 0.0),
                               rtol=1e-4, atol=1e-4)


def test_random_translation():
    x = images()
    layer = L.RandomTranslation((-0.2, 0.3), 0.25, fill_mode="wrap", seed=7)
    u = draws(layer, 4, 2)
    dy, dx = (-0.2 + 0.5 * u[:, 0]) * 5, (-0.25 + 0.5 * u[:, 1]) * 6
    rows = np.stack([1 + 0 * dx, 0 * dx, -dx, 0 * dx, 1 + 0 * dx, -dy, 0 * dx, 0 * dx], axis=1)
    expected = affine_loop(x.astype(np.float64), rows, "bilinear", "wrap", 0.0)
    np.testing.assert_allclose(train(layer, x), expected, rtol=1e-4, atol=1e-4)
    # a whole-pixel shift: one row down (0.2 * 5), content moves down, constant fill
    shift = train(L.RandomTranslation((0.2, 0.2), (0.0, 0.0), fill_mode="constant",
                                      interpolation="nearest"), x)
    np.testing.assert_array_equal(shift[:, 1:], x[:, :-1])
    np.testing.assert_array_equal(shift[:, 0], 0 * x[:, 0])


def test_random_contrast_and_brightness():
    x = images() * 255
    contrast = L.RandomContrast((0.2, 0.5), seed=8)
    f = 0.8 + 0.7 * draws(contrast, 4, 1)[:, 0]
    mean = x.mean(axis=(1, 2), keepdims=True)
    expected = np.clip((x - mean) * f[:, None, None, None] + mean, 0, 255)
    np.testing.assert_allclose(train(contrast, x), expected, rtol=1e-4, atol=1e-3)
    # a single number is the lower and the upper amount: [1 - f, 1 + f]
    assert L.RandomContrast(0.3).factor == (0.3, 0.3)
    bright = L.RandomBrightness(0.4, value_range=(0, 255), seed=9)
    d = (-0.4 + 0.8 * draws(bright, 4, 1)[:, 0]) * 255
    expected = np.clip(x + d[:, None, None, None], 0, 255)
    np.testing.assert_allclose(train(bright, x), expected, rtol=1e-4, atol=1e-3)


def test_random_crop():
    x = images(b=3, h=7, w=9)
    layer = L.RandomCrop(4, 5, seed=10)
    u = uniform_bits(KEY, layer.salt, 2)
    top, left = int(math.floor(u[0] * 4)), int(math.floor(u[1] * 5))
    np.testing.assert_array_equal(train(layer, x), x[:, top:top + 4, left:left + 5])
    # inference: the centered window with the target aspect ratio, resized
    ch, cw = min(7, int(9 * 4 / 5)), min(9, int(7 * 5 / 4))
    t, lft = (7 - ch) // 2, (9 - cw) // 2
    expected = resize_loop(x[:, t:t + ch, lft:lft + cw].astype(np.float64), 4, 5, "bilinear")
    np.testing.assert_allclose(layer(x, training=False), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", [
    lambda: L.RandomFlip(seed=1), lambda: L.RandomRotation(0.2, seed=1),
    lambda: L.RandomZoom(0.3, seed=1), lambda: L.RandomTranslation(0.2, 0.2, seed=1),
    lambda: L.RandomContrast(0.5, value_range=(0, 1), seed=1),
    lambda: L.RandomBrightness(0.3, value_range=(0, 1), seed=1)])
def test_augmentation_is_the_identity_outside_training_and_active_on_data(layer):
    # 16 images: RandomFlip leaves an image as it is with probability 1/4, so with 6 one
    # random key in 4096 (reached after tests/models/test_training_integration.py's seeding)
    # flipped none of them and the check below failed
    x = images(b=16)
    aug = layer()
    np.testing.assert_array_equal(aug(x, training=False), x)
    assert not np.allclose(aug(x), x)  # called on data: augments, as in Keras
    # in a model, predict is the identity
    inp = kiln.Input(x.shape[1:])
    model = kiln.Model(inp, L.GlobalAveragePooling2D()(aug(inp)))
    np.testing.assert_allclose(model.predict(x, verbose=0), x.mean(axis=(1, 2)), rtol=1e-6)


def test_single_image_and_seeded_streams():
    x = images(b=1)[0]
    a, b = L.RandomRotation(0.3, seed=42), L.RandomRotation(0.3, seed=42)
    assert a.salt == b.salt
    assert train(a, x[None]).shape == (1, 5, 6, 2)
    assert a(x).shape == x.shape
    kiln.utils.set_random_seed(3)
    first = L.RandomFlip().get_config()["seed"]
    kiln.utils.set_random_seed(3)
    assert L.RandomFlip().get_config()["seed"] == first


def test_augmentation_errors():
    with pytest.raises(ValueError, match="RandomRotation: factor values must lie in"):
        L.RandomRotation((0.1, 1.5))
    with pytest.raises(ValueError, match="RandomZoom: height_factor must lie in"):
        L.RandomZoom(-1.0)
    with pytest.raises(ValueError, match="RandomFlip: mode must be one of.*'diagonal'"):
        L.RandomFlip("diagonal")
    with pytest.raises(ValueError, match="RandomTranslation: fill_mode must be one of.*'mirror'"):
        L.RandomTranslation(0.1, 0.1, fill_mode="mirror")
    with pytest.raises(ValueError, match="RandomContrast: factor must lie in"):
        L.RandomContrast(1.5)
    with pytest.raises(ValueError, match="RandomBrightness: value_range must be a pair"):
        L.RandomBrightness(0.1, value_range=3)
