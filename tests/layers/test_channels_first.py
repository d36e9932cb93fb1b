"""``data_format="channels_first"`` (kiln/layers/channels_first.py): each spatial layer on
``(batch, channels, *spatial)`` gives what the same layer, same weights, gives channels-last
on the transposed input (the layout is the only difference, as in Keras); Flatten flattens
in channels-last order (Keras' rule); configs, build shapes, saving and training keep the
caller's layout; layers that cannot run it, and bad values, are clear errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers as L

RNG = np.random.default_rng(3)

CASES = [
    (L.Conv1D, dict(filters=4, kernel_size=3, padding="same"), (2, 3, 9)),
    (L.Conv2D, dict(filters=5, kernel_size=3, strides=2), (2, 3, 9, 8)),
    (L.Conv2D, dict(filters=4, kernel_size=(3, 1), dilation_rate=2, padding="same"),
     (2, 2, 7, 6)),
    (L.Conv3D, dict(filters=2, kernel_size=2), (1, 3, 4, 5, 4)),
    (L.Conv2DTranspose, dict(filters=3, kernel_size=3, strides=2), (2, 4, 5, 5)),
    (L.SeparableConv2D, dict(filters=4, kernel_size=3), (2, 3, 7, 7)),
    (L.DepthwiseConv2D, dict(kernel_size=3, depth_multiplier=2), (2, 3, 6, 6)),
    (L.MaxPooling2D, dict(pool_size=2), (2, 3, 6, 7)),
    (L.AveragePooling1D, dict(pool_size=2), (2, 4, 9)),
    (L.AveragePooling3D, dict(pool_size=2), (1, 2, 4, 4, 4)),
    (L.GlobalAveragePooling2D, {}, (2, 3, 5, 4)),
    (L.GlobalMaxPooling1D, dict(keepdims=True), (2, 3, 5)),
    (L.ZeroPadding2D, dict(padding=(1, 2)), (2, 3, 4, 4)),
    (L.Cropping2D, dict(cropping=((1, 0), (0, 2))), (2, 3, 5, 6)),
    (L.UpSampling2D, dict(size=2), (2, 3, 3, 4)),
    (L.ZeroPadding3D, dict(padding=1), (1, 2, 3, 3, 3)),
    (L.UpSampling3D, dict(size=2), (1, 2, 2, 2, 2)),
]


def _last(x):
    return np.moveaxis(x, 1, -1)


def _first(y):
    return np.moveaxis(y, -1, 1)


@pytest.mark.parametrize("cls,kwargs,shape", CASES,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_channels_first_is_channels_last_on_the_transposed_input(cls, kwargs, shape):
    x = RNG.normal(size=shape).astype("float32")
    first = cls(**kwargs, data_format="channels_first")
    last = cls(**kwargs, data_format="channels_last")
    got = np.asarray(first(x))
    last.build((None,) + _last(x).shape[1:])
    if first.weights:
        last.set_weights(first.get_weights())
    want = np.asarray(last(_last(x)))
    if got.ndim == x.ndim:
        want = _first(want)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert first.get_config()["data_format"] == "channels_first"
    assert tuple(first.build_input_shape)[1:] == shape[1:]


def test_flatten_flattens_in_channels_last_order_like_keras():
    x = np.arange(2 * 3 * 2 * 2, dtype="float32").reshape(2, 3, 2, 2)
    got = np.asarray(L.Flatten(data_format="channels_first")(x))
    np.testing.assert_array_equal(got, np.transpose(x, (0, 2, 3, 1)).reshape(2, -1))


def _model(fmt, shape):
    return kiln.Sequential([
        L.Input(shape), L.Conv2D(4, 3, activation="relu", data_format=fmt),
        L.MaxPooling2D(data_format=fmt), L.SpatialDropout2D(0.0, data_format=fmt),
        L.Flatten(data_format=fmt), L.Dense(3)])


def test_a_channels_first_model_trains_as_the_channels_last_one_does(tmp_path):
    x = RNG.normal(size=(16, 2, 8, 8)).astype("float32")
    y = RNG.integers(0, 3, 16)
    first, last = _model("channels_first", (2, 8, 8)), _model("channels_last", (8, 8, 2))
    last.set_weights(first.get_weights())
    for m in (first, last):
        m.compile(kiln.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    h1 = first.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    h2 = last.fit(_last(x), y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(h1, h2, rtol=1e-5)
    for a, b in zip(first.get_weights(), last.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    path = str(tmp_path / "cf.keras")
    first.save(path)
    again = kiln.saving.load_model(path)
    np.testing.assert_allclose(again.predict(x, verbose=0), first.predict(x, verbose=0),
                               rtol=1e-6)


def test_the_global_setting_is_the_default_and_is_restored():
    assert kiln.config.image_data_format() == "channels_last"
    kiln.config.set_image_data_format("channels_first")
    try:
        assert L.Conv2D(2, 3).data_format == "channels_first"
        assert np.asarray(L.MaxPooling2D()(np.zeros((1, 3, 4, 4), "float32"))).shape == \
            (1, 3, 2, 2)
        with pytest.raises(ValueError, match="ConvLSTM2D: data_format='channels_first'"):
            L.ConvLSTM2D(2, 3)
    finally:
        kiln.config.set_image_data_format("channels_last")
    assert L.Conv2D(2, 3).data_format == "channels_last"


def test_bad_values_are_clear_errors():
    with pytest.raises(ValueError, match="Conv2D: data_format must be 'channels_last' or "
                                         "'channels_first', received 'NCHW'"):
        L.Conv2D(2, 3, data_format="NCHW")
    with pytest.raises(ValueError, match="set_image_data_format: data_format must be one of"):
        kiln.config.set_image_data_format("nchw")
