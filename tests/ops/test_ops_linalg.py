"""Issue 44, keras.ops.linalg: kiln.ops.linalg against Keras 3 (eager and compiled graph) and
NumPy, gradients of the composites against finite differences, jvp against closed forms.
(The primitives' own forward, gradient and backend checks are registry-driven:
kiln/core/ops/linalg_host.py's examples.)"""

from __future__ import annotations

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops
from test_ops_numpy import check

import kiln
import kiln.ops as K

rng = np.random.default_rng(5)
A = rng.normal(size=(2, 4, 4)).astype("float32") + 3 * np.eye(4, dtype="float32")
SPD = (A @ A.transpose(0, 2, 1) + np.eye(4, dtype="float32")).astype("float32")
B = rng.normal(size=(2, 4, 3)).astype("float32")
V = rng.normal(size=(2, 4)).astype("float32")
R = rng.normal(size=(5, 3)).astype("float32")

CASES = {
    "cholesky": (K.cholesky, lambda ko: ko.linalg.cholesky, [SPD]),
    "cholesky_upper": (lambda x: K.cholesky(x, upper=True),
                       lambda ko: lambda x: ko.linalg.cholesky(x, upper=True), [SPD]),
    "cholesky_inverse": (K.cholesky_inverse, lambda ko: lambda f: np.linalg.inv(
        f @ np.swapaxes(f, -1, -2)), [np.linalg.cholesky(SPD)]),
    "cholesky_inverse_upper": (lambda f: K.cholesky_inverse(f, upper=True),
                               lambda ko: lambda f: np.linalg.inv(np.swapaxes(f, -1, -2) @ f),
                               [np.swapaxes(np.linalg.cholesky(SPD), -1, -2).copy()]),
    "det": (K.det, lambda ko: ko.linalg.det, [A]),
    "inv": (K.inv, lambda ko: ko.linalg.inv, [A]),
    "solve": (K.solve, lambda ko: ko.linalg.solve, [A, B]),
    "solve_vector": (K.solve, lambda ko: ko.linalg.solve, [A[0], V[0]]),
    "solve_triangular_lower": (lambda a, b: K.solve_triangular(a, b, lower=True),
                               lambda ko: lambda a, b: ko.linalg.solve_triangular(a, b, True),
                               [A, B]),
    "solve_triangular_upper": (K.solve_triangular,
                               lambda ko: ko.linalg.solve_triangular, [A, B]),
    "eigh_values": (lambda x: K.eigh(x)[0], lambda ko: lambda x: ko.linalg.eigh(x)[0], [SPD]),
    "svd_values": (lambda x: K.svd(x, compute_uv=False),
                   lambda ko: lambda x: ko.linalg.svd(x, compute_uv=False), [R]),
    "pinv": (K.pinv, lambda ko: ko.linalg.pinv, [R]),
    "lstsq": (K.lstsq, lambda ko: ko.linalg.lstsq, [R, rng.normal(size=(5, 2)).astype("f4")]),
    "lstsq_vector": (K.lstsq, lambda ko: ko.linalg.lstsq, [R, rng.normal(size=5).astype("f4")]),
    "matrix_rank": (K.matrix_rank, lambda ko: ko.linalg.matrix_rank,
                    [np.array([[1, 2, 3], [2, 4, 6], [0, 1, 1]], "float32")]),
    "lu_factor": (K.lu_factor, lambda ko: ko.linalg.lu_factor, [A[0]]),
    "norm_fro": (lambda x: K.linalg.norm(x, "fro", axis=(-2, -1)),
                 lambda ko: lambda x: ko.linalg.norm(x, "fro", axis=(-2, -1)), [A]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(name):
    ko = keras_ops()
    fn, kfn, arrays = CASES[name]
    check_keras(fn, kfn(ko), *arrays, rtol=2e-4, atol=2e-5)


def test_decompositions_reconstruct():
    """Factor products give the matrix back (eigenvector signs and orders are LAPACK's)."""
    w, v = K.eigh(SPD)
    np.testing.assert_allclose((v * w[:, None, :]) @ np.swapaxes(v, -1, -2), SPD, rtol=1e-4,
                               atol=1e-4)
    for mode in ("reduced", "complete"):
        q, r = K.qr(R, mode=mode)
        want_q, want_r = np.linalg.qr(R, mode=mode)
        np.testing.assert_allclose(q, want_q, atol=1e-5)
        np.testing.assert_allclose(q @ r, R, atol=1e-5)
    for full in (True, False):
        u, s, vh = K.svd(R, full_matrices=full)
        assert u.shape == ((5, 5) if full else (5, 3))
        np.testing.assert_allclose((u[:, :3] * s) @ vh[:3], R, atol=1e-5)
    lu, piv = K.lu_factor(A[0].astype("float64"))
    perm = np.arange(4)
    for i, p in enumerate(piv):
        perm[[i, p]] = perm[[p, i]]
    low = np.tril(lu, -1) + np.eye(4)
    np.testing.assert_allclose(low @ np.triu(lu), A[0][perm], atol=1e-5)
    assert piv.dtype == np.int32


def test_graph_mode_tuple_outputs():
    x = kiln.placeholder((None, 4, 4))
    w, v = K.eigh(x)
    got = kiln.function([x], [w, v])(SPD)
    np.testing.assert_allclose(got[0], np.linalg.eigh(SPD)[0], rtol=1e-5)


@pytest.mark.parametrize("ord_", [2, -2, "nuc", "fro", 1, None])
def test_matrix_norms(ord_):
    check(lambda x: K.linalg.norm(x, ord_, axis=(0, 2)),
          lambda x: np.linalg.norm(x.transpose(1, 0, 2), ord_, axis=(1, 2)).astype("f4"), A,
          rtol=1e-5, atol=1e-5)
    check(lambda x: K.linalg.norm(x, ord_, axis=(-2, -1), keepdims=True),
          lambda x: np.linalg.norm(x, ord_, axis=(-2, -1), keepdims=True).astype("f4"), A,
          rtol=1e-5, atol=1e-5)
    if ord_ is not None:
        check_grad(lambda x: K.linalg.norm(x, ord_), R)


GRADS = {
    "cholesky_upper": (lambda x: K.cholesky(x, upper=True), [SPD[0]]),
    "cholesky_inverse": (K.cholesky_inverse, [np.linalg.cholesky(SPD[0])]),
    "solve_vector": (K.solve, [A[0], V[0]]),
    "solve_vector_b": (lambda b, a: K.solve(a, b), [V[0], A[0]]),
    "lstsq": (K.lstsq, [R, rng.normal(size=(5, 2))]),
    "matrix_functions": (lambda x: K.det(x) * K.sum(K.inv(x)), [A[1]]),
    "eigh_vectors_sign_free": (lambda x: K.eigh(x)[1] ** 2,
                               [np.diag([1.0, 2.5, 4.0]) + 0.1 * np.ones((3, 3))]),
    "qr_product": (lambda x: K.matmul(*K.qr(x)), [R]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradient_matches_finite_differences(name):
    fn, arrays = GRADS[name]
    check_grad(fn, *arrays, rtol=2e-4, atol=1e-5)


def test_jvp_closed_forms():
    x = rng.normal(size=(3,))
    t = rng.normal(size=(3,))
    out, jt = K.linalg.jvp(lambda v: K.sin(v) * v, (x,), (t,))
    np.testing.assert_allclose(out, np.sin(x) * x)
    np.testing.assert_allclose(jt, (np.cos(x) * x + np.sin(x)) * t, rtol=1e-12)
    m = rng.normal(size=(2, 3))
    out, jt, aux = K.jvp(lambda a, b: (K.matmul(a, b), 7), (m, x), (m * 0 + 1, t), has_aux=True)
    np.testing.assert_allclose(jt, np.ones((2, 3)) @ x + m @ t, rtol=1e-12)
    assert aux == 7
    check(lambda a, b: K.jvp(K.exp, (a,), (b,))[1], lambda a, b: np.exp(a) * b,
          x.astype("float32"), t.astype("float32"))


def test_errors():
    with pytest.raises(ValueError, match=r"det: expected square matrices, received shape "
                                         r"\(5, 3\)"):
        K.det(R)
    with pytest.raises(ValueError, match="qr: mode must be 'reduced' or 'complete'"):
        K.qr(R, mode="r")
    with pytest.raises(ValueError, match=r"solve: a \(2, 4, 4\) and b \(2, 3, 3\): 4 unknowns"):
        K.solve(A, B[:, :3])
    with pytest.raises(ValueError, match="svd: only the singular values are differentiable"):
        x = kiln.placeholder((3, 3))
        kiln.grad(K.sum(K.svd(x)[0]), [x])


def test_unfactorable_matrices_give_nan_and_ints_compute_in_float():
    """A matrix LAPACK cannot factor gives NaN in its place (JAX's convention), the others of
    the batch their values; integer matrices compute in float32 (Keras: floatx)."""
    a = np.stack([np.eye(3), np.ones((3, 3))]).astype("float32")
    inv = K.inv(a)
    np.testing.assert_array_equal(inv[0], np.eye(3))
    assert np.isnan(inv[1]).all()
    assert np.isnan(K.cholesky(a)[1]).all() and not np.isnan(K.cholesky(a)[0]).any()
    d = K.det(np.array([[1, 2], [3, 4]], "int32"))
    assert d.dtype == np.float32
    np.testing.assert_allclose(d, -2.0, rtol=1e-6)
