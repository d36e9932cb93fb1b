"""Issue 44: perspective_transform against Keras 3 (eager and compiled graph), elastic
transform's properties (its random field is kiln's), gradients."""

from __future__ import annotations

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops

import kiln.ops as K

rng = np.random.default_rng(19)
IMG = rng.uniform(size=(2, 8, 9, 3)).astype("float32")
START = np.array([[0, 0], [8, 0], [0, 7], [8, 7]], "float32")
END = np.array([[1, 0.5], [7, 1], [0.5, 6], [8, 7.5]], "float32")


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_perspective_matches_keras(interpolation):
    ko = keras_ops()
    check_keras(lambda x, s, e: K.image.perspective_transform(x, s, e, interpolation),
                lambda x, s, e: ko.image.perspective_transform(x, s, e, interpolation),
                IMG, START, END, rtol=1e-4, atol=1e-5)
    batched = (np.stack([START, START + 0.5]), np.stack([END, END[::-1]]))
    check_keras(lambda x, s, e: K.image.perspective_transform(x, s, e, interpolation,
                                                              fill_value=0.5),
                lambda x, s, e: ko.image.perspective_transform(x, s, e, interpolation,
                                                               fill_value=0.5),
                IMG, *batched, rtol=1e-4, atol=1e-5)
    nchw = IMG.transpose(0, 3, 1, 2).copy()
    check_keras(lambda x: K.image.perspective_transform(x, START, END,
                                                        data_format="channels_first"),
                lambda x: ko.image.perspective_transform(x, START, END,
                                                         data_format="channels_first"),
                nchw, rtol=1e-4, atol=1e-5)


def test_perspective_identity_and_gradient():
    np.testing.assert_allclose(K.image.perspective_transform(IMG, START, START), IMG,
                               atol=1e-5)
    check_grad(lambda x: K.image.perspective_transform(x, START, END), IMG[:1])


def test_elastic_transform_properties():
    np.testing.assert_array_equal(K.image.elastic_transform(IMG, alpha=0.0, seed=1), IMG)
    a = K.image.elastic_transform(IMG, seed=5)
    np.testing.assert_array_equal(a, K.image.elastic_transform(IMG, seed=5))
    assert np.abs(a - K.image.elastic_transform(IMG, seed=6)).max() > 0.1
    # nearest sampling with edge-repeating fill only moves existing pixels
    near = K.image.elastic_transform(IMG, alpha=30.0, sigma=2.0, interpolation="nearest",
                                     fill_mode="nearest", seed=2)
    assert near.shape == IMG.shape
    for b in range(2):
        assert np.isin(near[b], IMG[b]).all()
    check_grad(lambda x: K.image.elastic_transform(x, alpha=5.0, sigma=2.0, seed=3), IMG[:1])


def test_warp_errors():
    with pytest.raises(ValueError, match=r"perspective_transform: points must have shape"):
        K.image.perspective_transform(IMG, START[:3], END[:3])
    with pytest.raises(ValueError, match="elastic_transform: fill_mode must be one of"):
        K.image.elastic_transform(IMG, fill_mode="edge", seed=1)
    with pytest.raises(TypeError, match="elastic_transform: seed must be an int or None"):
        K.image.elastic_transform(IMG, seed=1.5)


@pytest.mark.parametrize("method", ["linear", "cubic", "lanczos3", "lanczos5"])
@pytest.mark.parametrize("antialias", [True, False])
def test_scale_and_translate_matches_keras(method, antialias):
    ko = keras_ops()
    scale = np.array([0.6, 1.7], "float32")
    shift = np.array([0.5, -1.25], "float32")
    check_keras(lambda x, s, t: K.image.scale_and_translate(x, (2, 5, 14, 3), s, t, (1, 2),
                                                            method, antialias),
                lambda x, s, t: ko.image.scale_and_translate(x, (2, 5, 14, 3), s, t, (1, 2),
                                                             method, antialias),
                IMG, scale, shift, rtol=1e-4, atol=1e-5)


def test_scale_and_translate_integers_and_gradient():
    ko = keras_ops()
    ints = (IMG * 255).astype("int32")
    check_keras(lambda x: K.image.scale_and_translate(x, (2, 4, 6, 3), np.array([0.5, 0.7]),
                                                      np.zeros(2), (1, 2), "cubic"),
                lambda x: ko.image.scale_and_translate(x, (2, 4, 6, 3), np.array([0.5, 0.7]),
                                                       np.zeros(2), (1, 2), "cubic"), ints)
    check_grad(lambda x: K.image.scale_and_translate(x, (1, 5, 11, 3), np.array([0.6, 1.3]),
                                                     np.array([0.2, 0.0]), (1, 2), "linear"),
               IMG[:1])
    # the scale is a tensor too: its gradient flows
    check_grad(lambda s, x: K.image.scale_and_translate(x, (1, 5, 11, 3), s, np.zeros(2),
                                                        (1, 2), "cubic"),
               np.array([0.63, 1.31]), IMG[:1])
