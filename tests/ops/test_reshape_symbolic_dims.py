"""``ops.reshape`` / ``ops.broadcast_to`` with ``ops.shape(x)[i]`` (a run-time dimension) in
the shape, as Keras code writes them (keras.io's CCT: ``ops.broadcast_to(table,
ops.shape(inputs))``; ``ops.reshape(x, (batch_size, -1, d))``). NumPy is the oracle."""

import numpy as np
import pytest

import kiln as keras
from kiln import ops


def _run(build, *arrays):
    inputs = [keras.Input(a.shape[1:]) for a in arrays]
    model = keras.Model(inputs, build(*inputs))
    return model.predict(list(arrays) if len(arrays) > 1 else arrays[0], verbose=0)


A = np.arange(2 * 4 * 6, dtype="float32").reshape(2, 4, 6)


def test_reshape_with_the_batch_dimension_and_minus_one():
    out = _run(lambda x: ops.reshape(x, (ops.shape(x)[0], -1, 2)), A)
    np.testing.assert_array_equal(out, A.reshape(2, -1, 2))


def test_reshape_with_every_dimension_given():
    def build(x):
        s = ops.shape(x)
        return ops.reshape(x, (s[0], s[1] * 6))  # s[1] is a Python int (static)
    np.testing.assert_array_equal(_run(build, A), A.reshape(2, 24))


def test_reshape_to_the_batch_dimension_of_another_input():
    b = np.ones((2, 5), "float32")
    out = _run(lambda x, y: ops.reshape(x, (ops.shape(y)[0], 4, 6, 1)), A, b)
    np.testing.assert_array_equal(out, A.reshape(2, 4, 6, 1))


def test_broadcast_to_a_symbolic_shape():
    table = np.arange(24, dtype="float32").reshape(4, 6)
    out = _run(lambda x: ops.broadcast_to(table, ops.shape(x)), A)
    np.testing.assert_array_equal(out, np.broadcast_to(table, A.shape))


def test_static_shapes_still_run_eagerly():
    np.testing.assert_array_equal(ops.reshape(np.arange(6), (3, 2)), np.arange(6).reshape(3, 2))
    np.testing.assert_array_equal(ops.broadcast_to(np.ones(3), (2, 3)), np.ones((2, 3)))


def test_an_unresolvable_minus_one_names_the_shapes():
    x, y = keras.Input((4, 6)), keras.Input((5,))
    with pytest.raises(TypeError, match=r"reshape: cannot infer the -1 of the shape .* for a "
                                        r"tensor of shape \(None, 4, 6\)"):
        ops.reshape(x, (ops.shape(y)[0], -1))
