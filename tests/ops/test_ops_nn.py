"""kiln.ops.nn and kiln.ops.image: eager and graph against NumPy references (and Keras'
documented examples), plus finite-difference gradients of the composite ops."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fd_oracle import numeric_grad
from test_ops_numpy import check

import kiln
import kiln.ops as K

rng = np.random.default_rng(1)
X = rng.normal(size=(3, 5)).astype("float32")
_erf = np.vectorize(math.erf)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


CASES = {
    "relu": (K.relu, lambda x: np.maximum(x, 0), [X]),
    "relu6": (K.relu6, lambda x: np.clip(x, 0, 6), [X * 4]),
    "sigmoid": (K.sigmoid, lambda x: 1 / (1 + np.exp(-x)), [X]),
    "tanh": (K.tanh, np.tanh, [X]),
    "softmax": (K.softmax, _softmax, [X]),
    "softmax_axis0": (lambda x: K.softmax(x, axis=0), lambda x: _softmax(x, 0), [X]),
    "log_softmax": (K.log_softmax, lambda x: np.log(_softmax(x)), [X]),
    "gelu": (K.gelu, _gelu_tanh, [X]),
    "gelu_erf": (lambda x: K.gelu(x, approximate=False),
                 lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))).astype("float32"), [X]),
    "silu": (K.silu, lambda x: x / (1 + np.exp(-x)), [X]),
    "swish": (K.swish, lambda x: x / (1 + np.exp(-x)), [X]),
    "elu": (K.elu, lambda x: np.where(x > 0, x, np.expm1(x)), [X]),
    "selu": (K.selu, lambda x: 1.0507009873554805 * np.where(
        x > 0, x, 1.6732632423543772 * np.expm1(x)), [X]),
    "leaky_relu": (K.leaky_relu, lambda x: np.where(x >= 0, x, 0.2 * x), [X]),
    "softplus": (K.softplus, lambda x: np.log1p(np.exp(x)), [X]),
    "softsign": (K.softsign, lambda x: x / (np.abs(x) + 1), [X]),
    "hard_sigmoid": (K.hard_sigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1), [X * 4]),
    "one_hot": (lambda i: K.one_hot(i, 4), lambda i: np.eye(4, dtype="float32")[i],
                [np.array([0, 3, 1], "int32")]),
    "one_hot_float_labels": (lambda i: K.nn.one_hot(i, 3),
                             lambda i: (i[:, None] == np.arange(3)).astype("float32"),
                             [np.array([2.0, 0.0, 1.5, 5.0], "float32")]),
    "one_hot_axis0": (lambda i: K.one_hot(i, 3, axis=0),
                      lambda i: np.eye(3, dtype="float32")[i].T, [np.array([1, 2], "int32")]),
    "moments": (lambda x: K.moments(x, axes=[1]), lambda x: (x.mean(1), x.var(1)), [X]),
    "max_pool": (lambda x: K.max_pool(x, 2),
                 lambda x: x.reshape(1, 2, 2, 2, 2, 1).max((2, 4)),
                 [rng.normal(size=(1, 4, 4, 1)).astype("float32")]),
    "average_pool_cf": (lambda x: K.average_pool(x, 2, data_format="channels_first"),
                        lambda x: x.reshape(1, 2, 3, 2).mean(-1),
                        [rng.normal(size=(1, 2, 6)).astype("float32")]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nn_op_eager_and_graph_match_numpy(name):
    fn, ref, arrays = CASES[name]
    check(fn, ref, *arrays, rtol=1e-5, atol=1e-6)


def _conv_ref(x, k, groups=1):
    n, h, w, _ = x.shape
    kh, kw, cin_g, cout = k.shape
    out = np.zeros((n, h - kh + 1, w - kw + 1, cout))
    per = cout // groups
    for o in range(cout):
        g = o // per
        xs = x[..., g * cin_g:(g + 1) * cin_g]
        for i in range(out.shape[1]):
            for j in range(out.shape[2]):
                out[:, i, j, o] = np.sum(xs[:, i:i + kh, j:j + kw, :] * k[..., o], (1, 2, 3))
    return out.astype("float32")


def test_conv_and_depthwise_conv():
    x = rng.normal(size=(2, 5, 5, 3)).astype("float32")
    k = rng.normal(size=(3, 3, 3, 4)).astype("float32")
    check(K.conv, _conv_ref, x, k, rtol=1e-4, atol=1e-5)
    d = rng.normal(size=(2, 2, 3, 2)).astype("float32")   # (kh, kw, in, multiplier)
    check(K.depthwise_conv, lambda x, d: _conv_ref(x, d.reshape(2, 2, 1, 6), groups=3), x, d,
          rtol=1e-4, atol=1e-5)


def test_crossentropies_follow_keras():
    t = np.array([[0, 1, 0], [0, 0, 1]], "float32")
    p = np.array([[0.05, 0.95, 0], [0.1, 0.8, 0.1]], "float32")
    # closed form: -log of the (clipped) probability of the true class
    np.testing.assert_allclose(K.categorical_crossentropy(t, p), [0.051293, 2.302585],
                               rtol=1e-5)
    np.testing.assert_allclose(K.sparse_categorical_crossentropy(np.array([1, 2]), p),
                               [0.051293, 2.302585], rtol=1e-5)
    logits = rng.normal(size=(2, 3)).astype("float32")
    want = -np.sum(t * np.log(_softmax(logits)), -1)
    np.testing.assert_allclose(K.categorical_crossentropy(t, logits, from_logits=True), want,
                               rtol=1e-5)
    # binary, closed form: -log p for target 1, -log(1 - p) for target 0
    bt, bp = np.array([0, 1, 1, 0], "float32"), np.array([0.1, 0.9, 0.8, 0.3], "float32")
    np.testing.assert_allclose(K.binary_crossentropy(bt, bp),
                               [0.105361, 0.105361, 0.223144, 0.356675], rtol=1e-5)
    z = rng.normal(size=4).astype("float32")
    s = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(K.binary_crossentropy(bt, z, from_logits=True),
                               -(bt * np.log(s) + (1 - bt) * np.log(1 - s)), rtol=1e-5)


def test_keras_docs_examples():
    """The examples of keras.io/api/ops (relu, relu6, hard_sigmoid, one_hot, top_k ...) and
    closed forms; the values were also compared with Keras 3 (jax backend) when written."""
    np.testing.assert_allclose(K.relu(np.array([-1.0, 0.0, 1.0, 0.2])), [0, 0, 1, 0.2])
    np.testing.assert_allclose(K.relu6(np.array([-3.0, -2.0, 0.1, 0.2, 6.0, 8.0])),
                               [0, 0, 0.1, 0.2, 6, 6])
    np.testing.assert_allclose(K.softsign(np.array([-0.1, 0.0, 0.1])),
                               [-0.0909091, 0.0, 0.0909091], rtol=1e-6)
    np.testing.assert_allclose(K.hard_sigmoid(np.array([-3.0, -1.0, 0.0, 1.0, 3.0])),
                               [0.0, 0.33333334, 0.5, 0.6666666, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(K.one_hot(np.array([0, 1, 2]), 3),
                                  np.eye(3, dtype="float32"))
    v, i = K.top_k(np.array([5, 2, 7, 1, 9, 3], "float32"), 3)
    np.testing.assert_array_equal(v, [9, 7, 5])
    np.testing.assert_array_equal(i, [4, 2, 0])
    np.testing.assert_array_equal(K.tril(np.ones((3, 3))), np.tril(np.ones((3, 3))))
    np.testing.assert_array_equal(K.cumsum(np.array([1, 2, 3])), [1, 3, 6])
    np.testing.assert_array_equal(K.repeat(np.array([[1, 2], [3, 4]]), 2, axis=0),
                                  [[1, 2], [1, 2], [3, 4], [3, 4]])


def test_image_namespace():
    imgs = rng.normal(size=(2, 4, 4, 1)).astype("float32")
    out = K.image.resize(imgs, (2, 2))   # bilinear halving with half-pixel centers: 2x2 means
    np.testing.assert_allclose(out, imgs.reshape(2, 2, 2, 2, 2, 1).mean((2, 4)), rtol=1e-5)
    single = K.image.resize(imgs[0], (2, 2))
    np.testing.assert_allclose(single, out[0], rtol=1e-6)
    ident = np.array([1, 0, 0, 0, 1, 0, 0, 0], "float32")
    np.testing.assert_allclose(K.image.affine_transform(imgs, ident), imgs, atol=1e-6)


def test_namespaces_hold_the_keras_names():
    for name in ["tile", "repeat", "cumsum", "cumprod", "sort", "argsort", "tril", "triu",
                 "var", "std", "norm", "dot", "matmul", "einsum", "flip", "isnan", "where",
                 "take_along_axis", "split", "arange", "linspace", "eye", "full_like"]:
        assert callable(getattr(K.numpy, name)) and getattr(K, name) is getattr(K.numpy, name)
    for name in ["relu", "gelu", "conv", "depthwise_conv", "max_pool", "average_pool",
                 "one_hot", "binary_crossentropy", "categorical_crossentropy",
                 "sparse_categorical_crossentropy", "moments", "dot_product_attention"]:
        assert getattr(K, name) is getattr(K.nn, name)


GRADS = {
    "cumsum": lambda x: K.cumsum(x, axis=1),
    "cumprod": lambda x: K.cumprod(x, axis=1),
    "sort": lambda x: K.sort(x, axis=-1),
    "top_k": lambda x: K.top_k(x, 2)[0],
    "tile": lambda x: K.tile(x, (1, 2)),
    "repeat": lambda x: K.repeat(x, 2, axis=0),
    "tril": lambda x: K.tril(x, -1),
    "norm": lambda x: K.norm(x, axis=1),
    "var": lambda x: K.var(x, axis=0),
    "take_along_axis": lambda x: K.take_along_axis(x, np.array([[1, 0], [2, 2]], "int32"), 1),
    "gelu": K.gelu, "selu": K.selu, "elu": K.elu, "softsign": K.softsign,
    "binary_crossentropy": lambda x: K.binary_crossentropy(
        np.array([[1.0, 0, 1], [0, 1, 0]]), x, from_logits=True),
    "categorical_crossentropy": lambda x: K.categorical_crossentropy(
        np.array([[1.0, 0, 0], [0, 0.5, 0.5]]), x, from_logits=True),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradient_matches_finite_differences(name):
    fn = GRADS[name]
    x0 = np.array([[0.3, -1.2, 0.7], [1.5, 0.2, -0.4]])
    w = rng.normal(size=np.shape(fn(x0)))
    p = kiln.placeholder(x0.shape, "float64")
    (g,) = kiln.grad(K.sum(fn(p) * K.constant(w)), [p])
    got = kiln.function([p], g, backend="reference")(x0)  # the rules, not the kernels
    xv = x0.copy()
    want = numeric_grad(lambda: float(np.sum(fn(xv) * w)), xv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_dot_product_attention_eager_and_graph():
    q, k, v = (rng.normal(size=(2, 3, 2, 4)).astype("float32") for _ in range(3))

    def ref(q, k, v):  # (batch, seq, heads, dim), Keras' layout
        s = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(4)
        return np.einsum("bhts,bshd->bthd", _softmax(s), v)
    check(K.dot_product_attention, ref, q, k, v, rtol=1e-5, atol=1e-6)


def test_symbolic_dims_build_tensors_static_ones_are_arrays():
    x = kiln.placeholder((None, 3))
    z = K.zeros((K.shape(x)[0], 2))
    assert kiln.core.is_tensor(z)
    out = kiln.function([x], z + K.sum(x))(np.ones((4, 3), "float32"))
    np.testing.assert_array_equal(out, np.full((4, 2), 12.0))
    assert isinstance(K.ones((2, 2)), np.ndarray)


def test_stop_gradient_eager_is_the_value_and_graph_blocks_the_gradient():
    np.testing.assert_array_equal(K.stop_gradient(X), X)
    p = kiln.placeholder((3,))
    (g,) = kiln.grad(K.sum(K.stop_gradient(p) * p), [p])
    xv = np.array([1.0, 2.0, 3.0], "float32")
    np.testing.assert_array_equal(kiln.function([p], g)(xv), xv)
