"""Autodiff beyond single ops: fan-in, un-broadcasting, unreachable inputs, Hessian-vector
products (grad of grad) against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K


def _run(inputs, outputs, *feeds):
    return kiln.function(inputs, outputs, backend="reference")(*feeds)


def test_fan_in_sums_and_unbroadcast():
    x = kiln.placeholder((3, 4), "float64")
    b = kiln.placeholder((4,), "float64")
    y = K.sum(x * b + b * b)
    gx, gb = kiln.grad(y, [x, b])
    assert gx.shape == (3, 4) and gb.shape == (4,)
    xv = np.arange(12.0).reshape(3, 4)
    bv = np.array([1.0, -2.0, 3.0, 0.5])
    gxv, gbv = _run([x, b], [gx, gb], xv, bv)
    np.testing.assert_allclose(gxv, np.broadcast_to(bv, (3, 4)))
    np.testing.assert_allclose(gbv, xv.sum(0) + 3 * 2 * bv)


def test_unbroadcast_keeps_size_one_axes():
    x = kiln.placeholder((3, 1), "float64")
    y = kiln.placeholder((1, 4), "float64")
    gx, gy = kiln.grad(K.sum(x * y), [x, y])
    xv, yv = np.ones((3, 1)) * 2, np.arange(4.0).reshape(1, 4)
    a, b = _run([x, y], [gx, gy], xv, yv)
    np.testing.assert_allclose(a, np.full((3, 1), yv.sum()))
    np.testing.assert_allclose(b, np.full((1, 4), 6.0))


def test_unreachable_input_gets_zeros_and_batch_dims_work():
    x = kiln.placeholder((None, 2), "float64")
    z = kiln.placeholder((None, 2), "float64")
    (g,) = kiln.grad(K.mean(K.square(x)), [z])
    out = _run([x, z], g, np.ones((5, 2)), np.ones((5, 2)))
    np.testing.assert_array_equal(out, np.zeros((5, 2)))
    (gx,) = kiln.grad(K.mean(K.square(x)), [x])
    xv = np.arange(10.0).reshape(5, 2)
    np.testing.assert_allclose(_run([x], gx, xv), 2 * xv / 10)


def test_grad_with_respect_to_variable_and_seed():
    w = kiln.Variable(np.array([[1.0, 2.0], [3.0, 4.0]]), dtype="float64")
    x = kiln.placeholder((None, 2), "float64")
    y = x @ w
    seed = np.array([[1.0, 0.0]])
    (gw,) = kiln.grad(y, [w], seed=kiln.placeholder((1, 2), "float64"))
    ph_seed = [n for n in kiln.core.toposort([gw]) if n.op == "placeholder" and n is not x][0]
    out = _run([x, ph_seed], gw, np.array([[5.0, 7.0]]), seed)
    np.testing.assert_allclose(out, np.array([[5.0, 0.0], [7.0, 0.0]]))


def test_hessian_vector_product_matches_finite_differences():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 4))
    x = kiln.placeholder((4,), "float64")
    v = kiln.placeholder((4,), "float64")
    f = K.sum(K.tanh(K.matmul(a, x)) ** 2) + K.sum(K.exp(x * 0.3) * K.sin(x))
    (g,) = kiln.grad(f, [x])
    (hv,) = kiln.grad(K.sum(g * v), [x])
    grad_fn = kiln.function([x], g, backend="reference")
    hvp_fn = kiln.function([x, v], hv, backend="reference")
    xv, vv = rng.normal(size=4), rng.normal(size=4)
    eps = 1e-5
    numeric = (grad_fn(xv + eps * vv) - grad_fn(xv - eps * vv)) / (2 * eps)
    np.testing.assert_allclose(hvp_fn(xv, vv), numeric, rtol=1e-6, atol=1e-8)


def test_grad_rejects_integer_tensors():
    i = kiln.placeholder((3,), "int32")
    with pytest.raises(TypeError, match="grad"):
        kiln.grad(K.sum(K.cast(i, "float32")), [i])
