"""The colour augmentation layers (issue 44): Keras live as the oracle where the layer's
random draw can be pinned (a factor range of one value), TensorFlow's adjust_hue for
RandomHue (whose sign is random), closed forms, and the invariants of random layers: the
identity at inference, values in range, seed reproducibility, the standard layer checks and
``.keras`` round trips."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from layer_helpers import run_layer_test
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
from kiln import layers as L

RNG = np.random.default_rng(7)
IMAGES = (RNG.random((3, 6, 5, 3)) * 255).astype("float32")

CASES = [
    (L.RandomGrayscale, {"factor": 0.5, "seed": 1}),
    (L.RandomInvert, {"factor": 0.5, "seed": 1}),
    (L.RandomPosterization, {"factor": (2, 6), "seed": 1}),
    (L.Solarization, {"addition_factor": 0.2, "threshold_factor": (0.3, 0.6), "seed": 1}),
    (L.RandomColorDegeneration, {"factor": 0.5, "seed": 1}),
    (L.RandomSaturation, {"factor": (0.2, 0.8), "seed": 1}),
    (L.RandomHue, {"factor": 0.3, "seed": 1}),
    (L.RandomSharpness, {"factor": 0.7, "seed": 1}),
    (L.RandomColorJitter, {"brightness_factor": 0.2, "contrast_factor": 0.3,
                           "saturation_factor": (0.4, 0.6), "hue_factor": 0.1, "seed": 1}),
    (L.AutoContrast, {}),
]
IDS = [c[0].__name__ for c in CASES]


def test_auto_contrast_standard_layer_checks():
    run_layer_test(L.AutoContrast, {}, (2, 4, 5, 3), (2, 4, 5, 3), 0,
                   input_data=(RNG.random((2, 4, 5, 3)) * 255).astype("float32"),
                   rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_config_json_round_trip_and_symbolic_shape(case):
    cls, kwargs = case
    layer = cls(**kwargs)
    config = json.loads(json.dumps(layer.get_config()))
    again = cls.from_config(config)
    assert again.get_config() == layer.get_config()
    assert again(kiln.Input((6, 5, 3))).shape == (None, 6, 5, 3)
    assert again.compute_output_shape((None, 6, 5, 3)) == (None, 6, 5, 3)
    kiln.utils.set_random_seed(5)
    a = np.asarray(layer(IMAGES, training=True))
    kiln.utils.set_random_seed(5)
    np.testing.assert_array_equal(again(IMAGES, training=True), a)  # the same stream


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_keras_file_round_trip(case, tmp_path):
    cls, kwargs = case
    _round_trip((cls, kwargs, (2, 4, 5, 3), None, None, []), tmp_path)


@pytest.mark.parametrize("case", CASES[:-1], ids=IDS[:-1])
def test_random_layers_are_the_identity_at_inference_and_reproducible(case):
    cls, kwargs = case
    layer = cls(**kwargs)
    np.testing.assert_array_equal(layer(IMAGES, training=False), IMAGES)
    model = kiln.Sequential([kiln.Input((6, 5, 3)), layer])
    np.testing.assert_array_equal(model.predict(IMAGES, verbose=0), IMAGES)
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(3)
        runs.append(np.asarray(cls(**kwargs)(IMAGES, training=True)))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], IMAGES)
    if cls not in (L.RandomSaturation, L.RandomColorJitter):  # Keras clips S, not RGB
        assert runs[0].min() >= -1e-3 and runs[0].max() <= 255 + 1e-3


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


PINNED = [
    ("AutoContrast", {}),
    ("AutoContrast", {"value_range": (0, 1)}),
    ("RandomInvert", {"factor": [1.0, 1.0]}),
    ("RandomPosterization", {"factor": [3, 3]}),
    ("RandomPosterization", {"factor": [5, 5], "value_range": (0, 1)}),
    ("RandomColorDegeneration", {"factor": [0.3, 0.3]}),
    ("RandomSaturation", {"factor": [0.3, 0.3]}),
    ("RandomSaturation", {"factor": [0.7, 0.7], "value_range": (0, 1)}),
    ("RandomSharpness", {"factor": [0.8, 0.8]}),
    ("RandomGrayscale", {"factor": 1.0}),
]


@pytest.mark.parametrize("name,kwargs", PINNED, ids=[f"{n}-{i}" for i, (n, _) in
                                                      enumerate(PINNED)])
def test_matches_keras_with_a_pinned_draw(name, kwargs, keras):
    x = IMAGES / 255.0 if kwargs.get("value_range") == (0, 1) else IMAGES
    x = x.astype("float32")
    want = np.asarray(getattr(keras.layers, name)(**kwargs)(x, training=True))
    got = getattr(L, name)(**kwargs)(x, training=True)
    scale = 1.0 if kwargs.get("value_range") == (0, 1) else 255.0
    np.testing.assert_allclose(got, want, atol=2e-6 * scale)


def test_random_hue_matches_tensorflow_adjust_hue_of_either_sign():
    tf = pytest.importorskip("tensorflow")
    x = IMAGES / 255.0
    got = np.asarray(L.RandomHue(factor=[0.4, 0.4], value_range=(0, 1))(x, training=True))
    plus = tf.image.adjust_hue(x, 0.2).numpy()
    minus = tf.image.adjust_hue(x, -0.2).numpy()
    err = np.minimum(np.abs(got - plus).max(axis=(1, 2, 3)),
                     np.abs(got - minus).max(axis=(1, 2, 3)))
    assert err.max() < 1e-5


def test_solarization_closed_forms():
    # no addition and a threshold of 0: every pixel inverted
    y = L.Solarization(addition_factor=[0, 0], threshold_factor=[0, 0])(IMAGES, training=True)
    np.testing.assert_allclose(y, 255.0 - IMAGES, rtol=1e-6)
    # threshold above every pixel: the pixels plus the addition, clipped
    x = IMAGES / 2
    y = L.Solarization(threshold_factor=[1.0, 1.0], addition_factor=0.0)(x, training=True)
    assert np.all((np.asarray(y) == x) | (np.asarray(y) == 255.0 - x))


def test_saturation_zero_is_gray_and_half_is_unchanged():
    gray = np.asarray(L.RandomSaturation([0.0, 0.0])(IMAGES, training=True))
    np.testing.assert_allclose(gray, np.repeat(IMAGES.max(-1, keepdims=True), 3, -1),
                               rtol=1e-5)
    same = L.RandomSaturation([0.5, 0.5])(IMAGES, training=True)
    np.testing.assert_allclose(same, IMAGES, rtol=1e-4, atol=1e-3)


def test_color_jitter_with_no_factor_is_the_identity():
    np.testing.assert_allclose(L.RandomColorJitter()(IMAGES, training=True), IMAGES)


@pytest.mark.parametrize("make,match", [
    (lambda: L.RandomGrayscale(1.5), "between 0 and 1"),
    (lambda: L.RandomHue(2.0), r"range \[0.0, 1.0\]"),
    (lambda: L.RandomPosterization(9), r"range \[1.0, 8.0\]"),
    (lambda: L.Solarization(addition_factor=1.5), "addition_factor"),
    (lambda: L.RandomSaturation(0.3)(np.zeros((1, 4, 4, 2), "float32"), training=True),
     "3 channels"),
])
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()
