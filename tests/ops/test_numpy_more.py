"""The rest of ``keras.ops.numpy`` (issue 44: kiln/ops/numpy_math.py, numpy_array.py,
numpy_stats.py, numpy_special.py): each op eager on arrays and compiled on placeholders,
against NumPy (one table row per case), plus their edge cases and errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
import kiln.ops as K

rng = np.random.default_rng(7)
X = rng.normal(size=(3, 4)).astype("float32")
Y = rng.normal(size=(4, 5)).astype("float32")
X3 = rng.normal(size=(2, 3, 5))
XI = rng.integers(-6, 7, size=(3, 4)).astype("int32")
YI = rng.integers(1, 5, size=(4,)).astype("int32") * np.array([1, -1, 1, -1], "int32")
U = np.linspace(-0.95, 0.95, 9)
BIG = np.array([-1e30, -50.0, -2.5, -1.0, -0.3, 0.0, 1e-8, 0.66, 1.0, 2.41, 3.0, 1e10, 1e300])
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, np.nan, 2.0])
XN = X3.copy()
XN[0, 1, 2] = np.nan
XN[1, :, 3] = np.nan
XN[1, 2, :] = np.nan
A, B = np.meshgrid(SPECIAL, SPECIAL)
BITS = rng.integers(-2**30, 2**30, size=(3, 4)).astype("int32")
SHIFTS = np.array([0, 3, 31, 32, 40, -1], "int32")
SV = np.array([5, -5, -7, 1, -1, 9], "int32")
M = rng.normal(size=(2, 4, 4))
H = rng.normal(size=50).astype("float32")


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
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = ref(*arrays)
    got = fn(*arrays)
    assert not kiln.core.is_tensor(got)
    _compare(got, want, rtol, atol)
    phs = [kiln.placeholder(a.shape, _graph_dtype(a)) for a in arrays]
    out = fn(*phs)
    many = isinstance(out, tuple | list)
    f = kiln.function(phs, list(out) if many else out)
    _compare(type(want)(f(*arrays)) if many else f(*arrays), want, rtol, atol)


def _f32(fn):
    return lambda *a: fn(*a).astype("float32")


CASES = {
    # ---- elementwise math (numpy_math.py)
    "arctan": (K.arctan, np.arctan, [BIG]), "arctan_f32": (K.arctan, np.arctan, [X * 3]),
    "arctan2": (K.arctan2, np.arctan2, [A, B]),
    "arctan2_rand": (K.arctan2, np.arctan2, [X, X[::-1]]),
    "arcsin": (K.arcsin, np.arcsin, [U]), "arccos": (K.arccos, np.arccos, [U]),
    "arcsin_out": (K.arcsin, np.arcsin, [np.array([1.0, -1.0, 1.5])]),
    "tan": (K.tan, np.tan, [X]), "sinh": (K.sinh, np.sinh, [BIG[1:-2]]),
    "cosh": (K.cosh, np.cosh, [X]), "arcsinh": (K.arcsinh, np.arcsinh, [BIG]),
    "arccosh": (K.arccosh, np.arccosh, [np.array([0.5, 1.0, 1.0 + 1e-9, 2.0, 1e9, 1e300])]),
    "arctanh": (K.arctanh, np.arctanh, [np.array([-1.0, -0.5, 0.0, 1e-9, 0.99, 1.0, 2.0])]),
    "deg2rad": (K.deg2rad, np.deg2rad, [X]), "rad2deg": (K.rad2deg, np.rad2deg, [X]),
    "sinc": (K.sinc, np.sinc, [np.array([0.0, 0.5, -1.5, 3.0, 1e-9])]),
    "exp2": (K.exp2, np.exp2, [X]), "log2": (K.log2, np.log2, [np.abs(X)]),
    "log10": (K.log10, np.log10, [np.abs(X)]), "cbrt": (K.cbrt, np.cbrt, [BIG[1:]]),
    "int_to_floatx": (K.arctan, _f32(np.arctan), [XI]),
    "logaddexp": (K.logaddexp, np.logaddexp, [A, B]),
    "logaddexp2": (K.logaddexp2, np.logaddexp2, [X, Y[:, :4].T[:3]]),
    "ldexp": (K.ldexp, np.ldexp, [X, XI]),
    "trunc": (K.trunc, np.trunc, [X * 3]), "trunc_int": (K.trunc, np.trunc, [XI]),
    "fabs": (K.fabs, _f32(np.fabs), [XI]),
    "floor_divide": (K.floor_divide, np.floor_divide, [XI, YI]),
    "floor_divide_f": (K.floor_divide, np.floor_divide, [X * 5, np.float32(0.7)]),
    "mod_int": (K.mod, np.mod, [XI, YI]), "mod_float": (K.mod, np.mod, [X * 5, X[::-1] + 2]),
    "fmod_int": (K.fmod, np.fmod, [XI, YI]), "fmod_float": (K.fmod, np.fmod, [X * 5, X[::-1]]),
    "divide_no_nan": (K.divide_no_nan, lambda a, b: np.where(b == 0, 0, a / np.where(
        b == 0, 1, b)), [X, np.where(X > 0, X, 0).astype("float32")]),
    "gcd": (K.gcd, np.gcd, [XI, YI]), "lcm": (K.lcm, np.lcm, [XI, YI]),
    "gcd_big": (K.gcd, np.gcd, [np.array([1836311903, 2**30, 0], "int32"),
                                np.array([1134903170, 3 * 2**20, 0], "int32")]),
    "hypot": (K.hypot, np.hypot, [A, B]), "hypot_huge": (K.hypot, np.hypot, [
        np.array([1e300, 3.0]), np.array([1e300, 4.0])]),
    "heaviside": (K.heaviside, np.heaviside, [A, B]),
    "fmax": (K.fmax, np.fmax, [A, B]), "fmin": (K.fmin, np.fmin, [A, B]),
    "signbit": (K.signbit, np.signbit, [SPECIAL]), "signbit_int": (K.signbit, np.signbit, [XI]),
    "isclose": (K.isclose, np.isclose, [A, B]),
    "isclose_nan": (lambda a, b: K.isclose(a, b, equal_nan=True),
                    lambda a, b: np.isclose(a, b, equal_nan=True), [A, B]),
    "allclose": (K.allclose, lambda a, b: np.bool_(np.allclose(a, b)), [X, X + 1e-7]),
    "nan_to_num": (K.nan_to_num, np.nan_to_num, [SPECIAL]),
    "nan_to_num_args": (lambda x: K.nan_to_num(x, 1.0, 2.0, -3.0),
                        lambda x: np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0), [SPECIAL]),
    "isposinf": (K.isposinf, np.isposinf, [SPECIAL]), "isneginf": (K.isneginf, np.isneginf,
                                                                   [SPECIAL]),
    "real": (K.real, np.real, [X]), "imag": (K.imag, np.imag, [X]),
    "conj": (K.conj, np.conj, [X]), "isreal": (K.isreal, np.isreal, [X]),
    "angle": (K.angle, np.angle, [SPECIAL]),
    # ---- arrays, shapes, products (numpy_array.py)
    "append": (K.append, np.append, [X, Y]),
    "append_axis": (lambda a: K.append(a, a, axis=1), lambda a: np.append(a, a, 1), [X]),
    "array_split": (lambda a: K.array_split(a, 3, 1), lambda a: np.array_split(a, 3, 1), [X3]),
    "hsplit": (lambda a: K.hsplit(a, 2), lambda a: np.hsplit(a, 2), [X]),
    "vsplit": (lambda a: K.vsplit(a, [1]), lambda a: np.vsplit(a, [1]), [X]),
    "dsplit": (lambda a: K.dsplit(a, [1, 3]), lambda a: np.dsplit(a, [1, 3]), [X3]),
    "hstack": (lambda a, b: K.hstack([a, b]), lambda a, b: np.hstack([a, b]), [X, X]),
    "vstack": (lambda a, b: K.vstack([a, b]), lambda a, b: np.vstack([a, b]), [X[0], X]),
    "dstack": (lambda a, b: K.dstack([a, b]), lambda a, b: np.dstack([a, b]), [X, X]),
    "moveaxis": (lambda a: K.moveaxis(a, [0, 1], [2, 0]),
                 lambda a: np.moveaxis(a, [0, 1], [2, 0]), [X3]),
    "swapaxes": (lambda a: K.swapaxes(a, 0, 2), lambda a: np.swapaxes(a, 0, 2), [X3]),
    "fliplr": (K.fliplr, np.fliplr, [X]), "flipud": (K.flipud, np.flipud, [X]),
    "rot90": (lambda a: K.rot90(a, 1, (1, 2)), lambda a: np.rot90(a, 1, (1, 2)), [X3]),
    "rot90_3": (lambda a: K.rot90(a, -1), lambda a: np.rot90(a, -1), [X]),
    "roll": (lambda a: K.roll(a, 5), lambda a: np.roll(a, 5), [X]),
    "roll_axes": (lambda a: K.roll(a, (1, -2), (0, 2)), lambda a: np.roll(a, (1, -2), (0, 2)),
                  [X3]),
    "diagonal": (lambda a: K.diagonal(a, 1, 1, 2), lambda a: np.diagonal(a, 1, 1, 2), [X3]),
    "diagonal_neg": (lambda a: K.diagonal(a, -1), lambda a: np.diagonal(a, -1), [X]),
    "trace": (lambda a: K.trace(a, 0, 0, 2), lambda a: np.trace(a, 0, 0, 2), [X3]),
    "trace_int": (K.trace, lambda a: np.trace(a).astype("int32"), [XI]),
    "diag_vec": (lambda a: K.diag(a, -2), lambda a: np.diag(a, -2), [X[0]]),
    "diag_mat": (lambda a: K.diag(a, 1), lambda a: np.diag(a, 1), [X]),
    "diagflat": (lambda a: K.diagflat(a, 1), lambda a: np.diagflat(a, 1), [X[:2, :2]]),
    "tensordot": (lambda a, b: K.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1),
                  [X, Y]),
    "tensordot_axes": (lambda a: K.tensordot(a, a, ([1, 2], [1, 2])),
                       lambda a: np.tensordot(a, a, ([1, 2], [1, 2])), [X3]),
    "outer": (K.outer, np.outer, [X, Y[0]]), "inner": (K.inner, np.inner, [X, X3[0, :, :4]]),
    "vdot": (K.vdot, np.vdot, [X, X]), "kron": (K.kron, np.kron, [X[:2], Y[:3, :2]]),
    "cross": (K.cross, np.cross, [X3[0, :, :3], X3[1, :, :3]]),
    "cross_axis": (lambda a, b: K.cross(a, b, axis=0), lambda a, b: np.cross(a, b, axis=0),
                   [X3[0, :, :3], X3[1, :, :3]]),
    "cross_2d": (K.cross, lambda a, b: np.cross(np.pad(a, ((0, 0), (0, 1))), b),
                 [X3[0, :, :2], X3[1, :, :3]]),
    "diff": (lambda a: K.diff(a, 2, 1), lambda a: np.diff(a, 2, 1), [X3]),
    "diff_bool": (K.diff, np.diff, [X > 0]),
    "meshgrid": (lambda a, b, c: K.meshgrid(a, b, c), lambda a, b, c: np.meshgrid(a, b, c),
                 [X[0], Y[0], X[1, :2]]),
    "meshgrid_ij": (lambda a, b: K.meshgrid(a, b, indexing="ij"),
                    lambda a, b: np.meshgrid(a, b, indexing="ij"), [X[0], Y[0]]),
    "vander": (lambda a: K.vander(a, 3, True), lambda a: np.vander(a, 3, True), [X[0]]),
    "select": (lambda a: K.select([a > 0.5, a < -0.5], [a, -a], 7.0),
               lambda a: np.select([a > 0.5, a < -0.5], [a, -a], 7.0), [X]),
    "correlate_valid": (K.correlate, np.correlate, [X[0], X[1, :2]]),
    "correlate_same_short": (lambda a, v: K.correlate(a, v, "same"),
                             lambda a, v: np.correlate(a, v, "same"), [X[0, :2], Y[0]]),
    "correlate_full": (lambda a, v: K.correlate(a, v, "full"),
                       lambda a, v: np.correlate(a, v, "full"), [Y[0], X[0, :3]]),
    "correlate_int": (K.correlate, lambda a, v: np.correlate(a, v).astype("float32"),
                      [XI[0], XI[1, :2]]),
    "unravel_index": (lambda i: K.unravel_index(i, (3, 4)),
                      lambda i: tuple(a.astype("int32") for a in np.unravel_index(i, (3, 4))),
                      [np.array([0, 5, 11, 7], "int32")]),
    "get_item": (lambda a: K.get_item(a, (1, slice(None, 2))), lambda a: a[1, :2], [X]),
    "get_item_array": (lambda a: K.get_item(a, [2, 0]), lambda a: a[[2, 0]], [X]),
    "ravel": (K.ravel, np.ravel, [X3]), "copy": (K.copy, np.copy, [X]),
    "array": (lambda a: K.array(a, "float64"), lambda a: a.astype("float64"), [X]),
    "empty_like": (K.empty_like, np.zeros_like, [X]),
    "pad_reflect": (lambda a: K.pad(a, ((5, 7), (9, 2)), mode="reflect"),
                    lambda a: np.pad(a, ((5, 7), (9, 2)), mode="reflect"), [X]),
    "pad_symmetric": (lambda a: K.pad(a, 2, mode="symmetric"),
                      lambda a: np.pad(a, 2, mode="symmetric"), [X]),
    "pad_edge": (lambda a: K.pad(a, ((1, 2), (3, 0)), mode="edge"),
                 lambda a: np.pad(a, ((1, 2), (3, 0)), mode="edge"), [X]),
    "pad_wrap": (lambda a: K.pad(a, 6, mode="wrap"), lambda a: np.pad(a, 6, mode="wrap"), [X]),
    "pad_median": (lambda a: K.pad(a, 1, mode="median"), lambda a: np.pad(a, 1, mode="median"),
                   [X]),
    "pad_maximum": (lambda a: K.pad(a, (1, 2), mode="maximum"),
                    lambda a: np.pad(a, (1, 2), mode="maximum"), [X]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_eager_and_graph_match_numpy(name):
    fn, ref, arrays = CASES[name]
    check(fn, ref, *arrays)


def test_signed_zeros_and_infinities_follow_numpy():
    for fn, ref, args in [(K.arctan2, np.arctan2, (A, B)), (K.arctan, np.arctan, (SPECIAL,)),
                          (K.signbit, np.signbit, (SPECIAL,)), (K.angle, np.angle, (SPECIAL,))]:
        got, want = fn(*args), ref(*args)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_bitwise_ops_match_numpy():
    b64 = BITS.astype("int64")
    for op, ref in [(K.bitwise_and, np.bitwise_and), (K.bitwise_or, np.bitwise_or),
                    (K.bitwise_xor, np.bitwise_xor)]:
        check(op, ref, BITS, BITS[::-1].copy())
        check(op, ref, b64, b64[:, ::-1].copy())
        check(op, ref, BITS > 0, BITS < 5)
    check(K.bitwise_invert, np.invert, BITS)
    check(K.bitwise_not, np.invert, BITS > 0)
    check(K.left_shift, np.left_shift, SV, SHIFTS)        # counts >= 32 and < 0 give 0
    check(K.bitwise_right_shift, np.right_shift, SV, SHIFTS)  # ... or the sign
    check(lambda x: K.left_shift(x, 3), lambda x: np.left_shift(x, 3), SV)
    with pytest.raises(TypeError, match="bitwise_and: expected integer or bool"):
        K.bitwise_and(X, X)


def test_creation_functions_match_numpy_in_floatx():
    for got, want in [(K.tri(3, 4, 1), np.tri(3, 4, 1)), (K.logspace(0, 2, 5),
                                                          np.logspace(0, 2, 5)),
                      (K.geomspace(1, 1000, 4), np.geomspace(1, 1000, 4)),
                      (K.bartlett(5), np.bartlett(5)), (K.blackman(6), np.blackman(6)),
                      (K.hamming(4), np.hamming(4)), (K.hanning(7), np.hanning(7)),
                      (K.kaiser(5, 3.0), np.kaiser(5, 3.0)), (K.empty((2, 3)), np.zeros((2, 3)))]:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert K.tri(2, dtype="int32").dtype == np.int32
    assert K.ndim(X3) == 3 and K.size(X3) == 30
    p = kiln.placeholder((None, 4))
    assert K.ndim(p) == 2 and kiln.core.is_tensor(K.size(p))
    assert K.view(X, "int32").dtype == np.int32
    np.testing.assert_array_equal(K.view(X, "int32"), X.view("int32"))


def test_errors_name_the_op_and_what_was_received():
    with pytest.raises(ValueError, match=r"diagonal: needs a tensor of rank >= 2"):
        K.diagonal(X[0])
    with pytest.raises(ValueError, match="cross: the vectors must have 2 or 3"):
        K.cross(X, X)
    with pytest.raises(TypeError, match="gcd: expected integer tensors"):
        K.gcd(X, X)
    with pytest.raises(ValueError, match="correlate: mode must be"):
        K.correlate(X[0], X[1], "wide")
    with pytest.raises(TypeError, match="ldexp: the exponents must be integers"):
        K.ldexp(X, X)
    with pytest.raises(NotImplementedError, match="pad: mode 'linear_ramp' is not supported"):
        K.pad(X, 1, mode="linear_ramp")
    with pytest.raises(TypeError, match="get_item: a boolean mask"):
        K.get_item(X, X > 0)
    with pytest.raises(NotImplementedError, match="view: reinterpreting float32"):
        K.view(kiln.placeholder((3,)), "int32")


def _ulps(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    ok = np.isfinite(want)
    spacing = np.spacing(np.abs(want[ok])).astype("float64")
    return np.max(np.abs(got[ok].astype("float64") - want[ok].astype("float64")) / spacing)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_composite_math_is_within_a_few_ulps_of_numpy(dtype):
    r = np.random.default_rng(3)
    wide = np.concatenate([r.normal(size=3000) * np.exp(r.uniform(-20, 20, 3000)),
                           r.uniform(-3, 3, 3000)]).astype(dtype)
    unit = r.uniform(-1, 1, 6000).astype(dtype)
    above1 = (1 + np.exp(r.uniform(-30, 20, 6000))).astype(dtype)
    near = np.linspace(-720, 720, 2001).astype(dtype)  # sinh/cosh up to their overflow
    cases = [("arctan", wide, 2), ("arcsin", unit, 3), ("arccos", unit, 3), ("tan", unit, 3),
             ("arcsinh", wide, 2), ("arccosh", above1, 3), ("arctanh", unit, 3),
             ("sinh", near, 3), ("cosh", near, 3), ("cbrt", wide, 2), ("log2", np.abs(wide), 2),
             ("i0", wide / 1000, 16)]
    with np.errstate(all="ignore"):
        for name, x, tol in cases:
            # the float64 result rounded (np.i0 of float32 overflows early)
            want = getattr(np, name)(x.astype("float64")).astype(dtype)
            assert _ulps(getattr(K, name)(x), want) <= tol, name
        assert _ulps(K.arctan2(wide, wide[::-1]), np.arctan2(wide, wide[::-1])) <= 2
        assert _ulps(K.hypot(wide, wide[::-1]), np.hypot(wide, wide[::-1])) <= 2
