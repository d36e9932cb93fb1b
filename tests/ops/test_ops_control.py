"""Issue 44, keras.ops core: loops, branches, scatters, slices, custom gradients, against Keras
3 and NumPy (eager and compiled graph), with the errors a static graph owes its users."""

from __future__ import annotations

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops
from test_ops_numpy import check

import kiln
import kiln.ops as K

rng = np.random.default_rng(13)
X = rng.normal(size=(6, 3)).astype("float32")
IDX = np.array([[0, 1], [2, 2], [0, 1], [3, 0]], "int32")
VALS = rng.normal(size=(4,)).astype("float32")


def _k(name, *arrays, **kw):
    return (lambda *a: getattr(K, name)(*a, **kw),
            lambda ko: lambda *a: getattr(ko, name)(*a, **kw), list(arrays))


CASES = {
    "associative_scan_add": (lambda x: K.associative_scan(lambda a, b: a + b, x),
                             lambda ko: lambda x: ko.associative_scan(lambda a, b: a + b, x),
                             [X]),
    "associative_scan_max_rev_axis1": (
        lambda x: K.associative_scan(K.maximum, x, reverse=True, axis=1),
        lambda ko: lambda x: ko.associative_scan(ko.maximum, x, reverse=True, axis=1), [X]),
    "associative_scan_pair": (
        lambda a, b: K.associative_scan(lambda p, q: (p[0] * q[0], p[1] * q[0] + q[1]),
                                        (a, b)),
        lambda ko: lambda a, b: ko.associative_scan(
            lambda p, q: (p[0] * q[0], p[1] * q[0] + q[1]), (a, b)), [X[:5], X[1:]]),
    "scatter": _k("scatter", IDX, VALS, shape=(4, 3)),
    "scatter_rows": _k("scatter", IDX[:, :1], X[:4], shape=(5, 3)),
    "scatter_update": _k("scatter_update", X, np.array([[1, 2], [4, 0]], "int32"),
                         VALS[:2]),
    "scatter_update_add": _k("scatter_update", X, IDX, VALS, reduction="add"),
    "scatter_update_max": _k("scatter_update", X, IDX, VALS, reduction="max"),
    "scatter_update_mul": _k("scatter_update", X, IDX, VALS, reduction="mul"),
    "slice_update": (lambda x, u: K.slice_update(x, (2, 1), u),
                     lambda ko: lambda x, u: ko.slice_update(x, (2, 1), u),
                     [X, np.ones((3, 2), "float32")]),
    "unstack": _k("unstack", X, axis=1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(name):
    ko = keras_ops()
    fn, kfn, arrays = CASES[name]
    check_keras(fn, kfn(ko), *arrays)


def test_loops_eager_and_graph():
    ko = keras_ops()
    body = lambda i, v: v * 2.0 + K.cast(i, "float32")  # noqa: E731
    want = np.asarray(ko.fori_loop(1, 5, lambda i, v: v * 2.0 + i, X))
    check(lambda x: K.fori_loop(1, 5, body, x), lambda x: want, X)
    want = np.stack([np.sum(r ** 2) for r in X])
    check(lambda x: K.map(lambda r: K.sum(r * r), x), lambda x: want, X)
    check(lambda x: K.vectorized_map(lambda r: K.sum(r * r), x), lambda x: want, X)
    # while_loop: eager Python loop; symbolic: maximum_iterations steps, frozen when done
    cond = lambda i, v: i < 3  # noqa: E731
    step = lambda i, v: (i + 1, v * 2.0)  # noqa: E731
    i, v = K.while_loop(cond, step, (np.int32(0), X))
    assert int(i) == 3
    np.testing.assert_allclose(v, X * 8)
    pi, pv = kiln.placeholder((), "int32"), kiln.placeholder((6, 3))
    gi, gv = kiln.function([pi, pv], list(K.while_loop(cond, step, (pi, pv),
                                                        maximum_iterations=10)))(np.int32(0), X)
    assert int(gi) == 3
    np.testing.assert_allclose(gv, X * 8)
    single = K.while_loop(lambda v: K.sum(v) < 100.0, lambda v: v + 1.0, np.float32(0.5))
    np.testing.assert_allclose(single, ko.while_loop(lambda v: v < 100.0, lambda v: v + 1.0,
                                                     np.float32(0.5)))


def test_switch():
    branches = [lambda a: a + 1.0, lambda a: a * 10.0, lambda a: -a]
    for i in (-3, 0, 1, 2, 7):  # clamped, as in Keras
        want = branches[min(max(i, 0), 2)](X)
        np.testing.assert_allclose(K.switch(i, branches, X), want)
        q = kiln.placeholder((), "int32")
        np.testing.assert_allclose(kiln.function([q], K.switch(q, branches, K.constant(X)))(
            np.int32(i)), want)
    q = kiln.placeholder((), "int32")
    with pytest.raises(ValueError, match="switch: on a symbolic index every branch"):
        K.switch(q, [lambda: K.constant(X), lambda: K.constant(X[:2])])


def test_custom_gradient():
    @K.custom_gradient
    def log1pexp(x):
        e = K.exp(x)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return K.multiply(upstream, 1.0 - 1.0 / K.add(1, e))
        return K.log(1 + e), grad

    @K.custom_gradient
    def clipped_identity(x):
        return x, lambda up: K.clip(up, -0.1, 0.1)

    x = np.array([-3.0, 0.0, 2.0, 100.0])
    np.testing.assert_allclose(log1pexp(x[:3]), np.log1p(np.exp(x[:3])), rtol=1e-6)
    p = kiln.placeholder((4,), "float64")
    (g,) = kiln.grad(K.sum(log1pexp(p)), [p])
    np.testing.assert_allclose(kiln.function([p], g)(x), 1 / (1 + np.exp(-x)))  # no NaN at 100
    check_grad(log1pexp, x[:3])
    (g,) = kiln.grad(K.sum(clipped_identity(p) * K.constant(np.array([5.0, -5, 0.05, 1]))),
                     [p])
    np.testing.assert_allclose(kiln.function([p], g)(x), [0.1, -0.1, 0.05, 0.1])


def test_gradients_through_loops_and_scatters():
    check_grad(lambda x: K.associative_scan(lambda a, b: a * b, x), X[:5] + 2)
    check_grad(lambda v: K.scatter(IDX, v, (4, 3)), VALS)
    check_grad(lambda x, u: K.slice_update(x, (1, 0), u), X, np.ones((2, 3)))
    check_grad(lambda u, x: K.slice_update(x, (1, 0), u), np.ones((2, 3)), X)
    check_grad(lambda x: K.fori_loop(0, 3, lambda i, v: v * v * 0.5 + v, x), X * 0.3)
    check_grad(lambda x: K.map(lambda r: K.sum(K.sin(r)), x), X)


def test_saturate_cast():
    """Keras' rule: clip to the largest float32 below 2**31 (Keras 3.15's NumPy backend misses
    that nudge, comparing in float32, and overflows to -2**31)."""
    x = np.array([-1e10, 3e9, 5.5, -7.9, np.inf], "float32")
    check(lambda v: K.saturate_cast(v, "int32"),
          lambda v: np.array([-2**31, 2147483520, 5, -7, 2147483520], "int32"), x)
    np.testing.assert_array_equal(K.saturate_cast(np.array([-3e39, 2.0]), "float32"),
                                  np.array([np.finfo("float32").min, 2.0], "float32"))


def test_utilities_and_errors():
    assert K.dtype(X) == "float32" and K.dtype(kiln.placeholder((2,), "int32")) == "int32"
    assert K.is_tensor(X) and K.is_tensor(kiln.placeholder((2,))) and not K.is_tensor(3.0)
    with pytest.raises(ValueError, match="while_loop: on symbolic values maximum_iterations"):
        K.while_loop(lambda v: K.sum(v) < 1.0, lambda v: v + 1.0, kiln.placeholder((2,)))
    with pytest.raises(ValueError, match="slice_update: updates \\(3, 3\\) at \\[4, 0\\]"):
        K.slice_update(X, (4, 0), np.ones((3, 3), "float32"))
    with pytest.raises(ValueError, match="fori_loop: symbolic bounds are not supported"):
        K.fori_loop(0, kiln.placeholder((), "int32"), lambda i, v: v, kiln.placeholder((2,)))
    with pytest.raises(ValueError, match="scatter_update: unsupported reduction 'pow'"):
        K.scatter_update(X, IDX, VALS, reduction="pow")
