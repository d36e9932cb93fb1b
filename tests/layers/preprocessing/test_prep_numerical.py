"""Normalization, Discretization and CategoryEncoding against NumPy formulas from Keras' docs
(``(x - mean) / max(std, 1e-7)``, ``np.digitize``, one/multi-hot and counts)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers as L


def data(*shape, seed=0):
    return np.random.default_rng(seed).normal(3.0, 2.0, size=shape).astype("float32")


@pytest.mark.parametrize("axis,reduce", [(-1, (0, 1)), ((1, 2), (0,)), (None, (0, 1, 2)),
                                         (1, (0, 2))])
def test_normalization_adapt_and_call(axis, reduce):
    x = data(40, 3, 4)
    norm = L.Normalization(axis=axis)
    norm.adapt(x)
    mean = x.astype(np.float64).mean(axis=reduce, keepdims=True)
    std = x.astype(np.float64).std(axis=reduce, keepdims=True)
    np.testing.assert_allclose(norm(x), (x - mean) / std, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.count.numpy(), int(x.size / mean.size))


def test_normalization_adapt_on_batches_equals_the_whole():
    x = data(50, 5)
    whole, parts = L.Normalization(), L.Normalization()
    whole.adapt(x)
    parts.adapt([x[:7], x[7:30], (x[30:], None)])
    np.testing.assert_allclose(parts.adapt_mean.numpy(), x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(parts.adapt_variance.numpy(), x.astype(np.float64).var(0),
                               rtol=1e-5)
    np.testing.assert_allclose(parts(x), whole(x), rtol=1e-5, atol=1e-5)


def test_normalization_given_statistics_invert_and_tiny_variance():
    x = data(6, 3)
    mean, var = np.array([1.0, -2.0, 0.5]), np.array([4.0, 0.25, 0.0])
    std = np.maximum(np.sqrt(var), 1e-7)
    np.testing.assert_allclose(L.Normalization(mean=mean, variance=var)(x), (x - mean) / std,
                               rtol=1e-5)
    np.testing.assert_allclose(L.Normalization(mean=mean, variance=var, invert=True)(x),
                               mean + x * std, rtol=1e-5)
    # a scalar statistic broadcasts to every feature
    np.testing.assert_allclose(L.Normalization(mean=2.0, variance=9.0)(x), (x - 2.0) / 3.0,
                               rtol=1e-5)


def test_normalization_errors():
    with pytest.raises(ValueError, match="Normalization: set both mean and variance"):
        L.Normalization(mean=1.0)
    with pytest.raises(ValueError, match=r"same shape, received \(2,\) and \(3,\)"):
        L.Normalization(mean=[1.0, 2.0], variance=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="adapt\\(\\) received data of shape \\(4, 6\\)"):
        norm = L.Normalization(name="nz")
        norm.adapt(data(4, 5))
        norm.adapt(data(4, 6))
    with pytest.raises(ValueError, match="adapt\\(\\) cannot be used when mean and variance"):
        L.Normalization(mean=0.0, variance=1.0).adapt(data(4, 5))
    with pytest.raises(ValueError, match=r"kept axis 1 must be known.*\(None, None\)"):
        L.Normalization()(kiln.placeholder((None, None)))


@pytest.mark.parametrize("mode", ["int", "one_hot", "multi_hot", "count"])
def test_discretization_modes(mode):
    x = np.array([[-1.5, 1.0, 3.4, 0.5], [0.0, 3.0, 1.0, 9.0]], "float32")
    bounds = [0.0, 1.0, 2.5]
    got = L.Discretization(bin_boundaries=bounds, output_mode=mode)(x)
    idx = np.digitize(x, bounds)
    hot = (idx[..., None] == np.arange(4)).astype("float32")
    expected = {"int": idx, "one_hot": hot, "multi_hot": hot.max(1), "count": hot.sum(1)}[mode]
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == (np.int32 if mode == "int" else np.float32)


def test_discretization_adapt_finds_quantiles():
    x = np.random.default_rng(1).uniform(0, 100, size=(4000, 1)).astype("float32")
    layer = L.Discretization(num_bins=4, epsilon=0.01)
    layer.adapt(x)
    np.testing.assert_allclose(layer.bin_boundaries, np.quantile(x, [0.25, 0.5, 0.75]),
                               atol=1.5)
    counts = np.bincount(layer(x).reshape(-1), minlength=4)
    assert np.all(np.abs(counts - 1000) < 60), counts
    # batches give the same boundaries as the whole (within the approximation)
    parts = L.Discretization(num_bins=4)
    parts.adapt([x[:1000], x[1000:]])
    np.testing.assert_allclose(parts.bin_boundaries, layer.bin_boundaries, atol=1.5)
    again = L.Discretization.from_config(layer.get_config())
    assert again.bin_boundaries == layer.bin_boundaries


def test_discretization_errors():
    with pytest.raises(ValueError, match="set either bin_boundaries or num_bins"):
        L.Discretization()
    with pytest.raises(ValueError, match="not both"):
        L.Discretization([1.0], num_bins=3)
    with pytest.raises(ValueError, match="bin_boundaries must be sorted"):
        L.Discretization([2.0, 1.0])
    with pytest.raises(ValueError, match="before using the layer"):
        L.Discretization(num_bins=3)(np.zeros((2, 2), "float32"))


@pytest.mark.parametrize("mode", ["one_hot", "multi_hot", "count"])
def test_category_encoding(mode):
    x = np.array([[0, 1, 3, 3], [2, 2, 1, 0]], "int64")
    hot = (x[..., None] == np.arange(5)).astype("float32")
    expected = {"one_hot": hot, "multi_hot": hot.max(1), "count": hot.sum(1)}[mode]
    np.testing.assert_array_equal(L.CategoryEncoding(5, output_mode=mode)(x), expected)


def test_category_encoding_keras_doc_examples():
    one = L.CategoryEncoding(num_tokens=4, output_mode="one_hot")(np.array([3, 2, 0, 1]))
    np.testing.assert_array_equal(one, np.eye(4)[[3, 2, 0, 1]])
    multi = L.CategoryEncoding(4, "multi_hot")(np.array([[0, 1], [0, 0], [1, 2], [3, 1]]))
    np.testing.assert_array_equal(multi, [[1, 1, 0, 0], [1, 0, 0, 0], [0, 1, 1, 0],
                                          [0, 1, 0, 1]])
    weights = np.array([[0.1, 0.2], [0.1, 0.1], [0.2, 0.3], [0.4, 0.2]], "float32")
    count = L.CategoryEncoding(4, "count")(np.array([[0, 1], [0, 0], [1, 2], [3, 1]]),
                                           count_weights=weights)
    np.testing.assert_allclose(count, [[0.1, 0.2, 0, 0], [0.2, 0, 0, 0], [0, 0.2, 0.3, 0],
                                       [0, 0.2, 0, 0.4]], rtol=1e-6)
    # a column of size 1 is one index per row
    np.testing.assert_array_equal(L.CategoryEncoding(3, "one_hot")(np.array([[2], [0]])),
                                  [[0, 0, 1], [1, 0, 0]])


def test_category_encoding_errors():
    with pytest.raises(ValueError, match="num_tokens must be an int >= 1"):
        L.CategoryEncoding(0)
    with pytest.raises(ValueError, match="output_mode must be one of.*'tf_idf'"):
        L.CategoryEncoding(3, "tf_idf")
    with pytest.raises(ValueError, match="count_weights is only used with output_mode='count'"):
        L.CategoryEncoding(3, "one_hot")(np.array([[1]]), count_weights=np.ones((1, 1)))
