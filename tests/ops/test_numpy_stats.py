"""The statistics, counting and special ops of ``keras.ops.numpy`` (kiln/ops/numpy_stats.py,
numpy_special.py) against NumPy, eager and compiled; and the gradients of the differentiable
new ops (numpy_math/array/stats/special) against float64 finite differences of NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from fd_oracle import numeric_grad
from ops.test_numpy_more import X3, XI, XN, X, check

import kiln
import kiln.ops as K

rng = np.random.default_rng(11)
M = rng.normal(size=(2, 4, 4))
H = rng.normal(size=60).astype("float32")
SORTED = np.array([1.0, 2.0, 2.0, 3.0, 5.0, np.nan])
VALS = np.array([[0.0, 2.0, 2.5], [5.0, 6.0, np.nan]])
INTS = np.array([3, 1, 2, 3, 3, 7, 1], "int32")


def _nanarg(fn):
    def ref(x, axis=None):
        nan = np.isnan(x)
        fill = -np.inf if fn is np.nanargmax else np.inf
        out = (np.argmax if fn is np.nanargmax else np.argmin)(np.where(nan, fill, x), axis)
        return np.where(np.all(nan, axis), -1, out).astype("int32")
    return ref


CASES = {
    "count_nonzero": (lambda x: K.count_nonzero(x, 1),
                      lambda x: np.count_nonzero(x, 1).astype("int32"), [XI]),
    "ptp": (lambda x: K.ptp(x, 1), lambda x: np.ptp(x, 1), [X3]),
    "average": (lambda x: K.average(x, 1, np.array([1.0, 2.0, 3.0])),
                lambda x: np.average(x, 1, np.array([1.0, 2.0, 3.0])), [X3]),
    "average_full": (lambda x, w: K.average(x, None, w), lambda x, w: np.average(x, None, w),
                     [X3, X3 ** 2]),
    "nanargmax": (lambda x: K.nanargmax(x, 2), lambda x: _nanarg(np.nanargmax)(x, 2), [XN]),
    "nanargmin": (K.nanargmin, lambda x: np.int32(np.nanargmin(x)), [XN]),
    "nancumsum": (lambda x: K.nancumsum(x, 1), lambda x: np.nancumsum(x, 1), [XN]),
    "nancumprod": (K.nancumprod, np.nancumprod, [XN]),
    "median": (K.median, np.median, [X3]),
    "median_keepdims": (lambda x: K.median(x, (0, 2), True),
                        lambda x: np.median(x, (0, 2), keepdims=True), [X3]),
    "median_nan": (lambda x: K.median(x, 2), lambda x: np.median(x, 2), [XN]),
    "median_int": (lambda x: K.median(x, 0), lambda x: np.median(x, 0).astype("float32"), [XI]),
    "nanmedian": (lambda x: K.nanmedian(x, 1), lambda x: np.nanmedian(x, 1), [XN]),
    "percentile": (lambda x: K.percentile(x, [25, 75], 1, keepdims=True),
                   lambda x: np.percentile(x, [25, 75], 1, keepdims=True), [X]),
    "corrcoef": (K.corrcoef, np.corrcoef, [X]),
    "corrcoef_1d": (K.corrcoef, lambda x: np.float32(np.corrcoef(x)), [X[0]]),
    "trapezoid": (K.trapezoid, np.trapezoid, [X3]),
    "trapezoid_x": (lambda y, x: K.trapezoid(y, x, axis=1),
                    lambda y, x: np.trapezoid(y, x, axis=1), [X3, np.array([0.0, 1.0, 3.0])]),
    "trapezoid_dx": (lambda y: K.trapezoid(y, dx=0.5, axis=0),
                     lambda y: np.trapezoid(y, dx=0.5, axis=0), [X]),
    "searchsorted_left": (K.searchsorted, lambda a, v: np.searchsorted(a, v).astype("int32"),
                          [SORTED, VALS]),
    "searchsorted_right": (lambda a, v: K.searchsorted(a, v, "right"),
                           lambda a, v: np.searchsorted(a, v, "right").astype("int32"),
                           [SORTED, VALS]),
    "digitize": (K.digitize, lambda x, b: np.digitize(x, b).astype("int32"),
                 [VALS, np.array([1.0, 2.0, 3.0])]),
    "digitize_decreasing": (K.digitize, lambda x, b: np.digitize(x, b).astype("int32"),
                            [VALS, np.array([3.0, 2.0, 1.0])]),
    "isin": (K.isin, np.isin, [XI, np.array([1, 2, -3], "int32")]),
    "isin_invert": (lambda a, b: K.isin(a, b, invert=True),
                    lambda a, b: np.isin(a, b, invert=True), [XI, np.array([1, 2], "int32")]),
    "histogram": (K.histogram, np.histogram, [H]),
    "histogram_range": (lambda x: K.histogram(x, 5, (-1.0, 1.0)),
                        lambda x: np.histogram(x, 5, (-1.0, 1.0)), [H]),
    "argpartition": (lambda x: K.take_along_axis(x, K.argpartition(x, 2), -1),
                     lambda x: np.take_along_axis(x, np.argpartition(x, 2), -1), [X]),
    "i0": (K.i0, np.i0, [np.concatenate([np.linspace(-40, 40, 41), [1e-3, 29.9, 30.1, 700]])]),
    "nextafter": (K.nextafter, np.nextafter, [
        np.array([1.0, 0, -0.0, 1, 2, -2, np.inf, -np.inf, 5e-324, np.nan, 1.0, 1e308]),
        np.array([2.0, 1, -1, 0, 0, 0, 0, 0, 0, 1, np.nan, np.inf])]),
    "nextafter_f32": (K.nextafter, np.nextafter, [np.float32([1, 0, -3, 1e-45, 3e38]),
                                                  np.float32([0, -1, -4, 0, np.inf])]),
    "slogdet": (K.slogdet, lambda m: tuple(np.linalg.slogdet(m)), [M]),
    "slogdet_singular": (K.slogdet, lambda m: tuple(np.linalg.slogdet(m)), [np.ones((3, 3))]),
    "unique_size": (lambda x: K.unique(x, size=6, return_index=True, return_inverse=True,
                                       return_counts=True, fill_value=-1),
                    lambda x: (np.array([1, 2, 3, 7, -1, -1], "int32"),
                               np.array([1, 2, 0, 5, 1, 1], "int32"),
                               np.unique(x, return_inverse=True)[1].astype("int32"),
                               np.array([2, 1, 3, 1, 0, 0], "int32")), [INTS]),
    "unique_truncated": (lambda x: K.unique(x, size=2), lambda x: np.unique(x)[:2], [INTS]),
}
for _n in ("nansum", "nanprod", "nanmean", "nanvar", "nanstd", "nanmax", "nanmin"):
    for _ax in (None, 1, (0, 2)):
        CASES[f"{_n}_{_ax}"] = ((lambda n, a: lambda x: getattr(K, n)(x, axis=a))(_n, _ax),
                                (lambda n, a: lambda x: getattr(np, n)(x, axis=a))(_n, _ax),
                                [XN])
for _m in ("linear", "lower", "higher", "midpoint", "nearest"):
    CASES[f"quantile_{_m}"] = ((lambda m: lambda x: K.quantile(x, [0.1, 0.5, 0.93], 1, m))(_m),
                               (lambda m: lambda x: np.quantile(x, [0.1, 0.5, 0.93], 1,
                                                                method=m))(_m), [X3])
    CASES[f"nanquantile_{_m}"] = ((lambda m: lambda x: K.nanquantile(x, 0.3, 2, m))(_m),
                                  (lambda m: lambda x: np.nanquantile(x, 0.3, 2, method=m))(_m),
                                  [XN])


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_eager_and_graph_match_numpy(name):
    fn, ref, arrays = CASES[name]
    check(fn, ref, *arrays, rtol=1e-5 if any(a.dtype == np.float32 for a in arrays) else 1e-12,
          atol=1e-6 if any(a.dtype == np.float32 for a in arrays) else 1e-300)


def test_data_dependent_shapes_on_arrays_and_their_errors_on_tensors():
    for got, want in zip(K.nonzero(XI > 1), np.nonzero(XI > 1)):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)
    got = K.unique(INTS, return_counts=True)
    for g, w in zip(got, np.unique(INTS, return_counts=True)):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(K.bincount(INTS), np.bincount(INTS))
    np.testing.assert_allclose(K.bincount(INTS, np.arange(7.0), minlength=10),
                               np.bincount(INTS, np.arange(7.0), minlength=10))
    np.testing.assert_array_equal(K.bincount(np.array([[0, 1], [2, 2]], "int32")),
                                  [[1, 1, 0], [0, 0, 2]])
    p = kiln.placeholder((5,), "int32")
    f = kiln.function([p], K.bincount(p, minlength=4))  # values >= minlength are not counted
    np.testing.assert_array_equal(f(np.array([0, 3, 3, 1, 9], "int32")), [1, 1, 0, 2])
    with pytest.raises(ValueError, match="nonzero: the result's shape depends on the values"):
        K.nonzero(p)
    with pytest.raises(ValueError, match="unique: .* pass size="):
        K.unique(p)
    with pytest.raises(ValueError, match="bincount: on a symbolic tensor .* minlength > 0"):
        K.bincount(p)
    with pytest.raises(ValueError, match="quantile: method must be one of"):
        K.quantile(X, 0.5, method="cubic")
    with pytest.raises(ValueError, match="slogdet: needs square matrices"):
        K.slogdet(X)


def test_vectorize_maps_over_loop_dimensions():
    f = K.vectorize(lambda a, b: K.sum(a * b), signature="(n),(n)->()")
    np.testing.assert_allclose(f(M[0], M[1]), np.sum(M[0] * M[1], -1))
    p = kiln.placeholder((4, 4), "float64")
    g = kiln.function([p], f(p, p))
    np.testing.assert_allclose(g(M[0]), np.sum(M[0] ** 2, -1))
    h = K.vectorize(lambda a: K.maximum(a, 0.0) * 2.0)
    np.testing.assert_allclose(kiln.function([p], h(p))(M[0]), np.maximum(M[0], 0) * 2)


# ---- gradients: float64 finite differences of the NumPy reference --------------------------
X0 = np.array([[0.3, -1.2, 0.7, 0.45], [1.5, 0.2, -0.4, -2.2], [0.9, -0.6, 0.1, 2.8]])
P0 = np.abs(X0) + 1.1  # > 1: arccosh's domain
S0 = np.clip(X0 / 3.0, -0.9, 0.9)  # inside (-1, 1)
W2 = X0[::-1] + 0.05  # a second operand without ties against X0

GRADS = {
    "arctan": (K.arctan, np.arctan, X0 * 2), "arcsin": (K.arcsin, np.arcsin, S0),
    "arccos": (K.arccos, np.arccos, S0), "tan": (K.tan, np.tan, S0),
    "arctan2_y": (lambda x: K.arctan2(x, W2), lambda x: np.arctan2(x, W2), X0),
    "arctan2_x": (lambda x: K.arctan2(W2, x), lambda x: np.arctan2(W2, x), X0),
    "sinh": (K.sinh, np.sinh, X0), "cosh": (K.cosh, np.cosh, X0),
    "arcsinh": (K.arcsinh, np.arcsinh, X0 * 3), "arccosh": (K.arccosh, np.arccosh, P0),
    "arctanh": (K.arctanh, np.arctanh, S0), "cbrt": (K.cbrt, np.cbrt, X0),
    "exp2": (K.exp2, np.exp2, X0), "log2": (K.log2, np.log2, P0),
    "log10": (K.log10, np.log10, P0), "sinc": (K.sinc, np.sinc, X0),
    "logaddexp": (lambda x: K.logaddexp(x, W2), lambda x: np.logaddexp(x, W2), X0),
    "logaddexp2": (lambda x: K.logaddexp2(x, W2), lambda x: np.logaddexp2(x, W2), X0),
    "hypot": (lambda x: K.hypot(x, W2), lambda x: np.hypot(x, W2), X0),
    "mod": (lambda x: K.mod(x, 0.77), lambda x: np.mod(x, 0.77), X0),
    "fmod": (lambda x: K.fmod(x, 0.77), lambda x: np.fmod(x, 0.77), X0),
    "divide_no_nan": (lambda x: K.divide_no_nan(W2, x), lambda x: W2 / x, X0),
    "fmax": (lambda x: K.fmax(x, W2), lambda x: np.fmax(x, W2), X0),
    "nan_to_num": (K.nan_to_num, np.nan_to_num, X0), "i0": (K.i0, np.i0, X0 * 4),
    "i0_asymptotic": (lambda x: K.i0(x * 2 + 36) * 1e-13, lambda x: np.i0(x * 2 + 36) * 1e-13,
                      X0),
    "ptp": (lambda x: K.ptp(x, 0), lambda x: np.ptp(x, 0), X0),
    "average": (lambda x: K.average(x, 1, np.arange(1.0, 5.0)),
                lambda x: np.average(x, 1, np.arange(1.0, 5.0)), X0),
    "nanmean": (lambda x: K.nanmean(x, 0), lambda x: np.nanmean(x, 0), X0),
    "nanstd": (lambda x: K.nanstd(x, 1), lambda x: np.nanstd(x, 1), X0),
    "median": (lambda x: K.median(x, 1), lambda x: np.median(x, 1), X0),
    "quantile": (lambda x: K.quantile(x, [0.3, 0.8], 0), lambda x: np.quantile(
        x, [0.3, 0.8], 0), X0),
    "corrcoef": (K.corrcoef, np.corrcoef, X0),
    "trapezoid": (K.trapezoid, np.trapezoid, X0),
    "diagonal": (lambda x: K.diagonal(x, 1), lambda x: np.diagonal(x, 1), X0),
    "trace": (K.trace, np.trace, X0), "diag": (lambda x: K.diag(x[0], 1),
                                              lambda x: np.diag(x[0], 1), X0),
    "kron": (lambda x: K.kron(x, W2[:2, :2]), lambda x: np.kron(x, W2[:2, :2]), X0),
    "tensordot": (lambda x: K.tensordot(x, W2.T, 1), lambda x: np.tensordot(x, W2.T, 1), X0),
    "cross": (lambda x: K.cross(x[:, :3], W2[:, :3]), lambda x: np.cross(x[:, :3], W2[:, :3]),
              X0),
    "roll": (lambda x: K.roll(x, 2, 1), lambda x: np.roll(x, 2, 1), X0),
    "rot90": (K.rot90, np.rot90, X0),
    "correlate": (lambda x: K.correlate(x[0], x[1, :2], "full"),
                  lambda x: np.correlate(x[0], x[1, :2], "full"), X0),
    "diff": (lambda x: K.diff(x, 2), lambda x: np.diff(x, 2), X0),
    "pad_reflect": (lambda x: K.pad(x, 2, mode="reflect"),
                    lambda x: np.pad(x, 2, mode="reflect"), X0),
    "slogdet": (lambda x: K.slogdet(x[:, :3])[1], lambda x: np.linalg.slogdet(x[:, :3])[1], X0),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradient_matches_finite_differences(name):
    fn, ref, x0 = GRADS[name]
    w = rng.normal(size=np.shape(ref(x0)))
    p = kiln.placeholder(x0.shape, "float64")
    (g,) = kiln.grad(K.sum(fn(p) * K.constant(w)), [p])
    got = kiln.function([p], g)(x0)
    xv = x0.copy()
    want = numeric_grad(lambda: float(np.sum(ref(xv) * w)), xv)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


# ---- Keras' NumPy backend as the oracle of names, results and dtypes -------------------------
FI = rng.integers(0, 5, (3, 4)).astype("int32")
KERAS_CASES = {
    "arctan_int": lambda m: m.arctan(FI), "quantile_int": lambda m: m.quantile(FI, 0.3),
    "median_int": lambda m: m.median(FI, axis=1), "count_nonzero": lambda m: m.count_nonzero(FI),
    "searchsorted": lambda m: m.searchsorted(np.arange(5, dtype="int32"), FI),
    "digitize": lambda m: m.digitize(X, np.array([-1.0, 0.0, 1.0], "float32")),
    "bincount": lambda m: m.bincount(FI[0]), "histogram": lambda m: m.histogram(X[0], bins=4),
    "bincount_w": lambda m: m.bincount(FI[0], weights=X[0]),
    "unique_size": lambda m: m.unique(FI, size=8), "nanargmax": lambda m: m.nanargmax(X, 1),
    "argpartition": lambda m: m.take_along_axis(X, m.argpartition(X, 1), -1),
    "correlate_int": lambda m: m.correlate(FI[0], FI[1, :2]),
    "trace_int": lambda m: m.trace(FI), "corrcoef_int": lambda m: m.corrcoef(FI),
    "ldexp_int": lambda m: m.ldexp(FI, FI), "average_int": lambda m: m.average(FI, axis=0),
    "nanmean_int": lambda m: m.nanmean(FI), "nancumsum_int": lambda m: m.nancumsum(FI),
    "floor_divide_mix": lambda m: m.floor_divide(X, FI + 1), "mod_int": lambda m: m.mod(FI, 3),
    "hypot_int": lambda m: m.hypot(FI, FI), "append_mix": lambda m: m.append(X, FI),
    "isin": lambda m: m.isin(FI, [1, 2]), "slogdet": lambda m: m.slogdet(X[:3, :3]),
    "tri": lambda m: m.tri(3), "kaiser": lambda m: m.kaiser(5, 2.0),
    "vander_int": lambda m: m.vander(FI[0]), "unravel": lambda m: m.unravel_index(
        np.array([3, 7], "int32"), (3, 4)), "gcd": lambda m: m.gcd(FI, 6),
    "bitwise_xor": lambda m: m.bitwise_xor(FI, 3), "right_shift": lambda m: m.right_shift(FI, 1),
}


def _leaves(v):
    return [np.asarray(a) for a in v] if isinstance(v, tuple | list) else [np.asarray(v)]


@pytest.mark.parametrize("name", sorted(KERAS_CASES))
def test_results_and_dtypes_match_keras_numpy_backend(name):
    pytest.importorskip("keras")
    from more_oracle import _NumpyBackendOps  # restores keras.src.backend.numpy after import

    knp = _NumpyBackendOps(("numpy",))
    want, got = _leaves(KERAS_CASES[name](knp)), _leaves(KERAS_CASES[name](K))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g.astype("float64"), w.astype("float64"), rtol=1e-5,
                                   atol=1e-6, equal_nan=True)


def test_every_keras_numpy_name_exists_with_keras_signature():
    import inspect

    import kiln.ops.numpy as kn
    from kiln.ops.numpy_more import __all__ as new_names

    keras_numpy = pytest.importorskip("keras.src.ops.numpy")
    public = pytest.importorskip("keras").ops.numpy
    missing = [n for n in dir(public) if not n.startswith("_") and not hasattr(kn, n)]
    assert not missing
    for name in new_names:
        want = inspect.signature(getattr(keras_numpy, name))
        got = inspect.signature(getattr(kn, name))
        assert [(p.name, p.default, p.kind) for p in got.parameters.values()] == [
            (p.name, p.default, p.kind) for p in want.parameters.values()], name


def test_gradients_at_zero_and_at_selected_branches_are_finite_and_exact():
    # odd functions written as sign * g(|x|) keep their derivative at 0 (abs' is 0 there),
    # and a `where` never lets an unselected branch's inf or NaN into the gradient
    p = kiln.placeholder((3,), "float64")
    x = np.array([0.0, 1e-3, -0.5])
    for fn, deriv in [(K.arctan, lambda v: 1 / (1 + v * v)),
                      (K.arcsinh, lambda v: 1 / np.sqrt(1 + v * v)),
                      (K.arcsin, lambda v: 1 / np.sqrt(1 - v * v)),
                      (K.arctanh, lambda v: 1 / (1 - v * v)), (K.sinh, np.cosh)]:
        (g,) = kiln.grad(K.sum(fn(p)), [p])
        np.testing.assert_allclose(kiln.function([p], g)(x), deriv(x), rtol=1e-12)
    for fn in (K.divide_no_nan, K.arctan2, K.hypot):
        (g,) = kiln.grad(K.sum(fn(p, p * 0.0)), [p])
        assert np.all(np.isfinite(kiln.function([p], g)(np.array([1.0, -2.0, 3.0]))))
