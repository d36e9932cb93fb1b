"""ContrastLimitedAdaptiveHistogramEqualization (deterministic: Keras live, a NumPy
transcription of the algorithm's closed-form cases) and RandomElasticTransform (its sampler
against kiln.ops.image.map_coordinates, its blur against a NumPy Gaussian filter, the random
layer's invariants, a training step with an unknown batch size)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.layers.preprocessing.elastic import _band

RNG = np.random.default_rng(11)
IMAGES = np.floor(RNG.random((3, 14, 19, 3)) * 256).astype("float32")
CLAHE = L.ContrastLimitedAdaptiveHistogramEqualization


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() in ("numpy", "jax"):
        pytest.importorskip("scipy")
        pytest.importorskip("jax")
    return keras


@pytest.mark.parametrize("kwargs", [
    {}, {"tile_grid_size": (3, 4)}, {"tile_grid_size": (2, 2), "clip_limit": 0.0},
    {"tile_grid_size": (4, 3), "clip_limit": 1.5}])
def test_clahe_matches_keras(kwargs, keras):
    want = keras.ops.convert_to_numpy(
        keras.layers.ContrastLimitedAdaptiveHistogramEqualization(**kwargs)(IMAGES))
    np.testing.assert_allclose(CLAHE(**kwargs)(IMAGES), want, atol=1e-3)


def test_clahe_value_range_matches_keras(keras):
    x = RNG.random((2, 16, 16, 1)).astype("float32")
    kw = {"value_range": (0.0, 1.0), "tile_grid_size": (2, 2)}
    want = keras.ops.convert_to_numpy(
        keras.layers.ContrastLimitedAdaptiveHistogramEqualization(**kw)(x))
    np.testing.assert_allclose(CLAHE(**kw)(x), want, atol=1e-5)


def test_clahe_closed_forms():
    # one tile, no clipping: plain histogram equalization (cdf - cdf_min) * 255 / (n - cdf_min)
    x = np.floor(RNG.random((1, 8, 8, 1)) * 256).astype("float32")
    vals = x.astype(int).ravel()
    cdf = np.cumsum(np.bincount(vals, minlength=256)).astype("float64")
    lut = (cdf - cdf.min()) * 255.0 / (64 - cdf.min())
    got = CLAHE(tile_grid_size=(1, 1), clip_limit=0.0)(x)
    np.testing.assert_allclose(got.ravel(), lut[vals], rtol=1e-5, atol=1e-3)
    # a constant image v: without clipping each histogram is one spike at v, so cdf_min =
    # cdf(0) = 0 and cdf(v) = n: every pixel maps to 255
    flat = np.full((16, 16, 3), 77.0, "float32")
    np.testing.assert_array_equal(CLAHE(clip_limit=0.0)(flat), 255.0)
    # clipped at L = 4 n / 256, the excess e = n - L spread evenly: cdf(v) - cdf_min =
    # v e / 256 + L over n - e / 256 (tiles of n = 2 x 2 pixels for the 8 x 8 grid)
    n = 4.0
    lim = 4.0 * n / 256.0
    e = n - lim
    want = (77 * e / 256 + lim) * 255.0 / (n - e / 256)
    np.testing.assert_allclose(CLAHE()(flat), want, rtol=1e-5)


def test_clahe_in_a_model_and_config(tmp_path):
    layer = CLAHE(clip_limit=2.0, tile_grid_size=(2, 3))
    cfg = json.loads(json.dumps(layer.get_config()))
    assert cfg["clip_limit"] == 2.0 and cfg["tile_grid_size"] == [2, 3]
    assert CLAHE.from_config(cfg).get_config() == layer.get_config()
    model = kiln.Sequential([kiln.Input((14, 19, 3)), layer])
    # deterministic: applied in inference too, as Keras does
    np.testing.assert_allclose(model.predict(IMAGES, verbose=0), layer(IMAGES), atol=1e-4)
    _round_trip((CLAHE, {"tile_grid_size": (2, 2)}, (2, 8, 8, 3), None, None, []), tmp_path)
    with pytest.raises(ValueError, match="tile_grid_size must be 2 positive ints"):
        CLAHE(tile_grid_size=(0, 2))
    with pytest.raises(ValueError, match="clip_limit must be a number"):
        CLAHE(clip_limit="4")


@pytest.mark.parametrize("mode", ["constant", "nearest", "wrap", "mirror", "reflect"])
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_elastic_sampler_matches_map_coordinates(mode, interpolation):
    layer = L.RandomElasticTransform(fill_mode=mode, interpolation=interpolation,
                                     fill_value=-3.0)
    x = RNG.standard_normal((2, 5, 6, 2)).astype("float32")
    ys = (RNG.random((2, 5, 6)) * 11 - 3).astype("float32")
    xs = (RNG.random((2, 5, 6)) * 13 - 3).astype("float32")
    ph = [kiln.placeholder((None,) + a.shape[1:], "float32") for a in (x, ys, xs)]
    got = kiln.function(ph, layer._sample(*ph))(x, ys, xs)
    order = 1 if interpolation == "bilinear" else 0
    for b in range(2):
        for ch in range(2):
            want = K.image.map_coordinates(x[b, ..., ch], np.stack([ys[b], xs[b]]), order,
                                           fill_mode=mode, fill_value=-3.0)
            np.testing.assert_allclose(got[b, ..., ch], want, rtol=1e-5, atol=1e-5)


def test_elastic_blur_band_is_a_gaussian_filter():
    sigma, radius, n = 1.3, 3, 9
    band = kiln.function([], _band(n, radius, K.constant(np.float32(sigma))))()
    taps = np.exp(-np.arange(-radius, radius + 1) ** 2 / (2 * sigma ** 2))
    taps /= taps.sum()
    v = RNG.standard_normal(n)
    want = np.convolve(v, taps, mode="same")  # zero padding, symmetric taps
    np.testing.assert_allclose(band @ v, want, rtol=1e-5, atol=1e-6)


def test_elastic_invariants():
    layer = L.RandomElasticTransform(seed=3)
    np.testing.assert_array_equal(layer(IMAGES, training=False), IMAGES)
    np.testing.assert_array_equal(L.RandomElasticTransform(factor=0.0)(IMAGES), IMAGES)
    np.testing.assert_array_equal(L.RandomElasticTransform(scale=0.0)(IMAGES), IMAGES)
    out = np.asarray(layer(IMAGES))
    assert out.shape == IMAGES.shape and out.min() >= 0 and out.max() <= 255
    assert np.abs(out - IMAGES).mean() > 1.0  # the images moved
    # a constant image stays constant under any warp that reflects at the border
    flat = np.full((2, 10, 12, 1), 42.0, "float32")
    np.testing.assert_allclose(L.RandomElasticTransform()(flat), flat, rtol=1e-6)
    # a tiny distortion moves pixels by a tiny amount: bilinear stays close to the input
    small = L.RandomElasticTransform(scale=(1e-4, 1e-4))(IMAGES)
    np.testing.assert_allclose(small, IMAGES, atol=0.5)
    kiln.utils.set_random_seed(4)
    a = np.asarray(L.RandomElasticTransform(scale=0.5)(IMAGES))
    kiln.utils.set_random_seed(4)
    np.testing.assert_array_equal(L.RandomElasticTransform(scale=0.5)(IMAGES), a)
    assert not np.array_equal(a[0], a[1])


def test_elastic_trains_with_an_unknown_batch_and_round_trips(tmp_path):
    model = kiln.Sequential([kiln.Input((8, 8, 1)), L.RandomElasticTransform(seed=1),
                             L.Flatten(), L.Dense(1)])
    model.compile("sgd", "mse")
    x = RNG.random((6, 8, 8, 1)).astype("float32") * 255
    hist = model.fit(x, np.zeros((6, 1), "float32"), batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(hist.history["loss"][0])
    layer = L.RandomElasticTransform(factor=(0.2, 0.8), scale=0.3, fill_mode="mirror",
                                     interpolation="nearest", value_range=(0, 1))
    cfg = json.loads(json.dumps(layer.get_config()))
    assert L.RandomElasticTransform.from_config(cfg).get_config() == layer.get_config()
    _round_trip((L.RandomElasticTransform, {"scale": 0.3}, (2, 8, 8, 3), None, None, []),
                tmp_path)


def test_elastic_bad_arguments():
    with pytest.raises(NotImplementedError, match="unknown `interpolation` 'bicubic'"):
        L.RandomElasticTransform(interpolation="bicubic")
    with pytest.raises(NotImplementedError, match="unknown `fill_mode` 'edge'"):
        L.RandomElasticTransform(fill_mode="edge")
    with pytest.raises(ValueError, match=r"`scale` argument .* Received: scale=2.0"):
        L.RandomElasticTransform(scale=2.0)


def test_inside_tf_data():
    tf = pytest.importorskip("tensorflow")
    layer = CLAHE(tile_grid_size=(2, 3))
    ds = tf.data.Dataset.from_tensor_slices(IMAGES).batch(2).map(lambda a: layer(a))
    got = np.concatenate([b.numpy() for b in ds])
    np.testing.assert_allclose(got, layer(IMAGES), atol=1e-4)
    elastic = L.RandomElasticTransform(value_range=(0, 255))
    ds = tf.data.Dataset.from_tensor_slices(IMAGES).batch(3).map(lambda a: elastic(a))
    out = next(iter(ds)).numpy()
    assert out.shape == IMAGES.shape and out.min() >= 0 and out.max() <= 255
    assert np.abs(out - IMAGES).mean() > 1.0
