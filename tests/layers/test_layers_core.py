"""Forward values of the core, reshaping and merging layers against NumPy, Dropout's
behaviour, Input/InputLayer and Lambda."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import layers as L
from kiln.layers.base import HISTORY
from kiln.layers.context import trace

RNG = np.random.default_rng(0)


def _normal(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape).astype("float32")


# ---- Dense / Activation / Embedding -------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 5), (2, 2, 3, 5)])
def test_dense_matches_numpy(shape: tuple) -> None:
    layer = L.Dense(3, activation="relu")
    x = _normal(*shape)
    y = layer(x)
    w, b = layer.get_weights()
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_dense_kernel_regularizer_loss_closed_form() -> None:
    layer = L.Dense(3, kernel_regularizer=kiln.regularizers.L2(0.5), bias_regularizer="l1",
                    bias_initializer="ones")
    layer(kiln.placeholder((None, 4)))
    w, b = layer.get_weights()
    (penalty_w, penalty_b) = layer.losses
    got = kiln.function([], [penalty_w, penalty_b], backend="reference")()
    np.testing.assert_allclose(got, [0.5 * np.sum(w**2), 0.01 * np.sum(np.abs(b))], rtol=1e-6)


def test_dense_activity_regularizer_divides_by_batch() -> None:
    layer = L.Dense(2, kernel_initializer="ones", activity_regularizer=kiln.regularizers.L2(1.0))
    x = kiln.placeholder((None, 3))
    with trace(training=True) as ctx:
        y = layer(x)
    fn = kiln.function([x], [y, ctx.losses[0]], backend="reference")
    data = _normal(5, 3)
    out, penalty = fn(data)
    np.testing.assert_allclose(penalty, np.sum(out**2) / 5, rtol=1e-5)


def test_activation_layer_matches_function() -> None:
    x = _normal(3, 4)
    np.testing.assert_allclose(L.Activation("softmax")(x),
                               np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
    assert L.Activation("swish").get_config()["activation"] == "silu"


def test_embedding_matches_numpy_and_gradient_scatters() -> None:
    layer = L.Embedding(6, 3)
    ids = np.array([[0, 5, 5], [2, 1, 0]], np.int32)
    out = layer(ids)
    table = layer.get_weights()[0]
    np.testing.assert_array_equal(out, table[ids])
    # float ids are cast to int32 like Keras
    np.testing.assert_array_equal(layer(ids.astype("float32")), table[ids])
    # gradient of sum(out) w.r.t. the table counts each id's occurrences
    x = kiln.placeholder((None, 3), "int32")
    (g,) = kiln.grad(K.sum(layer(x)), [layer.embeddings])
    got = kiln.function([x], g, backend="reference")(ids)
    counts = np.bincount(ids.ravel(), minlength=6)[:, None] * np.ones((1, 3))
    np.testing.assert_allclose(got, counts)


def test_embedding_default_initializer_is_keras_uniform() -> None:
    layer = L.Embedding(200, 50)
    layer(np.zeros((1, 1), np.int32))
    w = layer.get_weights()[0]
    assert w.min() >= -0.05 and w.max() < 0.05 and w.std() > 0.02
    assert layer.get_config()["embeddings_initializer"]["class_name"] == "RandomUniform"


# ---- Dropout ------------------------------------------------------------------------------------
def _dropout_fn(layer: L.Dropout, shape: tuple) -> tuple:
    x = kiln.placeholder((None,) + shape[1:])
    key = kiln.placeholder((2,), "int64")
    with trace(training=True, rng_key=key):
        y = layer(x)
    return kiln.function([x, key], y, backend="reference")


def test_dropout_training_statistics_and_scaling() -> None:
    layer = L.Dropout(0.25)
    fn = _dropout_fn(layer, (100, 200))
    x = np.ones((100, 200), np.float32)
    y = fn(x, np.array([1, 0]))
    dropped = np.mean(y == 0)
    assert abs(dropped - 0.25) < 0.01
    np.testing.assert_allclose(np.unique(y), [0.0, 1 / 0.75], rtol=1e-6)
    # the same key gives the same mask; another counter another one
    np.testing.assert_array_equal(fn(x, np.array([1, 0])), y)
    assert not np.array_equal(fn(x, np.array([1, 1])), y)


def test_dropout_salt_is_stable_and_distinguishes_layers() -> None:
    a, b = L.Dropout(0.5, name="drop_a"), L.Dropout(0.5, name="drop_b")
    assert a.salt != b.salt  # drawn from kiln's seeded generator (test_seeded_streams.py)
    assert L.Dropout.from_config(a.get_config()).salt == a.salt  # kept in the config
    assert L.Dropout(0.5, seed=11).salt == 11
    x = np.ones((4, 64), np.float32)
    key = np.array([5, 0])
    assert not np.array_equal(_dropout_fn(a, x.shape)(x, key), _dropout_fn(b, x.shape)(x, key))


def test_dropout_noise_shape_shares_the_mask() -> None:
    layer = L.Dropout(0.5, noise_shape=(None, 1, 8))
    fn = _dropout_fn(layer, (3, 5, 8))
    y = fn(np.ones((3, 5, 8), np.float32), np.array([2, 0]))
    assert np.all(y == y[:, :1, :])  # same mask at every step
    assert 0 < np.mean(y == 0) < 1


def test_dropout_is_identity_outside_training() -> None:
    """Without training=True (eager) or in an inference trace; eager training=True drops:
    tests/layers/test_dropout_eager.py."""
    layer = L.Dropout(0.9)
    x = _normal(4, 6)
    np.testing.assert_array_equal(layer(x), x)
    ph = kiln.placeholder((None, 6))
    key = kiln.placeholder((2,), "int64")
    with trace(training=False, rng_key=key):
        assert layer(ph) is ph


# ---- reshaping ----------------------------------------------------------------------------------
def test_reshaping_layers_match_numpy() -> None:
    x = _normal(2, 3, 4)
    np.testing.assert_array_equal(L.Flatten()(x), x.reshape(2, 12))
    np.testing.assert_array_equal(L.Reshape((4, -1))(x), x.reshape(2, 4, 3))
    np.testing.assert_array_equal(L.Permute((2, 1))(x), x.transpose(0, 2, 1))
    v = _normal(2, 4)
    np.testing.assert_array_equal(L.RepeatVector(3)(v), np.repeat(v[:, None, :], 3, axis=1))
    img = _normal(2, 3, 4, 2)
    np.testing.assert_array_equal(L.ZeroPadding2D(((1, 0), (2, 3)))(img),
                                  np.pad(img, ((0, 0), (1, 0), (2, 3), (0, 0))))
    np.testing.assert_array_equal(L.ZeroPadding2D((1, 2))(img),
                                  np.pad(img, ((0, 0), (1, 1), (2, 2), (0, 0))))
    up = L.UpSampling2D((2, 3))(img)
    np.testing.assert_array_equal(up, img.repeat(2, axis=1).repeat(3, axis=2))


def test_upsampling_gradient_sums_each_block() -> None:
    layer = L.UpSampling2D(2)
    x = kiln.placeholder((None, 2, 3, 1))
    seed = _normal(2, 4, 6, 1)
    (g,) = kiln.grad(layer(x), [x], seed=K.constant(seed))
    got = kiln.function([x], g, backend="reference")(_normal(2, 2, 3, 1))
    want = seed.reshape(2, 2, 2, 3, 2, 1).sum(axis=(2, 4))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_repeat_vector_gradient_sums_copies() -> None:
    x = kiln.placeholder((None, 3))
    (g,) = kiln.grad(K.sum(L.RepeatVector(4)(x)), [x])
    np.testing.assert_allclose(kiln.function([x], g, backend="reference")(_normal(2, 3)),
                               np.full((2, 3), 4.0))


# ---- merging ------------------------------------------------------------------------------------
def test_merging_layers_match_numpy() -> None:
    a, b, c = _normal(2, 3), _normal(2, 3), _normal(2, 3)
    np.testing.assert_allclose(L.Add()([a, b, c]), a + b + c, rtol=1e-6)
    np.testing.assert_allclose(L.Subtract()([a, b]), a - b, rtol=1e-6)
    np.testing.assert_allclose(L.Multiply()([a, b, c]), a * b * c, rtol=1e-6)
    np.testing.assert_allclose(L.Average()([a, b, c]), (a + b + c) / 3, rtol=1e-6)
    np.testing.assert_array_equal(L.Maximum()([a, b, c]), np.maximum(np.maximum(a, b), c))
    np.testing.assert_array_equal(L.Minimum()([a, b, c]), np.minimum(np.minimum(a, b), c))
    d = _normal(2, 5)
    np.testing.assert_array_equal(L.Concatenate()([a, d]), np.concatenate([a, d], -1))
    np.testing.assert_array_equal(L.Concatenate(axis=1)([a, d]), np.concatenate([a, d], 1))


# ---- Input / InputLayer -------------------------------------------------------------------------
def test_input_returns_registered_placeholder() -> None:
    x = L.Input((28, 28, 1), name="image")
    assert x.op == "placeholder" and x.shape == (None, 28, 28, 1) and x.dtype == "float32"
    layer, index, out = HISTORY[x]
    assert isinstance(layer, L.InputLayer) and (index, out) == (0, 0)
    assert layer.name == "image" and layer.output is x
    assert kiln.Input is L.Input
    ids = kiln.Input((5,), dtype="int32", batch_size=8)
    assert ids.shape == (8, 5) and ids.dtype == "int32"


def test_input_layer_config_round_trip() -> None:
    layer = L.InputLayer(shape=(3, 4), name="inp")
    config = layer.get_config()
    assert config == {"batch_shape": (None, 3, 4), "dtype": "float32", "sparse": False,
                      "ragged": False, "name": "inp", "optional": False}
    again = L.InputLayer.from_config(json.loads(json.dumps(config)))
    assert again.output.shape == (None, 3, 4) and again.name == "inp"
    assert L.InputLayer(batch_shape=(2, 3)).output.shape == (2, 3)
    assert L.InputLayer(batch_input_shape=(None, 7)).output.shape == (None, 7)  # Keras 2
    with pytest.raises(ValueError, match="shape"):
        L.InputLayer()


def test_functional_chain_records_history() -> None:
    x = L.Input((4,))
    dense = L.Dense(2)
    y = dense(x)
    assert HISTORY[y][0] is dense
    record = dense._inbound[0]
    assert record.inputs is x and record.outputs is y


# ---- Lambda -------------------------------------------------------------------------------------
def test_lambda_calls_function_and_refuses_to_load() -> None:
    layer = L.Lambda(lambda t, k: t * k, arguments={"k": 3.0})
    x = _normal(2, 3)
    np.testing.assert_allclose(layer(x), 3 * x, rtol=1e-6)
    config = layer.get_config()
    json.dumps(config)
    with pytest.raises(ValueError, match="cannot be loaded"):
        L.Lambda.from_config(config)
