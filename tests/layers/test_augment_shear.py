"""RandomShear (issue 44): Keras live with pinned shear factors (its sign is random, so each
image is compared with Keras' output of either sign), a shear of 0 is the identity, the
random-layer invariants and ``.keras`` round trips."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from test_more_layers_saving import test_keras_file_round_trip as _round_trip

import kiln
from kiln import layers as L

RNG = np.random.default_rng(10)
X = (RNG.random((4, 8, 7, 3)) * 255).astype("float32")


@pytest.fixture(scope="module")
def keras():
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    return pytest.importorskip("keras")


@pytest.mark.parametrize("kwargs", [
    {"x_factor": (0.3, 0.3)},
    {"y_factor": (0.2, 0.2), "fill_mode": "constant", "fill_value": 5.0},
    {"x_factor": (0.1, 0.1), "y_factor": (0.25, 0.25), "fill_mode": "wrap"},
])
def test_matches_keras_with_either_sign(kwargs, keras):
    if kwargs.get("fill_mode") == "wrap" and keras.backend.backend() != "numpy":
        pytest.skip("Keras' TensorFlow backend wraps otherwise than its NumPy backend, which "
                    "kiln follows (run with KERAS_BACKEND=numpy)")
    got = np.asarray(L.RandomShear(**kwargs)(X, training=True))
    plus_minus = [np.asarray(keras.layers.RandomShear(seed=s, **kwargs)(X, training=True))
                  for s in range(8)]
    for i in range(len(X)):
        assert min(np.abs(got[i] - o[i]).max() for o in plus_minus) < 1e-3


def test_zero_shear_is_the_identity_and_inference_too(tmp_path):
    np.testing.assert_allclose(L.RandomShear()(X, training=True), X, atol=1e-4)
    layer = L.RandomShear(0.2, 0.1, seed=3)
    np.testing.assert_array_equal(layer(X, training=False), X)
    again = L.RandomShear.from_config(json.loads(json.dumps(layer.get_config())))
    assert again.get_config() == layer.get_config()
    _round_trip((L.RandomShear, {"x_factor": 0.2, "seed": 3}, (2, 8, 7, 3), None, None, []),
                tmp_path)
    runs = []
    for _ in range(2):
        kiln.utils.set_random_seed(2)
        runs.append(np.asarray(L.RandomShear(0.3, 0.3)(X)))
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.allclose(runs[0], X)


@pytest.mark.parametrize("kwargs", [{"x_factor": -0.5}, {"y_factor": [0.1, -1.2]},
                                    {"fill_mode": "mirror"}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        L.RandomShear(**kwargs)


def _detections():
    rng = np.random.default_rng(1)
    return {"images": X[:2], "bounding_boxes": {
        "boxes": rng.random((2, 5, 4)).astype("float32"),
        "labels": rng.integers(0, 3, (2, 5)).astype("float32")}}


@pytest.mark.parametrize("n", [3, 5, 7])
def test_max_num_bounding_boxes_matches_keras(n, keras):
    data = _detections()
    want = keras.layers.MaxNumBoundingBoxes(n, bounding_box_format="xyxy")(data)
    got = L.MaxNumBoundingBoxes(n, bounding_box_format="xyxy")(data)
    for k in ("boxes", "labels"):
        np.testing.assert_array_equal(got["bounding_boxes"][k],
                                      np.asarray(want["bounding_boxes"][k]))
    np.testing.assert_array_equal(got["images"], data["images"])


def test_max_num_bounding_boxes_pads_with_fill_value_and_passes_images():
    got = L.MaxNumBoundingBoxes(7, fill_value=-2)(_detections())["bounding_boxes"]
    assert got["boxes"].shape == (2, 7, 4) and np.all(got["boxes"][:, 5:] == -2)
    assert got["labels"].shape == (2, 7) and np.all(got["labels"][:, 5:] == -2)
    layer = L.MaxNumBoundingBoxes(4)
    np.testing.assert_array_equal(layer(X), X)
    t = kiln.Input((8, 7, 3))
    assert layer(t) is t
    assert L.MaxNumBoundingBoxes.from_config(layer.get_config()).get_config() == \
        layer.get_config()
    with pytest.raises(KeyError, match="unsupported keys"):
        layer({"images": X, "bounding_boxes": {"boxes": np.zeros((1, 2, 4)), "scores": 1}})
    with pytest.raises(ValueError, match="max_number"):
        L.MaxNumBoundingBoxes(0)


def test_perspective_rows_match_keras_homography_and_warp(keras):
    for needed in ("scipy", "jax"):  # Keras' NumPy backend imports both
        pytest.importorskip(needed, reason="Keras' NumPy backend imports scipy and jax")
    import keras.src.backend as kb

    saved = kb.__dict__.get("numpy")
    try:  # importing it rebinds keras.src.backend.numpy (the active backend's numpy module)
        from keras.src.backend.numpy.image import compute_homography_matrix
    finally:
        if saved is not None:
            kb.numpy = saved

    import kiln.ops as K
    from kiln.layers.augment_geometric import perspective_rows

    h, w = 9, 8
    rng = np.random.default_rng(4)
    start = np.array([[0, 0], [w - 1, 0], [0, h - 1], [w - 1, h - 1]], "float64")[None]
    start = start.repeat(3, 0)
    end = start + start * rng.uniform(-0.3, 0.3, (3, 4, 2))
    rows = perspective_rows([K.constant(end[:, i, 0:1]) for i in range(4)],
                            [K.constant(end[:, i, 1:2]) for i in range(4)], w, h)
    got = np.asarray(kiln.function([], [rows])()[0])
    np.testing.assert_allclose(got, compute_homography_matrix(start, end), rtol=1e-6,
                               atol=1e-6)
    img = X[:3, :h, :w]
    want = np.asarray(keras.ops.image.perspective_transform(img, start.astype("float32"),
                                                            end.astype("float32")))
    warped = K.affine_transform(img, got.astype("float32"), "bilinear", "constant", 0.0)
    np.testing.assert_allclose(warped, want, atol=1e-3)


def test_random_perspective_invariants(tmp_path):
    np.testing.assert_allclose(L.RandomPerspective(scale=0.0)(X, training=True), X, atol=1e-3)
    np.testing.assert_array_equal(L.RandomPerspective(factor=(0, 0))(X, training=True), X)
    layer = L.RandomPerspective(scale=0.5, seed=3, fill_value=-1.0)
    y = np.asarray(layer(X, training=True))
    assert not np.allclose(y, X) and y.min() >= -1.0 and y.max() <= 255
    np.testing.assert_array_equal(layer(X, training=False), X)
    again = L.RandomPerspective.from_config(json.loads(json.dumps(layer.get_config())))
    assert again.get_config() == layer.get_config()
    _round_trip((L.RandomPerspective, {"scale": 0.3, "seed": 1}, (2, 8, 7, 3), None, None, []),
                tmp_path)
    with pytest.raises(ValueError, match="scale"):
        L.RandomPerspective(scale=2.0)
