"""kiln.ops on NumPy arrays (eager) and on placeholders in a compiled function (graph), both
against a NumPy reference, with Keras' argument conventions."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K

rng = np.random.default_rng(0)
X = rng.normal(size=(3, 4)).astype("float32")
X64 = rng.normal(size=(2, 3, 4))
XN = np.array([[1.0, np.nan, -2.0, 0.0], [np.inf, -np.inf, 3.0, 0.5]], "float32")
XI = rng.integers(-5, 6, size=(3, 4)).astype("int32")
XS = np.array([[3.0, 1.0, 2.0, 1.0, -4.0], [0.5, 0.5, -1.0, 9.0, 2.0]], "float32")
B = X > 0


def _graph_dtype(a):
    return {"f": "float64" if a.dtype == np.float64 else "float32", "b": "bool",
            "i": "int64" if a.dtype.itemsize > 4 else "int32"}[a.dtype.kind]


def _compare(got, want, rtol, atol):
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple | list) and len(got) == len(want)
        for g, w in zip(got, want):
            _compare(g, w, rtol, atol)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype.kind == want.dtype.kind, (got.dtype, want.dtype)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check(fn, ref, *arrays, rtol=1e-5, atol=1e-6):
    """Eager on arrays, and graph (placeholders, compiled) against ``ref`` on the arrays."""
    want = ref(*arrays)
    got = fn(*arrays)
    assert not kiln.core.is_tensor(got)
    _compare(got, want, rtol, atol)
    phs = [kiln.placeholder(a.shape, _graph_dtype(a)) for a in arrays]
    out = fn(*phs)
    many = isinstance(out, tuple | list)
    f = kiln.function(phs, list(out) if many else out)
    _compare(type(want)(f(*arrays)) if many else f(*arrays), want, rtol, atol)


CASES = {
    # elementwise
    "abs": (K.abs, np.abs, [X]), "square": (K.square, np.square, [X]),
    "sqrt": (K.sqrt, np.sqrt, [np.abs(X)]), "log": (K.log, np.log, [np.abs(X) + 0.1]),
    "exp": (K.exp, np.exp, [X]), "floor": (K.floor, np.floor, [X * 3]),
    "ceil": (K.ceil, np.ceil, [X * 3]), "sign": (K.sign, np.sign, [XI]),
    "round": (K.round, np.round, [np.array([0.5, 1.5, 2.5, -0.5, 1.26], "float32")]),
    "round_decimals": (lambda x: K.round(x, decimals=1), lambda x: np.round(x, 1),
                       [np.array([1.26, -3.14], "float32")]),
    "maximum": (K.maximum, np.maximum, [X, X[:, ::-1].copy()]),
    "minimum": (K.minimum, np.minimum, [X, X[::-1].copy()]),
    "clip": (lambda x: K.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5), [X]),
    "where": (K.where, np.where, [B, X, -X]),
    "isnan": (K.isnan, np.isnan, [XN]), "isinf": (K.isinf, np.isinf, [XN]),
    "isfinite": (K.isfinite, np.isfinite, [XN]), "isnan_int": (K.isnan, np.isnan, [XI]),
    "logical_and": (K.logical_and, np.logical_and, [B, X > 0.5]),
    "logical_or": (K.logical_or, np.logical_or, [B, X > 0.5]),
    "logical_xor": (K.logical_xor, np.logical_xor, [B, X > 0.5]),
    "logical_not": (K.logical_not, np.logical_not, [B]),
    "greater": (K.greater, np.greater, [X, X.T.reshape(3, 4)]),
    "less_equal": (K.less_equal, np.less_equal, [XI, XI[::-1].copy()]),
    "equal": (K.equal, np.equal, [XI, XI[::-1].copy()]),
    "cast": (lambda x: K.cast(x, "int32"), lambda x: x.astype("int32"), [X * 4]),
    # reductions, axis conventions
    "sum_none": (K.sum, np.sum, [X]),
    "sum_neg_axis_keep": (lambda x: K.sum(x, axis=-1, keepdims=True),
                          lambda x: np.sum(x, -1, keepdims=True), [X64]),
    "mean_tuple": (lambda x: K.mean(x, axis=(0, 2)), lambda x: np.mean(x, (0, 2)), [X64]),
    "max": (lambda x: K.max(x, axis=0), lambda x: np.max(x, 0), [X]),
    "min_initial": (lambda x: K.min(x, axis=1, initial=-0.1),
                    lambda x: np.min(x, 1, initial=-0.1), [X]),
    "argmax_none": (K.argmax, np.argmax, [X]),
    "argmax_axis": (lambda x: K.argmax(x, axis=-1), lambda x: np.argmax(x, -1), [X64]),
    "var": (lambda x: K.var(x, axis=1), lambda x: np.var(x, 1), [X64]),
    "std_keep": (lambda x: K.std(x, axis=None, keepdims=True),
                 lambda x: np.std(x, keepdims=True), [X]),
    "any": (lambda x: K.any(x, axis=0), lambda x: np.any(x, 0), [XN]),
    "all": (lambda x: K.all(x, axis=1), lambda x: np.all(x, 1), [XI]),
    "norm": (K.norm, np.linalg.norm, [X]),
    "norm_axis": (lambda x: K.norm(x, axis=-1, keepdims=True),
                  lambda x: np.linalg.norm(x, axis=-1, keepdims=True), [X64]),
    "norm_l1": (lambda x: K.norm(x, ord=1, axis=0), lambda x: np.linalg.norm(x, 1, 0), [X]),
    "norm_inf_matrix": (lambda x: K.norm(x, ord=np.inf),
                        lambda x: np.linalg.norm(x, np.inf), [X]),
    "norm_fro": (lambda x: K.norm(x, ord="fro", axis=(1, 2)),
                 lambda x: np.linalg.norm(x, "fro", (1, 2)), [X64]),
    # scans and sorting
    "cumsum": (lambda x: K.cumsum(x, axis=1), lambda x: np.cumsum(x, 1), [X64]),
    "cumsum_flat": (K.cumsum, np.cumsum, [XI]),
    "cumprod": (lambda x: K.cumprod(x, axis=0), lambda x: np.cumprod(x, 0), [X]),
    "sort": (K.sort, np.sort, [XS]),
    "sort_axis0_nan": (lambda x: K.sort(x, axis=0), lambda x: np.sort(x, 0), [XN]),
    "argsort": (K.argsort, lambda x: np.argsort(x, kind="stable"), [XS]),
    "argsort_int": (lambda x: K.argsort(x, axis=0),
                    lambda x: np.argsort(x, 0, kind="stable"), [XI]),
    "top_k": (lambda x: K.top_k(x, 3),
              lambda x: (np.take_along_axis(x, np.argsort(-x, kind="stable")[:, :3], 1),
                         np.argsort(-x, kind="stable")[:, :3].astype("int32")), [XS]),
    # shapes
    "tile": (lambda x: K.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)), [X]),
    "tile_int": (lambda x: K.tile(x, 2), lambda x: np.tile(x, 2), [XI]),
    "repeat": (lambda x: K.repeat(x, 2, axis=1), lambda x: np.repeat(x, 2, 1), [X]),
    "repeat_flat": (lambda x: K.repeat(x, 3), lambda x: np.repeat(x, 3), [XI]),
    "repeat_list": (lambda x: K.repeat(x, [1, 0, 2], axis=0),
                    lambda x: np.repeat(x, [1, 0, 2], 0), [X]),
    "tril": (K.tril, np.tril, [X]), "triu_k": (lambda x: K.triu(x, 1),
                                               lambda x: np.triu(x, 1), [X64]),
    "flip_none": (K.flip, np.flip, [X]), "flip_axis": (lambda x: K.flip(x, axis=-1),
                                                       lambda x: np.flip(x, -1), [X64]),
    "reshape": (lambda x: K.reshape(x, (4, -1)), lambda x: x.reshape(4, -1), [X]),
    "transpose": (lambda x: K.transpose(x, axes=(2, 0, 1)),
                  lambda x: np.transpose(x, (2, 0, 1)), [X64]),
    "transpose_none": (K.transpose, np.transpose, [X64]),
    "expand_dims": (lambda x: K.expand_dims(x, -1), lambda x: np.expand_dims(x, -1), [X]),
    "squeeze": (lambda x: K.squeeze(x, 1), lambda x: np.squeeze(x, 1), [X[:, :1].copy()]),
    "concatenate": (lambda a, b: K.concatenate([a, b], axis=-1),
                    lambda a, b: np.concatenate([a, b], -1), [X, X * 2]),
    "stack": (lambda a, b: K.stack([a, b], axis=1), lambda a, b: np.stack([a, b], 1), [X, X]),
    "split_sections": (lambda x: K.split(x, 2, axis=1), lambda x: np.split(x, 2, 1), [X]),
    "split_indices": (lambda x: K.split(x, [1, 3], axis=1),
                      lambda x: np.split(x, [1, 3], 1), [X]),
    "take_flat": (lambda x, i: K.take(x, i), np.take,
                  [X, np.array([[0, 11], [5, 3]], "int32")]),
    "take_axis": (lambda x, i: K.take(x, i, axis=1), lambda x, i: np.take(x, i, 1),
                  [X, np.array([3, 0], "int32")]),
    "take_along_axis": (lambda x, i: K.take_along_axis(x, i, axis=1),
                        lambda x, i: np.take_along_axis(x, i, 1),
                        [X, np.array([[0, 3], [1, -1], [2, 2]], "int32")]),
    "slice_keras": (lambda x: K.slice(x, (1, 1), (2, 2)), lambda x: x[1:3, 1:3], [X]),
    "pad": (lambda x: K.pad(x, ((1, 0), (2, 1))),
            lambda x: np.pad(x, ((1, 0), (2, 1))), [X]),
    "pad_value": (lambda x: K.pad(x, 1, constant_values=5),
                  lambda x: np.pad(x, 1, constant_values=5), [X]),
    # products
    "matmul": (K.matmul, np.matmul, [X, X.T.copy()]),
    "matmul_vec": (K.matmul, np.matmul, [X, X[0].copy()]),
    "matmul_batch": (K.matmul, np.matmul, [X64, np.transpose(X64, (0, 2, 1)).copy()]),
    "dot_vec": (K.dot, np.dot, [X[0].copy(), X[1].copy()]),
    "dot_nd": (K.dot, np.dot, [X64, rng.normal(size=(5, 4, 2))]),
    "einsum": (lambda a, b: K.einsum("ij,kj->ik", a, b),
               lambda a, b: np.einsum("ij,kj->ik", a, b), [X, X]),
    "ones_like": (K.ones_like, np.ones_like, [XI]),
    "expm1": (K.expm1, np.expm1, [X]), "log1p": (K.log1p, np.log1p, [np.abs(X)]),
    "sin": (K.sin, np.sin, [X]), "cos": (K.cos, np.cos, [X]),
    "rsqrt": (K.rsqrt, lambda x: 1 / np.sqrt(x), [np.abs(X) + 0.1]),
    "reciprocal": (K.reciprocal, np.reciprocal, [X + 3]),
    "negative": (K.negative, np.negative, [XI]),
    "add": (K.add, np.add, [X, X[:1].copy()]), "subtract": (K.subtract, np.subtract, [XI, XI]),
    "multiply": (K.multiply, np.multiply, [X, X]),
    "divide": (K.divide, np.divide, [X, X + 3]),
    "power": (K.power, np.power, [np.abs(X) + 0.5, X]),
    "not_equal": (K.not_equal, np.not_equal, [XI, XI[::-1].copy()]),
    "less": (K.less, np.less, [X, X[::-1].copy()]),
    "greater_equal": (K.greater_equal, np.greater_equal, [XI, XI[::-1].copy()]),
    "prod": (lambda x: K.prod(x, axis=1), lambda x: np.prod(x, 1), [X]),
    "logsumexp": (lambda x: K.logsumexp(x, axis=0),
                  lambda x: np.log(np.sum(np.exp(x), 0)), [X]),
    "argmin": (lambda x: K.argmin(x, axis=0), lambda x: np.argmin(x, 0), [X]),
    "identity_of_tensor": (K.identity, np.array, [X]),
    "zeros_like_dtype": (lambda x: K.zeros_like(x, dtype="int32"),
                         lambda x: np.zeros_like(x, dtype="int32"), [X]),
    "full_like": (lambda x: K.full_like(x, 2.5), lambda x: np.full_like(x, 2.5), [X]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_eager_and_graph_match_numpy(name):
    fn, ref, arrays = CASES[name]
    check(fn, ref, *arrays)


def test_creation_ops_follow_keras_dtypes():
    np.testing.assert_array_equal(K.eye(3, 4, k=1), np.eye(3, 4, 1, dtype="float32"))
    assert K.eye(2).dtype == np.float32 and K.identity(3).shape == (3, 3)
    assert K.arange(5).dtype == np.int32 and K.arange(0.0, 1.0, 0.25).dtype == np.float32
    np.testing.assert_array_equal(K.arange(2, 8, 3), [2, 5])
    np.testing.assert_allclose(K.linspace(0, 1, 5), np.linspace(0, 1, 5))
    assert K.ones((2, 3)).dtype == np.float32 and K.full((2,), 7).dtype == np.float32
    np.testing.assert_array_equal(K.zeros(3), np.zeros(3))


def test_python_values_and_shape_and_conversion():
    out = K.relu([-1.0, 2.0])
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [0.0, 2.0])
    assert K.shape(X) == (3, 4)
    np.testing.assert_array_equal(K.convert_to_numpy(K.convert_to_tensor([1, 2])), [1, 2])
    assert K.convert_to_tensor(X, dtype="float64").dtype == np.float64
    x = kiln.placeholder((None, 4))
    assert kiln.core.is_tensor(K.convert_to_tensor(x))
    with pytest.raises(TypeError, match="convert_to_numpy: a symbolic tensor"):
        K.convert_to_numpy(x)


def test_np_asarray_of_an_eager_op_works():
    # the bug this package fixes: ops on arrays used to build graph nodes
    np.testing.assert_array_equal(np.asarray(K.relu(np.ones(3, "float32"))), np.ones(3))


def test_eager_errors_are_the_graph_errors():
    with pytest.raises(TypeError, match="same dtype"):
        K.add(X, XI)
    with pytest.raises(ValueError, match="split: axis 1"):
        K.split(X, 3, axis=1)
    with pytest.raises(ValueError, match="top_k: k must be"):
        K.top_k(XS, 9)


def test_cond_selects_a_branch_eagerly_and_wheres_in_graph():
    assert K.cond(np.bool_(True), lambda: 1, lambda: 2) == 1
    p = kiln.placeholder((), "bool")
    x = kiln.placeholder((3,))
    f = kiln.function([p, x], K.cond(p, lambda: x * 2.0, lambda: K.log(x)))
    xv = np.array([-1.0, 1.0, 4.0], "float32")
    np.testing.assert_allclose(f(np.bool_(True), xv), xv * 2)   # log(-1) = NaN does not leak
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(f(np.bool_(False), xv), np.log(xv))


def test_tracing_builds_nodes_even_for_arrays():
    with kiln.core.trace_variables():
        assert kiln.core.is_tensor(K.relu(np.ones(3, "float32")))
        r = K.arange(4)   # a constant node: what is computed from it is in the step's graph
        assert kiln.core.is_tensor(r) and r.dtype == "int32" and r.shape == (4,)
        assert kiln.core.is_tensor(K.ones((2,)))
    assert isinstance(K.relu(np.ones(3, "float32")), np.ndarray)


def test_eager_calls_reuse_one_compiled_function():
    from kiln.ops import _eager

    K.tanh(np.ones((2, 2), "float32"))
    misses = _eager.cache_info()["misses"]
    for _ in range(3):
        K.tanh(np.full((2, 2), 0.5, "float32"))
    assert _eager.cache_info()["misses"] == misses


def test_eager_op_from_threads_gives_the_serial_results():
    from concurrent.futures import ThreadPoolExecutor

    arrays = [rng.normal(size=(4, 6)).astype("float32") for _ in range(8)]
    want = [np.sort(a, -1) for a in arrays]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(K.sort, arrays))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
