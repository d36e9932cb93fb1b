"""HashedCrossing against Keras' documented example, TensorFlow's ``sparse.cross_hashed``
(the op Keras' layer runs) and Keras' layer itself, where importable."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.layers import HashedCrossing

F1 = np.array(["A", "B", "A", "B", "A"])
F2 = np.array([101, 101, 101, 102, 102])
RNG = np.random.default_rng(3)
WORDS = np.array(["", "cat", "dog", "a much longer string of more than sixty-four bytes, to "
                  "reach FarmHash's long path", "ü", "x" * 20, "y" * 40])


def test_keras_documented_examples():
    np.testing.assert_array_equal(HashedCrossing(num_bins=5)((F1, F2)), [1, 4, 1, 1, 3])
    hot = HashedCrossing(num_bins=5, output_mode="one_hot")((F1, F2))
    assert hot.dtype == np.float32
    np.testing.assert_array_equal(hot, np.eye(5, dtype="float32")[[1, 4, 1, 1, 3]])


def test_shapes_and_three_features():
    layer = HashedCrossing(num_bins=7)
    flat = layer((F1, F2))
    assert flat.dtype == np.int64
    col = layer((F1[:, None], F2[:, None]))
    assert col.shape == (5, 1)
    np.testing.assert_array_equal(col[:, 0], flat)
    assert layer((F1[0], F2[0])).shape == () and layer((F1[0], F2[0])) == flat[0]
    # crossing is order-dependent and every feature counts
    three = layer((F1, F2, np.array([1, 1, 1, 1, 1])))
    assert three.shape == (5,)
    assert layer.compute_output_shape(((None, 1), (None, 1))) == (None, 1)
    assert HashedCrossing(4, output_mode="one_hot").compute_output_shape(
        ((None, 1), (None, 1))) == (None, 4)


def test_matches_tensorflow_cross_hashed():
    tf = pytest.importorskip("tensorflow")
    a = RNG.choice(WORDS, 40)
    b = RNG.integers(-2**40, 2**40, 40)
    c = RNG.choice(WORDS, 40)
    for bins in (3, 1000, 2**31 - 1):
        want = tf.sparse.to_dense(tf.sparse.cross_hashed(
            [tf.constant(a[:, None]), tf.constant(b[:, None]), tf.constant(c[:, None])],
            bins)).numpy()[:, 0]
        np.testing.assert_array_equal(HashedCrossing(bins)((a, b, c)), want)


def test_inside_tf_data():
    tf = pytest.importorskip("tensorflow")
    layer = HashedCrossing(num_bins=5)
    ds = tf.data.Dataset.from_tensor_slices((F1, F2)).batch(5).map(lambda x, y: layer((x, y)))
    np.testing.assert_array_equal(next(iter(ds)).numpy(), [1, 4, 1, 1, 3])


def test_matches_keras_layer():
    keras = pytest.importorskip("keras")
    pytest.importorskip("tensorflow")  # Keras' layer wraps TensorFlow's op
    a, b = RNG.choice(WORDS, 30), RNG.integers(0, 10**6, 30)
    for mode in ("int", "one_hot"):
        want = keras.ops.convert_to_numpy(
            keras.layers.HashedCrossing(num_bins=11, output_mode=mode)((a, b)))
        np.testing.assert_array_equal(HashedCrossing(11, output_mode=mode)((a, b)), want)


def test_errors_and_config():
    with pytest.raises(ValueError, match="HashedCrossing should be called on a list or tuple"):
        HashedCrossing(3)(F1)
    with pytest.raises(ValueError, match="at least two inputs; received 1"):
        HashedCrossing(3)([F1])
    with pytest.raises(ValueError, match=r"equal shapes; received \[\(5,\), \(4,\)\]"):
        HashedCrossing(3)((F1, F2[:4]))
    with pytest.raises(ValueError, match=r"shape \(\), \(batch_size\) or \(batch_size, 1\)"):
        HashedCrossing(3)((np.zeros((2, 2), "int64"), np.zeros((2, 2), "int64")))
    with pytest.raises(ValueError, match="integer or string dtype, received dtype float32"):
        HashedCrossing(3)((F1, np.zeros(5, "float32")))
    with pytest.raises(ValueError, match="num_bins must be a positive int"):
        HashedCrossing(0)
    with pytest.raises(TypeError, match="prepares data on the host"):
        HashedCrossing(3)((kiln.Input((1,), dtype="int64"), kiln.Input((1,), dtype="int64")))
    layer = HashedCrossing(9, output_mode="one_hot", name="cross")
    cfg = layer.get_config()
    assert (cfg["num_bins"], cfg["output_mode"], cfg["sparse"]) == (9, "one_hot", False)
    again = HashedCrossing.from_config(cfg)
    np.testing.assert_array_equal(again((F1, F2)), layer((F1, F2)))
