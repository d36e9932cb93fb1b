"""More pieces keras.io programs needed (issue 44, p52-p56): ops on ``ops.shape`` dimensions
and ``tile`` with a run-time repeat count (the causal mask of keras.io's miniature GPT);
targets for a loss defined over some outputs only (``loss=[fn, None]``); narrow input
dtypes (``Input(dtype="uint8")``); a training step traced for the batch's sizes when it
cannot be traced for unknown ones; ``hasattr(layer, "layers")`` only for models."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers, ops


def _causal_mask(batch_size, n_dest, n_src, dtype):
    # keras.io's text_generation_with_miniature_gpt, Keras 3 version
    i = ops.arange(n_dest)[:, None]
    j = ops.arange(n_src)
    m = i >= j - n_src + n_dest
    mask = ops.cast(m, dtype)
    mask = ops.reshape(mask, [1, n_dest, n_src])
    mult = ops.concatenate(
        [ops.expand_dims(batch_size, -1), ops.convert_to_tensor([1, 1])], 0)
    return ops.tile(mask, mult)


class _Mask(layers.Layer):
    def call(self, x):
        shape = ops.shape(x)
        return ops.cast(_causal_mask(shape[0], shape[1], shape[1], "bool"), "float32")


def test_tile_by_a_run_time_batch_size_is_the_numpy_tile():
    inputs = kiln.Input((5,))
    out = _Mask()(inputs)
    assert out.shape == (None, 5, 5)
    got = kiln.Model(inputs, out).predict(np.zeros((3, 5), "float32"), verbose=0)
    np.testing.assert_array_equal(got, np.tile(np.tril(np.ones((5, 5)))[None], (3, 1, 1)))

    class Repeat(layers.Layer):
        def call(self, x):  # an axis of size 2 repeated batch times: a real tile
            return ops.tile(ops.ones((2, 3)) * ops.arange(3.0), [ops.shape(x)[0], 1])

    i2 = kiln.Input((4,))
    got = kiln.Model(i2, Repeat()(i2)).predict(np.zeros((3, 4), "float32"), verbose=0)
    np.testing.assert_array_equal(got, np.tile(np.ones((2, 3)) * np.arange(3.0), (3, 1)))


def test_tile_refuses_repeats_it_cannot_know():
    class Bad(layers.Layer):
        def call(self, x):
            return ops.tile(x, ops.cast(ops.sum(x, axis=0), "int32"))

    with pytest.raises(ValueError, match="tile: repeats must be ints, or computed from "
                                         "ops.shape dimensions"):
        Bad()(kiln.Input((2,)))


def test_a_loss_over_some_outputs_takes_one_target_per_loss():
    inputs = kiln.Input((4,))
    hidden = layers.Dense(3, name="hidden")(inputs)
    logits = layers.Dense(2, name="logits")(hidden)
    model = kiln.Model(inputs, [logits, hidden])
    model.compile("sgd", loss=[kiln.losses.SparseCategoricalCrossentropy(from_logits=True),
                               None])
    x = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    y = np.array([0, 1] * 4)
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    p = model.predict(x, verbose=0)[0]
    p = np.exp(p - p.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert logs["loss"] == pytest.approx(-np.mean(np.log(p[np.arange(8), y])), rel=1e-5)
    model.fit(x, y, epochs=1, verbose=0)


def test_uint8_inputs_are_computed_in_int32():
    inputs = kiln.Input((2, 2, 1), dtype="uint8")
    assert inputs.dtype == "int32"
    out = layers.Rescaling(1 / 255.0)(inputs)
    got = kiln.Model(inputs, out).predict(np.full((1, 2, 2, 1), 255, np.uint8), verbose=0)
    np.testing.assert_allclose(got, np.ones((1, 2, 2, 1)))


def test_strided_same_conv_over_unknown_sizes_trains_for_the_batch_sizes():
    inputs = kiln.Input((None, None, 1))
    y = layers.Conv2D(2, 3, strides=2, padding="same")(inputs)
    out = layers.Dense(1)(layers.GlobalAveragePooling2D()(y))
    model = kiln.Model(inputs, out)
    model.compile("sgd", "mse")
    x = np.random.default_rng(1).normal(size=(4, 7, 6, 1)).astype("float32")
    before = model.evaluate(x, np.ones((4, 1)), verbose=0)
    model.fit(x, np.ones((4, 1)), epochs=3, verbose=0)
    assert model.evaluate(x, np.ones((4, 1)), verbose=0) < before
    # another size: predict (no gradient) still takes any size
    assert model.predict(np.zeros((2, 9, 9, 1), "float32"), verbose=0).shape == (2, 1)


def test_only_models_have_layers():
    assert not hasattr(layers.Dense(2), "layers")
    model = kiln.Sequential([kiln.Input((2,)), layers.Dense(2)])
    assert [type(la).__name__ for la in model.layers] == ["Dense"]


class _Endpoint(layers.Layer):
    """keras.io's endpoint layer pattern (its tf.keras version), with kiln.ops.sigmoid."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.accuracy_fn = kiln.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            self.add_loss(kiln.losses.BinaryCrossentropy(from_logits=True)(
                targets, logits, sample_weight))
            self.add_metric(self.accuracy_fn(targets, logits, sample_weight))
            self.add_metric(ops.mean(logits), name="mean_logit")
        return ops.sigmoid(logits)


def test_add_metric_and_a_layer_metric_are_in_the_logs():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 3)).astype("float32")
    t = (rng.random((16, 1)) > 0.5).astype("float32")
    w = rng.random((16, 1)).astype("float32")
    inputs, targets, weights = kiln.Input((3,)), kiln.Input((1,)), kiln.Input((1,))
    dense = layers.Dense(1)
    preds = _Endpoint()(dense(inputs), targets, weights)
    model = kiln.Model([inputs, targets, weights], preds)
    model.compile(kiln.optimizers.SGD(0.0))  # the weights stay: the oracle uses them
    history = model.fit([x, t, w], epochs=1, batch_size=16, verbose=0)
    kernel, bias = (np.asarray(v, np.float64) for v in dense.weights)
    logits = x @ kernel + bias
    right = ((logits > 0.5) == (t > 0.5)).astype(np.float64)
    assert history.history["accuracy"][0] == pytest.approx(np.sum(right * w) / np.sum(w),
                                                           rel=1e-5)
    assert history.history["mean_logit"][0] == pytest.approx(logits.mean(), rel=1e-4)
    logs = model.evaluate([x, t, w], batch_size=16, verbose=0, return_dict=True)
    assert logs["mean_logit"] == pytest.approx(logits.mean(), rel=1e-4)


def test_add_metric_of_a_tensor_needs_a_name():
    class NoName(layers.Layer):
        def call(self, x):
            self.add_metric(ops.sum(x))
            return x

    with pytest.raises(ValueError, match="add_metric of a tensor needs a name"):
        NoName()(kiln.Input((2,)))
    with pytest.raises(ValueError, match="aggregation must be None or 'mean'"):
        layers.Dense(1).add_metric(1.0, name="x", aggregation="sum")
