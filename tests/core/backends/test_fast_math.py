"""The float32 tanh, sigmoid and softmax of the CPU's generated loops (a rational approximation, see
``kiln/core/backends/cpu/codegen/spec.py``) against float64 NumPy on a dense grid and the special
values; float64 keeps libm's tanh."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends.cpu.codegen import llvm_loop
from kiln.core.backends.cpu.codegen.spec import LoopSpec, program_dtypes


def _run(values: np.ndarray) -> np.ndarray:
    x = kiln.placeholder(values.shape, values.dtype.name)
    return kiln.function([x], K.tanh(x), backend="cpu")(values)


@pytest.mark.nojit
def test_float32_tanh_is_within_a_few_ulp_everywhere():
    grid = np.concatenate([np.linspace(-12, 12, 200001), np.linspace(-1e-3, 1e-3, 20001),
                           np.geomspace(1e-30, 1e-2, 2000), -np.geomspace(1e-30, 1e-2, 2000)])
    x = grid.astype(np.float32)
    got = _run(x)
    want = np.tanh(x.astype(np.float64))
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float32).tiny)
    assert rel.max() < 4e-7, (x[rel.argmax()], got[rel.argmax()], want[rel.argmax()])
    assert np.all(np.abs(got) <= 1.0)


@pytest.mark.nojit
def test_float32_tanh_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
    got = _run(x)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [1.0, -1.0, 0.0, -0.0, 1.0, -1.0])


def test_float64_tanh_is_libm_accurate():
    x = np.linspace(-5, 5, 1001)
    np.testing.assert_allclose(_run(x), np.tanh(x), rtol=1e-15, atol=0)


@pytest.mark.nojit
def test_float32_sigmoid_keeps_relative_accuracy_in_the_tails():
    x = np.concatenate([np.linspace(-80, 80, 100001), [np.inf, -np.inf, 0.0]]).astype(
        np.float32)
    xp = kiln.placeholder(x.shape, "float32")
    got = kiln.function([xp], K.sigmoid(xp), backend="cpu")(x)
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    rel = np.abs(got - want) / np.maximum(want, np.finfo(np.float32).tiny)
    finite = want > np.finfo(np.float32).tiny
    assert rel[finite].max() < 4e-7
    nan = kiln.function([xp], K.sigmoid(xp), backend="cpu")(np.full(x.shape, np.nan,
                                                                    np.float32))
    assert np.isnan(nan).all()


@pytest.mark.nojit
def test_float32_softmax_rows_special_values_and_accuracy():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(64, 128)) * 10).astype(np.float32)
    x[1, :5] = -np.inf          # masked entries: exactly zero weight
    x[2, 3] = np.nan            # a NaN row stays NaN
    x[3, :] = -1e9              # a fully masked row (finite): uniform
    x[4, 7] = 1e30              # one huge logit: all the weight
    xp = kiln.placeholder(x.shape, "float32")
    got = kiln.function([xp], K.softmax(xp, axis=-1), backend="cpu")(x)
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
    ok = ~np.isnan(want).any(axis=-1)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6, atol=1e-12)
    assert np.all(got[1, :5] == 0.0)
    assert np.isnan(got[2]).all()
    np.testing.assert_allclose(got[3], 1.0 / 128, rtol=1e-6)
    assert got[4, 7] == 1.0 and np.all(np.delete(got[4], 7) == 0.0)


# exp, log, log1p and expm1 in float32 loops: scalars.exp32 ... (codegen.F32_CALLS), within a
# few ulp of the float64 result everywhere (normal, denormal and extreme arguments and
# results), the special values exactly; the ops built on them (softplus, ELU) follow.
_ARGS = np.concatenate([np.linspace(-110, 90, 200001), np.linspace(-2, 2, 100001),
                        np.geomspace(1e-45, 1e-2, 2000), -np.geomspace(1e-45, 1e-2, 2000)])
_POSITIVE = np.concatenate([np.geomspace(1e-45, 3.4e38, 100001), np.linspace(0.5, 2, 100001)])
_F32_CASES = {
    "exp": (K.exp, np.exp, _ARGS, 1.0),
    "log": (K.log, np.log, _POSITIVE, 1.0),
    "log1p": (K.log1p, np.log1p, np.concatenate([_ARGS[_ARGS > -1], _POSITIVE]), 3.0),
    "expm1": (K.expm1, np.expm1, _ARGS, 3.0),
    "softplus": (K.softplus, lambda v: np.logaddexp(0.0, v), _ARGS, 3.0),
    "elu": (K.elu, lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0))), _ARGS, 3.0),
    # scalars.erf32 (codegen.spec.FAST_F32): the float64 reference is math.erf
    "erf": (K.erf, np.vectorize(math.erf, otypes=[np.float64]),
            np.concatenate([np.linspace(-6, 6, 200001), np.geomspace(1e-45, 1, 4000),
                            -np.geomspace(1e-45, 1, 4000), np.linspace(0.99, 1.01, 20001)]),
            2.0),
}
def _pi_scaled(bits: int) -> int:
    """floor(pi 2^bits) by Machin's formula in integers."""
    def atan_inv(n):
        one = 1 << (bits + 16)
        term, total, k, sign = one // n, one // n, 1, -1
        while term:
            term //= n * n
            k += 2
            total += sign * (term // k)
            sign = -sign
        return total
    return (4 * (4 * atan_inv(5) - atan_inv(239))) >> 16


def _hard_quarters() -> np.ndarray:
    """For every float32 exponent from 2^0 to 2^127: the float32 of that binade nearest to a
    multiple of pi / 2 that continued fractions find (M 2^e with M 2^e 2 / pi within a tiny
    distance of an integer)."""
    bits = 600
    two_over_pi = Fraction((1 << (2 * bits + 1)) // _pi_scaled(bits), 1 << bits)
    out = []
    for e in range(-23, 105):
        alpha = (two_over_pi * Fraction(2) ** e) % 1  # M alpha mod 1 is x 2 / pi mod 1
        # convergents q of alpha below 2^24, scaled into the binade [2^23, 2^24)
        a, q0, q1 = alpha, 1, 0
        best = None
        while True:
            ai = a.numerator // a.denominator
            q0, q1 = q1, ai * q1 + q0
            if q1 >= 1 << 24:
                break
            m = q1 * -(-(1 << 23) // q1)
            if m < 1 << 24:
                d = abs(m * alpha - round(m * alpha))
                if best is None or d < best[0]:
                    best = (d, m)
            frac = a - ai
            if frac == 0:
                break
            a = 1 / frac
        if best:
            out.append(float(best[1]) * 2.0 ** e)
    return np.array(out, np.float32)


# sin and cos (scalars.trig32): every range of the float32 line, the arguments nearest to
# multiples of pi / 2 (the result's relative precision rests on the reduction there), random
# bit patterns (every exponent), denormals and the largest floats
_QUARTERS = np.concatenate([np.arange(1, 30001), np.geomspace(3e4, 2e38, 30001)]) * (np.pi / 2)
_HARD = _hard_quarters()
_BITS = np.random.default_rng(7).integers(0, 2 ** 32, 40000, dtype=np.uint64).astype(
    np.uint32).view(np.float32)
_TRIG = np.concatenate([
    np.linspace(-100, 100, 100001), _QUARTERS, -_QUARTERS,
    np.nextafter(_QUARTERS.astype(np.float32), np.float32(np.inf)),
    np.geomspace(1e-45, 3.4e38, 20001), -np.geomspace(1e-45, 3.4e38, 20001),
    _BITS[np.isfinite(_BITS)], _HARD, -_HARD,
    [8388607.5, 8388608.0, 8388609.0, 2.0 ** 26, 2.0 ** 50, 2.0 ** 74, 2.0 ** 98, 2.0 ** 127]])
_F32_CASES["sin"] = (K.sin, np.sin, _TRIG, 1.0)
_F32_CASES["cos"] = (K.cos, np.cos, _TRIG, 1.0)
_SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, 1e-45, -1e-45, 88.8,
                     -104.0, 3.4e38], np.float32)


def _f32(op, x):
    xp = kiln.placeholder(x.shape, "float32")
    return kiln.function([xp], op(xp), backend="cpu")(x)


def _ulps(got, want):
    """|got - want| in units of the float32 spacing at ``want`` (the smallest denormal at least)."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / np.maximum(spacing, 2.0 ** -149)


@pytest.mark.nojit
@pytest.mark.parametrize("name", list(_F32_CASES))
def test_float32_exp_and_log_family_are_within_a_few_ulp(name):
    op, ref, args, limit = _F32_CASES[name]
    x = args.astype(np.float32)
    if os.environ.get("KILN_JIT") == "0":  # the same functions as Python: every 25th argument
        x = x[::25]
    got = _f32(op, x)
    with np.errstate(over="ignore"):
        want = ref(x.astype(np.float64))
    big = np.abs(want) > np.finfo(np.float32).max  # float32 overflow: inf
    assert np.isinf(got[big]).all() and (np.sign(got[big]) == np.sign(want[big])).all()
    err = _ulps(got[~big], want[~big])
    assert err.max() <= limit, (x[~big][err.argmax()], got[~big][err.argmax()],
                                want[~big][err.argmax()])
    with np.errstate(all="ignore"):
        special = ref(_SPECIAL.astype(np.float64)).astype(np.float32)
    got = _f32(op, _SPECIAL)
    exact = ~np.isfinite(special) | (special == 0) | (np.abs(_SPECIAL) < 1e-30)
    np.testing.assert_array_equal(got[exact], special[exact])  # NaN, inf, 0, -0, denormals
    assert _ulps(got[~exact], special[~exact].astype(np.float64)).max() <= limit


@pytest.mark.parametrize("name", ["exp", "log", "log1p", "expm1", "erf", "sin", "cos"])
def test_float32_exp_and_log_family_are_the_same_bits_native_numba_and_python(name,
                                                                               monkeypatch,
                                                                               tmp_path):
    """One definition (scalars.py) in three lowerings: native, numba and KILN_JIT=0 agree bit
    for bit."""
    op, _, args, _ = _F32_CASES[name]
    x = np.concatenate([args[::50], _SPECIAL]).astype(np.float32)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    runs = []
    for native, jit in (("1", "1"), ("0", "1"), ("1", "0")):
        monkeypatch.setenv("KILN_NATIVE", native)
        monkeypatch.setenv("KILN_JIT", jit)
        with np.errstate(all="ignore"):
            runs.append(_f32(op, x))
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0], other)


@pytest.mark.nojit
def test_float32_sin_is_odd_to_the_sign_of_zero_and_cos_even():
    """sin(-x) = -sin(x) bit for bit (sin(-0.0) is -0.0, which assert_array_equal does not
    tell from 0.0), cos(-x) = cos(x)."""
    x = np.concatenate([[0.0, 1e-45, 1e-30], _TRIG[_TRIG > 0][::40]]).astype(np.float32)
    sin_pos, sin_neg = _f32(K.sin, x), _f32(K.sin, -x)
    np.testing.assert_array_equal(sin_neg.view(np.int32), (-sin_pos).view(np.int32))
    assert np.signbit(sin_neg[0]) and not np.signbit(sin_pos[0])
    np.testing.assert_array_equal(_f32(K.cos, -x).view(np.int32), _f32(K.cos, x).view(np.int32))


def _declared(op: str, dtype: str) -> set[str]:
    """The functions the native loop of ``op`` over ``dtype`` declares (calls)."""
    program = ((op, (-1,), ()),)
    spec = LoopSpec(program, None, (dtype,), program_dtypes(program, (dtype,))[-1], 1, ("N",),
                    "N")
    text = llvm_loop.generate_ir(spec, "probe")
    return {line.split("@")[1].split("(")[0] for line in text.splitlines()
            if line.startswith("declare")}


@pytest.mark.parametrize("op", ["exp", "log", "log1p", "expm1", "sin", "cos"])
def test_float32_loops_call_no_libm_function(op):
    """The float32 loops compute these functions in registers (scalars.py), so they vectorize;
    a libm call per element kept them scalar (1M floats of sin: ~11 against ~4 ms). float64
    keeps libm's."""
    libm = {f"llvm.{op}.f32", f"{op}f", f"llvm.{op}.f64", op}
    assert not _declared(op, "float32") & libm
    assert _declared(op, "float64") & libm


@pytest.mark.parametrize("native", ["1", "0"])
def test_float32_sin_and_cos_keep_their_bits_inside_a_reduction(native, monkeypatch,
                                                                tmp_path):
    """A reduction's loop runs with reassociation allowed for its accumulation (numba's flags
    are the whole kernel's); trig32's exact reduction steps must not be rearranged: the
    fused max of cos and the sum of sin over two equal columns against the elementwise
    results, at the arguments nearest to multiples of pi / 2."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KILN_NATIVE", native)
    x1 = np.concatenate([_QUARTERS[::20], np.nextafter(_QUARTERS[::20].astype(np.float32),
                                                        np.float32(np.inf))]).astype(np.float32)
    x = np.stack([x1, x1], axis=1)
    xp = kiln.placeholder(x.shape, "float32")
    f = kiln.function([xp], [K.sin(xp), K.max(K.cos(xp), axis=1), K.sum(K.sin(xp), axis=1)],
                      backend="cpu")
    sin, cos_max, sin_sum = f(x)
    assert any(s.label == "fused[cos,max]" for p in f.program._plans.values() for s in p.steps)
    np.testing.assert_array_equal(sin_sum, sin[:, 0] * 2)
    want = np.cos(x1.astype(np.float64))
    assert _ulps(cos_max, want).max() <= 0.5 + 1e-6
    assert _ulps(sin[:, 0], np.sin(x1.astype(np.float64))).max() <= 0.5 + 1e-6


def test_scalar_functions_expand_from_the_source_imported(monkeypatch, tmp_path):
    """The native loops expand scalars.py's functions from the text read with the import
    (scalars.SOURCE), looked up by name: reading the file again at the imported line numbers
    (inspect) once handed cos32's kernel sin32's lines, after an edit above them."""
    import linecache

    from kiln.core.backends.cpu.codegen import llvm_expr, scalars

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    real = linecache.getlines

    def shifted(filename, module_globals=None):  # the file with three lines added on top
        lines = real(filename, module_globals)
        return ["\n"] * 3 + lines if filename == scalars.__file__ else lines

    monkeypatch.setattr(linecache, "getlines", shifted)
    monkeypatch.setattr(llvm_expr, "_trees", {})
    assert llvm_expr.function_tree("cos32").name == "cos32"
    x = np.array([0.0, 1.0, -2.0], np.float32)
    np.testing.assert_array_equal(_f32(K.cos, x), np.cos(x.astype(np.float64)).astype(
        np.float32))


def test_float64_exp_and_log_stay_libm():
    x = np.linspace(-700, 700, 10001)
    xp = kiln.placeholder(x.shape, "float64")
    got = kiln.function([xp], [K.exp(xp), K.log(K.abs(xp) + 1e-300)], backend="cpu")(x)
    np.testing.assert_allclose(got[0], np.exp(x), rtol=1e-15, atol=0)
    np.testing.assert_allclose(got[1], np.log(np.abs(x) + 1e-300), rtol=1e-15, atol=0)


@pytest.mark.nojit
@pytest.mark.parametrize("n", [1, 5, 8, 13, 4099])
def test_float32_softmax_family_rows_against_float64(n):
    """softmax, log_softmax and both cross-entropies of float32 rows (the max and the float64
    sum of exp_neg32 in eight lanes) against float64 NumPy; NaN and infinite rows are NaN."""
    rng = np.random.default_rng(n)
    x = (rng.normal(size=(7, n)) * 8).astype(np.float32)
    x[5, 0], x[6, -1] = np.nan, -np.inf
    labels = rng.integers(0, n, size=7).astype(np.int32)
    p = kiln.placeholder((None, n))
    lab = kiln.placeholder((None,), "int32")
    y = kiln.placeholder((None, n))
    got = kiln.function([p, lab, y], [K.softmax(p), K.log_softmax(p),
                                      K.sparse_softmax_cross_entropy(p, lab),
                                      K.softmax_cross_entropy(p, y)], backend="cpu")(
        x, labels, np.eye(n, dtype=np.float32)[labels])
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        shifted = x64 - x64.max(axis=1, keepdims=True)
        log_sm = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    xent = -log_sm[np.arange(7), labels]
    nan_rows = np.isnan(x64).any(axis=1)
    ok = ~nan_rows  # a -inf logit is an exact 0 (its log -inf)
    # x - max rounds in float32 first: a relative error of |x - max| * 2^-24 in exp
    np.testing.assert_allclose(got[0][ok], np.exp(log_sm[ok]), rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(got[1][ok], log_sm[ok], rtol=2e-6, atol=2e-6)
    for g in got[2:]:
        np.testing.assert_allclose(g[ok], xent[ok], rtol=2e-6, atol=2e-6)
    for g in got:
        assert np.isnan(g[nan_rows]).all()
