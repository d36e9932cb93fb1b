"""sort / argsort / top_k on the ``argsort`` and ``take_along_axis`` ops: long rows with ties,
NaN, signed zeros and infinities against NumPy's stable sort, run-time batch sizes, the
gradient's closed form, and the errors of the per-row gather."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ops as K


def _messy(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    x = np.round(rng.normal(size=shape) * 4).astype(dtype)
    if np.dtype(dtype).kind == "i":
        x.reshape(-1)[::97] = np.iinfo(dtype).min  # the extremes of the keys
        x.reshape(-1)[::89] = np.iinfo(dtype).max
    if np.dtype(dtype).kind == "f":
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, flat.size // 50)] = np.nan
        flat[rng.integers(0, flat.size, flat.size // 50)] = -0.0
        flat[rng.integers(0, flat.size, flat.size // 80)] = np.inf
        flat[rng.integers(0, flat.size, flat.size // 80)] = -np.inf
        flat[rng.integers(0, flat.size, 5)] = -np.nan  # NaN with the sign bit set
        if dtype == "float32":
            flat[rng.integers(0, flat.size, 5)] = np.float32(1e-45)  # denormals
            flat[rng.integers(0, flat.size, 5)] = -np.float32(1e-45)
    return x


def _run(fn, *arrays):
    phs = [kiln.placeholder((None,) + a.shape[1:], a.dtype.name) for a in arrays]
    outs = fn(*phs)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    f = kiln.function(phs, outs)
    got = f(*arrays)
    return got if isinstance(got, list) else [got]


# float32 / float16 / <= 32-bit ints and bool sort as packed keys, float64 / int64 with NumPy's
# stable argsort; 9 x 4099 is split over the kernel threads, a non-last axis is staged
DTYPES = ["float32", "float64", "int32", "int64", "bool"]


@pytest.mark.nojit
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 4099])
def test_long_rows_match_numpy_stable_sort(dtype, n):
    rng = np.random.default_rng(n)
    x = _messy(rng, (9, n), dtype)
    order = np.argsort(x, axis=1, kind="stable")
    srt, idx = _run(lambda p: (K.sort(p, axis=1), K.argsort(p, axis=1)), x)
    np.testing.assert_array_equal(idx, order)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(srt, np.take_along_axis(x, order, 1))  # NaN equal NaN here
    if x.dtype.kind == "f":  # the sign of zero travels with its element
        np.testing.assert_array_equal(np.signbit(srt),
                                      np.signbit(np.take_along_axis(x, order, 1)))
    (col,) = _run(lambda p: K.argsort(p, axis=0), x)
    np.testing.assert_array_equal(col, np.argsort(x, axis=0, kind="stable"))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("k", [1, 50, 3000])
def test_top_k_of_long_rows(dtype, k):
    rng = np.random.default_rng(3)
    x = _messy(rng, (11, 3000), dtype)
    values, idx = _run(lambda p: K.top_k(p, k), x)
    # ties: lower index first; NaN last (the stable order of -x); the ints' minimum last
    want = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(idx, want.astype(np.int32))
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, 1))


def test_batch_size_is_known_only_at_run_time():
    rng = np.random.default_rng(4)
    p = kiln.placeholder((None, 6), "float32")
    f = kiln.function([p], [K.sort(p, axis=0), K.top_k(p, 2)[1]])
    for rows in (1, 3, 17):
        x = rng.normal(size=(rows, 6)).astype(np.float32)
        got_sorted, got_top = f(x)
        np.testing.assert_array_equal(got_sorted, np.sort(x, axis=0))
        np.testing.assert_array_equal(got_top, np.argsort(-x, 1, kind="stable")[:, :2])


def test_gradient_scatters_back_through_the_order():
    # d/dx sum(w * sort(x)) puts w[r] where the r-th smallest was: dx[argsort[r]] = w[r]
    rng = np.random.default_rng(5)
    x = rng.permutation(40).reshape(4, 10).astype(np.float64)
    w = rng.normal(size=(4, 10))
    p = kiln.placeholder((4, 10), "float64")
    loss = K.sum(K.sort(p, axis=1) * w)
    (grad,) = kiln.grad(loss, [p])
    (got,) = kiln.function([p], [grad])(x)
    want = np.zeros_like(x)
    np.put_along_axis(want, np.argsort(x, axis=1), w, axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=0)


def test_take_along_axis_gradient_adds_repeated_indices():
    p = kiln.placeholder((None, 4), "float64")
    idx = np.array([[3, 3, -1, 0], [1, 1, 1, 2]], np.int64)
    loss = K.sum(K.take_along_axis(p, idx, axis=1) * np.arange(1.0, 5.0))
    (grad,) = kiln.grad(loss, [p])
    (got,) = kiln.function([p], [grad])(np.zeros((2, 4)))
    np.testing.assert_array_equal(got, [[4.0, 0.0, 0.0, 1.0 + 2.0 + 3.0],
                                        [0.0, 1.0 + 2.0 + 3.0, 4.0, 0.0]])


def test_take_along_axis_errors_name_the_op():
    p = kiln.placeholder((None, 4), "float32")
    i = kiln.placeholder((None, 2), "int32")
    f = kiln.function([p, i], [K.take_along_axis(p, i, axis=1)])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(f(x, np.array([[-1, 0], [2, 3]], np.int32))[0],
                                  [[3.0, 0.0], [6.0, 7.0]])
    with pytest.raises(IndexError, match="take_along_axis"):
        f(x, np.array([[0, 4], [0, 0]], np.int32))
    with pytest.raises(ValueError, match=r"take_along_axis: indices of shape \(3, 2\)"):
        f(x, np.zeros((3, 2), np.int32))  # rows differ at run time
    with pytest.raises(ValueError, match="take_along_axis"):
        K.take_along_axis(kiln.placeholder((None, 4, 3), "float32"),
                          kiln.placeholder((None, 2, 1), "int32"), axis=1)  # needs broadcasting


def test_argsort_k_out_of_range_is_a_clear_error():
    from kiln.core.ops.sort import argsort

    p = kiln.placeholder((None, 5), "float32")
    with pytest.raises(ValueError, match=r"argsort: k must be in \[1, 5\] .*received 6"):
        argsort(p, axis=1, k=6)
    with pytest.raises(ValueError, match="argsort: axis 2 is out of range"):
        argsort(p, axis=2)
    # an axis whose length is known only at run time: checked when the signature is planned
    q = kiln.placeholder((2, None), "float32")
    f = kiln.function([q], argsort(q, axis=1, k=4))
    np.testing.assert_array_equal(f(np.array([[3, 1, 2, 0, 5], [0, 0, 1, 1, 0]], "float32")),
                                  [[3, 1, 2, 0], [0, 1, 4, 2]])
    with pytest.raises(ValueError, match=r"argsort: k must be in \[1, 3\] \(axis 1 of "
                                         r"\(2, 3\)\), received 4"):
        f(np.zeros((2, 3), "float32"))
