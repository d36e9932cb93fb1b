"""``UpSampling2D`` in every interpolation mode of Keras 3 (which resizes with
``ops.image.resize``), and the resize methods behind it: Keras' own layer (its NumPy or JAX
backend: the readable reference; skipped where neither can run) and closed forms are the
oracles, central finite differences in float64 check the gradients."""

from __future__ import annotations

import os

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
import kiln.ops as K
from kiln import layers

IMG = np.random.default_rng(0).normal(size=(2, 3, 4, 2)).astype("float32")
MODES = ["bilinear", "bicubic", "lanczos3", "lanczos5", "area"]


def _keras_upsampling(x, size, interpolation, data_format="channels_last"):
    """Keras 3's UpSampling2D on ``x``, or a skip. tests/conftest.py gives Keras TensorFlow's
    backend where it is installed: its resize agrees with Keras' JAX/NumPy backends (the
    reference) except "bicubic", which calls TF's legacy kernel (it differs at the borders for
    odd factors); there the oracle is TF's ``ScaleAndTranslate`` with Keys' cubic kernel, the
    computation Keras' JAX/NumPy backends port."""
    os.environ.setdefault("KERAS_BACKEND", "numpy")
    keras = pytest.importorskip("keras")
    backend = keras.backend.backend()
    if backend == "numpy":
        pytest.importorskip("scipy", reason="Keras' NumPy backend imports scipy")
    if backend == "tensorflow" and interpolation == "bicubic":
        import tensorflow as tf

        first = data_format == "channels_first"
        img = np.transpose(x, (0, 2, 3, 1)) if first else x
        out = tf.raw_ops.ScaleAndTranslate(
            images=img, size=[img.shape[1] * size[0], img.shape[2] * size[1]],
            scale=np.array(size, "float32"), translation=np.zeros(2, "float32"),
            kernel_type="keyscubic", antialias=False).numpy()
        return np.transpose(out, (0, 3, 1, 2)) if first else out
    if interpolation == "area" and backend != "tensorflow":
        pytest.skip("only Keras' TensorFlow backend resizes by area")
    if backend not in ("numpy", "jax", "tensorflow"):
        pytest.skip(f"Keras runs on {backend} in this process, whose resize has other kernels")
    layer = keras.layers.UpSampling2D(size, data_format=data_format,
                                      interpolation=interpolation)
    return np.asarray(keras.ops.convert_to_numpy(layer(x)))


@pytest.mark.parametrize("interpolation", MODES)
@pytest.mark.parametrize("size", [(2, 2), (3, 1)])
def test_upsampling2d_matches_keras(interpolation, size):
    want = _keras_upsampling(IMG, size, interpolation)
    layer = layers.UpSampling2D(size, interpolation=interpolation)
    np.testing.assert_allclose(layer(IMG), want, rtol=1e-5, atol=1e-5)
    inputs = kiln.Input((3, 4, 2))  # the same in a compiled model
    model = kiln.Model(inputs, layers.UpSampling2D(size, interpolation=interpolation)(inputs))
    np.testing.assert_allclose(model.predict(IMG, verbose=0), want, rtol=1e-5, atol=1e-5)


def test_upsampling2d_channels_first_matches_keras():
    x = np.transpose(IMG, (0, 3, 1, 2))
    for mode in ("bicubic", "lanczos3"):
        want = _keras_upsampling(x, (2, 3), mode, "channels_first")
        got = layers.UpSampling2D((2, 3), data_format="channels_first", interpolation=mode)(x)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_bilinear_closed_form():
    """Half-pixel centers, edge taps clamped: a 2-pixel row [a, b] upsampled by 2 is
    [a, 0.75 a + 0.25 b, 0.25 a + 0.75 b, b] (Keras' and TF's bilinear)."""
    x = np.array([1.0, 5.0], "float32").reshape(1, 1, 2, 1)
    got = layers.UpSampling2D((1, 2), interpolation="bilinear")(x)
    np.testing.assert_allclose(np.asarray(got).ravel(), [1.0, 2.0, 4.0, 5.0], rtol=1e-6)


