"""Ops given one array where NumPy takes a sequence (``stack(a)``, ``concatenate(a)``), an
array fill value or an array of repeats, eager and symbolic, against NumPy; and a symbolic
tensor handed to NumPy or TensorFlow raises an error naming the call and the kiln.ops
equivalent."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ops

A = np.arange(6, dtype="float32").reshape(2, 3)
B = np.arange(12, dtype="float32").reshape(2, 2, 3)


@pytest.mark.parametrize("fn, ref", [
    (lambda a: ops.stack(a), lambda a: np.stack(a)),
    (lambda a: ops.stack(a, axis=1), lambda a: np.stack(a, axis=1)),
    (lambda a: ops.stack([a, 2 * a], axis=-1), lambda a: np.stack([a, 2 * a], axis=-1)),
    (lambda a: ops.concatenate(a), lambda a: np.concatenate(a)),
    (lambda a: ops.full_like(a, np.array([1.0, 2.0, 3.0], "float32")),
     lambda a: np.full_like(a, np.array([1.0, 2.0, 3.0]))),
    (lambda a: ops.tile(a, np.array([2, 1])), lambda a: np.tile(a, np.array([2, 1]))),
    (lambda a: ops.where(a > 2, a, -a), lambda a: np.where(a > 2, a, -a)),
])
@pytest.mark.parametrize("arr", [A, B], ids=["2d", "3d"])
def test_eager_and_symbolic_match_numpy(fn, ref, arr):
    want = ref(arr)
    got = fn(arr)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, want)
    # symbolic: a placeholder of the array's static shape, compiled and run
    x = kiln.core.placeholder(arr.shape, "float32")
    node = fn(x)
    assert isinstance(node, kiln.Node) and node.shape == want.shape
    np.testing.assert_allclose(kiln.function([x], [node])(arr)[0], want)


def test_stack_of_one_tensor_with_unknown_first_dim_is_a_clear_error():
    with pytest.raises(ValueError, match=r"stack: given one tensor of shape \(None, 3\)"):
        ops.stack(kiln.Input((3,)))


def test_numpy_conversion_of_a_symbolic_tensor_is_a_clear_error():
    x = kiln.Input((3,))
    with pytest.raises(TypeError, match=r"np.asarray.*symbolic kiln tensor"):
        np.asarray(x)
    with pytest.raises(TypeError, match=r"numpy.mean\(\) was given a symbolic kiln tensor.*"
                                        r"use kiln.ops.mean"):
        np.mean(x)


@pytest.mark.parametrize("call, name, hint", [
    (lambda tf, x: tf.reshape(x, (-1, 3)), "reshape", "kiln.ops.reshape"),
    (lambda tf, x: tf.shape(x), "shape", "kiln.ops.shape"),
    (lambda tf, x: tf.image.resize(x, (4, 4)), "resize_images", "kiln.ops.image.resize"),
    (lambda tf, x: tf.concat([x, x], 0), "concat", "kiln.ops.concatenate"),
    (lambda tf, x: tf.reduce_sum(x), "reduce_sum", "kiln.ops.sum"),
])
def test_tensorflow_op_on_a_symbolic_tensor_names_the_call(call, name, hint):
    tf = pytest.importorskip("tensorflow")
    x = kiln.Input((8, 8, 3))
    with pytest.raises(TypeError) as info:
        call(tf, x)
    msg = str(info.value)
    assert f"TensorFlow's {name}() was given a symbolic kiln tensor" in msg
    assert f"use {hint} instead" in msg


def test_tensorflow_op_inside_a_lambda_layer_names_the_call():
    tf = pytest.importorskip("tensorflow")
    x = kiln.Input((4,))
    with pytest.raises(TypeError, match=r"TensorFlow's reshape\(\) was given"):
        kiln.layers.Lambda(lambda t: tf.reshape(t, (-1, 2, 2)))(x)


A3 = np.arange(6, dtype="float32").reshape(2, 3)


@pytest.mark.parametrize("fn, ref", [
    (lambda a: ops.reshape(a, np.array([3, 2])), lambda a: np.reshape(a, (3, 2))),
    (lambda a: ops.pad(a, np.array([[1, 0], [0, 1]])), lambda a: np.pad(a, [[1, 0], [0, 1]])),
    (lambda a: ops.transpose(a, np.array([1, 0])), lambda a: a.T),
    (lambda a: ops.sum(a, axis=np.int64(0)), lambda a: a.sum(0)),
    (lambda a: ops.sum(a, axis=np.array([0, 1]), keepdims=np.bool_(True)),
     lambda a: a.sum((0, 1), keepdims=True)),
    (lambda a: ops.expand_dims(a, np.int64(0)), lambda a: a[None]),
    (lambda a: ops.squeeze(a[None], np.int64(0)), lambda a: a),
    (lambda a: ops.repeat(a, np.int64(2), axis=0), lambda a: np.repeat(a, 2, axis=0)),
    (lambda a: ops.split(a, np.int64(3), axis=1)[1], lambda a: np.split(a, 3, axis=1)[1]),
    (lambda a: ops.tile(a, (np.int64(2), 1)), lambda a: np.tile(a, (2, 1))),
    (lambda a: ops.broadcast_to(a[0], np.array([2, 3])), lambda a: np.broadcast_to(a[0], (2, 3))),
    (lambda a: ops.argmax(a, axis=np.int64(1)), lambda a: a.argmax(1)),
    (lambda a: ops.take(a, np.array([1, 0]), axis=np.int64(1)),
     lambda a: np.take(a, [1, 0], axis=1)),
    (lambda a: ops.one_hot(np.array([0, 2]), np.int64(3)), lambda a: np.eye(3)[[0, 2]]),
])
def test_numpy_integers_for_structural_arguments(fn, ref):
    # an axis / shape / repeats given as a NumPy integer is a value, not a tensor to feed
    got, want = fn(A3), ref(A3)
    assert np.shape(got) == want.shape
    np.testing.assert_allclose(got, want)
