"""The core API on its own: placeholders, Variables, operators, kiln.function with updates."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K


def test_operators_with_numbers_and_arrays_on_both_sides():
    x = kiln.placeholder((None, 3))
    arr = np.array([1.0, 2.0, 3.0], "float32")
    exprs = [x + 1, 1 + x, x - arr, arr - x, 2 * x, x / 2, 2 / (x + 5), x ** 2, 2.0 ** x, -x,
             abs(x), x @ np.ones((3, 2), "float32"), np.ones((2, 2), "float32") @ x[:2, :2],
             x[:, 1], x[0], x[:, None, :], x.T]
    xv = np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]], "float32")
    expected = [xv + 1, 1 + xv, xv - arr, arr - xv, 2 * xv, xv / 2, 2 / (xv + 5), xv ** 2,
                2.0 ** xv, -xv, abs(xv), xv @ np.ones((3, 2)), np.ones((2, 2)) @ xv[:2, :2],
                xv[:, 1], xv[0], xv[:, None, :], xv.T]
    outs = kiln.function([x], exprs, backend="reference")(xv)
    for got, want, e in zip(outs, expected, exprs):
        assert got.dtype == np.float32, e
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str(e))
    cmp = kiln.function([x], [x < 0.5, x >= 0.5], backend="reference")(xv)
    np.testing.assert_array_equal(cmp[0], xv < 0.5)
    np.testing.assert_array_equal(cmp[1], xv >= 0.5)
    assert (x + 1).shape == (None, 3) and (x + 1).dtype == "float32"


def test_variable_numpy_assign_and_use_in_graph():
    v = kiln.Variable(np.zeros((2, 2)), name="v")
    assert v.dtype == "float32" and v.shape == (2, 2) and v.trainable
    v.assign(np.ones((2, 2)))
    np.testing.assert_array_equal(v.numpy(), np.ones((2, 2)))
    with pytest.raises(ValueError, match="'v'.*shape"):
        v.assign(np.ones(3))
    x = kiln.placeholder((2,))
    f = kiln.function([x], v @ x + v[0], backend="reference")
    np.testing.assert_allclose(f(np.array([1.0, 2.0])), [4.0, 4.0])
    v.assign(2 * np.ones((2, 2)))
    np.testing.assert_allclose(f(np.array([1.0, 2.0])), [8.0, 8.0])


def test_function_updates_use_old_values_and_return_single_or_list():
    a = kiln.Variable(np.array([1.0]))
    b = kiln.Variable(np.array([10.0]))
    x = kiln.placeholder((1,))
    f = kiln.function([x], a + x, updates=[(a, b), (b, a + b)], backend="reference")
    out = f(np.array([0.5]))
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, [1.5])
    np.testing.assert_allclose(a.numpy(), [10.0])
    np.testing.assert_allclose(b.numpy(), [11.0])
    g = kiln.function([x], [a + x], backend="reference")
    assert isinstance(g(np.array([0.0])), list)


def test_function_checks_feeds():
    x = kiln.placeholder((None, 3), name="x")
    f = kiln.function([x], x * 2, backend="reference")
    with pytest.raises(ValueError, match=r"input 0 \('x'\) expected shape \(None, 3\), "
                                         r"received \(2, 4\)"):
        f(np.ones((2, 4)))
    with pytest.raises(TypeError, match="expected 1 inputs, received 2"):
        f(np.ones((2, 3)), np.ones((2, 3)))
    i = kiln.placeholder((2,), "int32")
    g = kiln.function([i], i + 1, backend="reference")
    with pytest.raises(TypeError, match="expected dtype int32, received float64"):
        g(np.array([1.5, 2.5]))
    with pytest.raises(TypeError, match="must be a placeholder"):
        kiln.function([x * 2], x, backend="reference")


@pytest.mark.parametrize("shape, good, bad", [
    ((None, 3), [(2, 3), (7, 3)], [(2, 4), (3,), (2, 2, 3), ()]),
    ((4, 3), [(4, 3)], [(5, 3), (3,), (4, 3, 1)]),
    ((), [()], [(1,), (2,)]),
    ((None,), [(5,), (1,)], [(), (5, 1)]),
    ((2, None), [(2, 1), (2, 9)], [(3, 9), (2,)]),
])
def test_fed_arrays_are_checked_on_the_fast_path_too(shape, good, bad):
    """Arrays with the placeholder's dtype skip the conversion (every training step) but not
    the shape check; other inputs are converted (float64 -> float32, lists)."""
    x = kiln.placeholder(shape, "float32", name="x")
    f = kiln.function([x], x * 2.0)
    for s in good:
        a = np.arange(int(np.prod(s)), dtype="float32").reshape(s)
        np.testing.assert_array_equal(f(a), a * 2)
        np.testing.assert_array_equal(f(a.astype("float64")), a * 2)
        np.testing.assert_array_equal(f(a.tolist()), a * 2)
    for s in bad:
        with pytest.raises(ValueError, match=r"input 0 \('x'\) expected shape"):
            f(np.zeros(s, "float32"))


def test_mlp_trains_with_core_api_only():
    rng = np.random.default_rng(0)
    n, d, h, c = 512, 20, 64, 10
    centers = rng.normal(size=(c, d)) * 3
    labels = rng.integers(0, c, size=n)
    data = (centers[labels] + rng.normal(size=(n, d))).astype("float32")

    x = kiln.placeholder((None, d), name="x")
    y = kiln.placeholder((None,), "int32", name="y")
    w1 = kiln.Variable(rng.normal(size=(d, h)) * np.sqrt(2 / d), name="w1")
    b1 = kiln.Variable(np.zeros(h), name="b1")
    w2 = kiln.Variable(rng.normal(size=(h, c)) * np.sqrt(1 / h), name="w2")
    b2 = kiln.Variable(np.zeros(c), name="b2")
    logits = K.relu(x @ w1 + b1) @ w2 + b2
    loss = K.mean(K.sparse_softmax_cross_entropy(logits, y))
    params = [w1, b1, w2, b2]
    grads = kiln.grad(loss, params)
    lr = 0.1
    step = kiln.function([x, y], loss, updates=[(p, p - lr * g) for p, g in zip(params, grads)])
    evaluate = kiln.function([x, y], loss)
    first = float(evaluate(data, labels))
    assert first > 2.0
    for _ in range(60):
        for i in range(0, n, 64):
            step(data[i:i + 64], labels[i:i + 64])
    last = float(evaluate(data, labels))
    assert last < 0.1, (first, last)