def test_area_upsampling_repeats_and_downsampling_averages():
    """TensorFlow's area resize: an integer upsampling repeats pixels (each output footprint
    lies in one input pixel); halving averages 2x2 blocks."""
    np.testing.assert_allclose(layers.UpSampling2D((2, 3), interpolation="area")(IMG),
                               IMG.repeat(2, axis=1).repeat(3, axis=2), rtol=1e-6)
    x = IMG[:, :2]
    blocks = x.reshape(2, 1, 2, 2, 2, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(K.image.resize(x, (1, 2), interpolation="area"), blocks,
                               rtol=1e-5, atol=1e-6)


def test_area_matches_tensorflow():
    tf = pytest.importorskip("tensorflow")
    x = np.random.default_rng(1).normal(size=(1, 5, 7, 2)).astype("float32")
    for size in ((3, 4), (10, 14), (5, 3)):
        want = tf.image.resize(x, size, method="area").numpy()
        np.testing.assert_allclose(K.image.resize(x, size, interpolation="area"), want,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interpolation", MODES + ["nearest"])
def test_upsampling2d_gradient_matches_finite_differences(interpolation):
    x = np.random.default_rng(2).normal(size=(1, 3, 2, 2))
    layer = layers.UpSampling2D((2, 2), interpolation=interpolation, dtype="float64")
    ph = kiln.placeholder(x.shape, "float64")
    out = layer(ph)
    w = np.random.default_rng(3).normal(size=out.shape)
    (g,) = kiln.grad(K.sum(out * K.constant(w)), [ph])
    got = kiln.function([ph], g)(x)
    fn = kiln.function([ph], out)
    want = numeric_grad(lambda: float(np.sum(np.asarray(fn(x)) * w)), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_a_model_trains_through_bicubic_upsampling():
    """One SGD step on a Dense kernel in front of a bicubic upsampling moves the loss as the
    gradient says (the loss falls)."""
    rng = np.random.default_rng(4)
    model = kiln.Sequential([kiln.Input((3, 3, 1)), layers.Dense(2),
                             layers.UpSampling2D(2, interpolation="bicubic")])
    model.compile("sgd", "mse")
    x, y = rng.normal(size=(4, 3, 3, 1)), rng.normal(size=(4, 6, 6, 2))
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=3, verbose=0)
    assert model.evaluate(x, y, verbose=0) < before


def test_bad_interpolation_names_the_layer_and_value():
    with pytest.raises(ValueError, match=r"UpSampling2D: interpolation must be one of "
                                         r"'nearest', .*received interpolation='cubic'"):
        layers.UpSampling2D(interpolation="cubic")
    with pytest.raises(ValueError, match=r"resize: interpolation must be one of .*received "
                                         r"interpolation='gaussian'"):
        K.image.resize(IMG, (4, 4), interpolation="gaussian")


def test_config_round_trip_lowercases_like_keras():
    layer = layers.UpSampling2D(3, interpolation="BiLinear")
    assert layer.get_config()["interpolation"] == "bilinear"
    clone = layers.UpSampling2D.from_config(layer.get_config())
    np.testing.assert_allclose(clone(IMG), layer(IMG))


@pytest.mark.parametrize("make,shape,sizes", [
    (lambda: layers.UpSampling1D(3), (None, 2), (3,)),
    (lambda: layers.UpSampling2D((2, 3)), (None, None, 2), (2, 3)),
    (lambda: layers.UpSampling3D((2, 1, 3)), (None, 3, 4, 2), (2, 1, 3)),
])
def test_nearest_upsampling_of_run_time_sizes(make, shape, sizes):
    """Keras upsamples by ``ops.repeat``, so sizes known only at run time work: one model for
    two lengths against ``np.repeat``; the gradient of ``sum(y ** 2) / 2`` is ``prod(sizes)
    * x`` (each input is copied that many times)."""
    inputs = kiln.Input(shape)
    model = kiln.Model(inputs, make()(inputs))
    rng = np.random.default_rng(5)
    for n in (2, 3):
        a = rng.normal(size=(2,) + tuple(n if d is None else d for d in shape))
        want = a
        for axis, s in enumerate(sizes, start=1):
            want = np.repeat(want, s, axis=axis)
        np.testing.assert_array_equal(model.predict(a.astype("float32"), verbose=0),
                                      want.astype("float32"))
        ph = kiln.placeholder((None,) + shape, "float64")
        out = make()(ph)
        (g,) = kiln.grad(K.sum(out * out) / 2.0, [ph])
        np.testing.assert_allclose(kiln.function([ph], g)(a), np.prod(sizes) * a, rtol=1e-12)


@pytest.mark.parametrize("interpolation,antialias", [("lanczos3", False), ("area", False),
                                                     ("bilinear", True), ("lanczos5", True)])
def test_resizing_layer_modes_match_keras(interpolation, antialias):
    """Keras' Resizing resizes with ``ops.image.resize``: the same modes, antialias included
    (downsampling 9x7 -> 4x5 and upsampling to 12x10)."""
    keras = pytest.importorskip("keras")
    if keras.backend.backend() not in ("numpy", "jax", "tensorflow") or (
            interpolation == "area" and keras.backend.backend() != "tensorflow"):
        pytest.skip(f"Keras' {keras.backend.backend()} backend has other resize kernels")
    x = np.random.default_rng(6).normal(size=(2, 9, 7, 3)).astype("float32")
    for size in ((4, 5), (12, 10)):
        theirs = keras.layers.Resizing(*size, interpolation=interpolation, antialias=antialias)
        ours = layers.Resizing(*size, interpolation=interpolation, antialias=antialias)
        np.testing.assert_allclose(ours(x), keras.ops.convert_to_numpy(theirs(x)), rtol=1e-4,
                                   atol=1e-5)
