"""NaN propagates through every activation and max-based op as it does in NumPy (np.maximum,
np.minimum, np.clip, np.max propagate NaN from either operand): on the reference, the CPU (JIT
and ``KILN_JIT=0``, one kernel per op and fused), and CUDA on numba-cuda's simulator. relu once
turned NaN into 0, so predict on NaN inputs returned finite, wrong numbers.

The oracle is the same formula in float64 NumPy; ``assert_allclose`` also requires NaN in the
same places. The gradient at NaN is not specified beyond running.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import activations as A

BACKENDS = ["reference", "cpu", "cpu-nojit", "cuda"]
NAN, INF = np.nan, np.inf
X = np.array([[NAN, -3.0, -0.5, 0.0, 0.25, 0.75, 2.0, 7.0],
              [INF, -INF, NAN, 1.5, -1.0, NAN, 6.5, -0.0]], np.float32)


def _use(backend: str, monkeypatch) -> str:
    if backend == "cuda":
        if importlib.util.find_spec("numba_cuda") is None:
            pytest.skip("numba-cuda is not installed")
        from kiln.core.backends.cuda import is_available

        if not is_available():
            pytest.skip("no CUDA device or simulator (set NUMBA_ENABLE_CUDASIM=1)")
    if backend == "cpu-nojit":
        monkeypatch.setenv("KILN_JIT", "0")
        return "cpu"
    return backend


def _run(build, feeds, backend, optimize=True):
    phs = [kiln.placeholder(a.shape, a.dtype.name) for a in feeds]
    fn = kiln.function(phs, build(*phs), backend=backend, optimize=optimize)
    with np.errstate(invalid="ignore", over="ignore"):
        return fn(*feeds)


def _np_erf(x):
    return np.vectorize(lambda v: math.erf(v) if not np.isnan(v) else np.nan)(x)


def _np_sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _np_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

ACTIVATIONS = {
    "relu": (A.relu, lambda x: np.maximum(x, 0)),
    "relu6": (A.relu6, lambda x: np.minimum(np.maximum(x, 0), 6)),
    "relu_max_value": (lambda t: A.relu(t, max_value=2.0), lambda x: np.clip(x, 0, 2)),
    "relu_slope_max": (lambda t: A.relu(t, negative_slope=0.1, max_value=2.0),
                       lambda x: np.minimum(np.where(x >= 0, x, 0.1 * x), 2)),
    "relu_threshold": (lambda t: A.relu(t, threshold=0.5), lambda x: np.where(x < 0.5, 0, x)),
    "relu_threshold_slope": (lambda t: A.relu(t, threshold=0.5, negative_slope=0.1),
                             lambda x: np.where(x < 0.5, 0.1 * (x - 0.5), x)),
    "leaky_relu": (A.leaky_relu, lambda x: np.where(x >= 0, x, 0.2 * x)),
    "elu": (A.elu, _np_elu),
    "selu": (A.selu, lambda x: SELU_S * _np_elu(x, SELU_A)),
    "hard_sigmoid": (A.hard_sigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hard_silu": (A.hard_silu, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "sigmoid": (A.sigmoid, _np_sigmoid),
    "tanh": (A.tanh, np.tanh),
    "silu": (A.silu, lambda x: x * _np_sigmoid(x)),
    "softplus": (A.softplus, lambda x: np.logaddexp(0, x)),
    "gelu": (A.gelu, lambda x: 0.5 * x * (1 + _np_erf(x / np.sqrt(2)))),
    "softsign": (A.softsign, lambda x: x / (np.abs(x) + 1)),
    "mish": (A.mish, lambda x: x * np.tanh(np.logaddexp(0, x))),
}


def _expected(ref, *xs):
    with np.errstate(invalid="ignore", over="ignore"):
        return ref(*[np.asarray(x, np.float64) for x in xs])


def _check(got, want):
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_propagate_nan(name, backend, monkeypatch):
    selected = _use(backend, monkeypatch)
    act, ref = ACTIVATIONS[name]
    want = _expected(ref, X)
    assert np.isnan(want[0, 0]) and np.isnan(want[1, 2]) and np.isnan(want[1, 5])
    # fused with the ops around it (what a Dense layer's activation becomes), and alone
    got = _run(lambda t: act(t * 1.0 + 0.0), [X], selected)
    _check(got, want)
    if backend in ("cpu", "cpu-nojit"):
        _check(_run(act, [X], selected, optimize=False), want)


A2 = np.array([[NAN, 1.0, 2.0, -1.0, 3.0, NAN, -INF, 0.5]], np.float32)
B2 = np.array([[0.0, NAN, 1.0, NAN, NAN, NAN, NAN, INF]], np.float32)

BINARY = {
    "maximum": (K.maximum, np.maximum),
    "minimum": (K.minimum, np.minimum),
    "clip_x": (lambda a, b: K.clip(a, -1.0, 2.5), lambda a, b: np.clip(a, -1, 2.5)),
    "clip_lo": (lambda a, b: K.clip(a, b, 2.5), lambda a, b: np.minimum(np.maximum(a, b), 2.5)),
    "clip_hi": (lambda a, b: K.clip(a, -1.0, b), lambda a, b: np.minimum(np.maximum(a, -1), b)),
    "max_then_relu": (lambda a, b: K.relu(K.maximum(a, b) * 2.0 - 1.0),
                      lambda a, b: np.maximum(np.maximum(a, b) * 2 - 1, 0)),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_max_based_ops_propagate_nan_from_either_operand(name, backend, monkeypatch):
    selected = _use(backend, monkeypatch)
    op, ref = BINARY[name]
    for a, b in ((A2, B2), (B2, A2)):
        want = _expected(ref, a, b)
        _check(_run(op, [a, b], selected), want)
        if backend in ("cpu", "cpu-nojit"):
            _check(_run(op, [a, b], selected, optimize=False), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sign_of_nan_is_nan_and_integer_relu_is_unchanged(backend, monkeypatch):
    selected = _use(backend, monkeypatch)
    _check(_run(K.sign, [X], selected, optimize=False), _expected(np.sign, X))
    ints = np.array([[-3, 0, 5, -1]], np.int32)
    got = _run(K.relu, [ints], selected, optimize=False)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.maximum(ints, 0))


def _windows_max(x, size, stride):
    n = (x.shape[1] - size) // stride + 1
    return np.stack([np.max(x[:, i * stride:i * stride + size], axis=1) for i in range(n)],
                    axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_pooling_and_max_reductions_propagate_nan(backend, monkeypatch):
    selected = _use(backend, monkeypatch)
    # NaN first, in the middle and last in a window; a window with none
    x = np.array([[1.0, NAN, 3.0, 2.0, 5.0, 4.0, NAN, -1.0, 0.5, 9.0]], np.float32)
    got = _run(lambda t: K.reshape(K.max_pool1d(K.reshape(t, (1, 10, 1)), 3, 1), (1, 8)),
               [x], selected)
    _check(got, _windows_max(x.astype(np.float64), 3, 1))
    x2 = x[:, :8].reshape(1, 2, 4, 1)
    got = _run(lambda t: K.max_pool2d(t, 2, 2), [x2], selected)
    want = np.max(x2.reshape(1, 1, 2, 2, 2, 1).transpose(0, 1, 3, 2, 4, 5).reshape(1, 1, 2, 4, 1),
                  axis=3)
    _check(got, want)
    rows = np.array([[1.0, 2.0, NAN, 0.0], [3.0, -1.0, 2.0, 1.0]], np.float32)
    _check(_run(lambda t: K.max(t, axis=1), [rows], selected), np.max(rows, axis=1))
    _check(_run(lambda t: K.min(t, axis=1), [rows], selected), np.min(rows, axis=1))
    _check(_run(lambda t: K.relu(K.max(t, axis=1)), [rows], selected),
           np.maximum(np.max(rows, axis=1), 0))


def test_predict_of_a_relu_network_on_nan_is_nan():
    """The issue's symptom: a NaN input gave a finite prediction."""
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(4, activation="relu"),
                             kiln.layers.Dense(2, activation="relu6")])
    x = np.array([[0.1, 0.2, 0.3], [NAN, 0.0, 1.0]], np.float32)
    out = model.predict(x, verbose=0)
    assert np.isfinite(out[0]).all() and np.isnan(out[1]).all()


@pytest.mark.parametrize("name", ["relu", "relu6", "elu", "leaky_relu", "relu_threshold"])
def test_gradient_at_nan_runs(name):
    act, _ = ACTIVATIONS[name]
    x = kiln.placeholder(X.shape)
    (g,) = kiln.grad(K.sum(act(x)), [x])
    got = kiln.function([x], g)(X)
    assert got.shape == X.shape and got.dtype == np.float32
    finite = np.isfinite(X) & (np.abs(X) > 0.1)
    assert np.isfinite(got[finite]).all()


# Sums whose terms cancel exactly for finite values: NaN and inf must survive them. A loop's
# reduction once carried LLVM's ``reassoc nsz`` flags (the body's too, where nothing else was
# stored): InstCombine then reassociated into the summed value and cancelled ``x + (-x)``,
# so a NaN or an inf input gave a sum of 0 (native and numba loops alike).
CANCELLING = {
    "sum(x - x)": (lambda t: K.sum(t - t), lambda x: np.sum(x - x)),
    "sum(x + -x, axis=1)": (lambda t: K.sum(t + (-t), axis=1), lambda x: np.sum(x + -x, axis=1)),
    "mean(2x - 2x, axis=0)": (lambda t: K.mean(t * 2.0 - t * 2.0, axis=0),
                              lambda x: np.mean(x * 2 - x * 2, axis=0)),
    "prod(x - x + 1)": (lambda t: K.prod(t - t + 1.0, axis=1),
                        lambda x: np.prod(x - x + 1, axis=1)),
    # a member stored beside the sum in one loop (a reduction group)
    "[-x, sum(x + -x)]": (lambda t: [-t, K.sum(t + (-t), axis=1)],
                          lambda x: [-x, np.sum(x + -x, axis=1)]),
}


@pytest.mark.parametrize("case", list(CANCELLING))
@pytest.mark.parametrize("backend", ["reference", "cpu", "cpu-numba", "cpu-nojit"])
def test_a_reduction_does_not_cancel_nan_or_inf_away(case, backend, monkeypatch, pass_options,
                                                     tmp_path):
    """``cpu``: native loops; ``cpu-numba``: numba's (KILN_NATIVE=0)."""

    pass_options(fuse_tail_min_elements=0)
    monkeypatch.setenv("KILN_NATIVE", "0" if backend == "cpu-numba" else "1")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    selected = _use(backend.replace("-numba", ""), monkeypatch)
    build, reference = CANCELLING[case]
    x = np.tile(X, (3, 5))  # NaN, inf and -inf in some rows and columns, none in others
    got = _run(build, [x], selected)
    with np.errstate(invalid="ignore"):
        want = reference(x.astype(np.float64))
    for g, w in zip(got if isinstance(got, list) else [got], want if isinstance(want, list)
                    else [want]):
        _check(g, w)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("backend", ["cpu", "cpu-numba"])
def test_long_max_and_min_reductions_propagate_nan(reduce, axis, backend, monkeypatch, tmp_path):
    """Rows long enough for the vector loop and its scalar tail (4,109 = 256 x 16 + 13), with
    NaN first, last, in the middle or nowhere, infinities, and a row of -inf only: the native
    loop's ``llvm.maximum`` / ``llvm.minimum`` against NumPy (and numba's select)."""
    monkeypatch.setenv("KILN_NATIVE", "0" if backend == "cpu-numba" else "1")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    x = np.random.default_rng(3).normal(size=(6, 4109)).astype(np.float32)
    x[0, 0] = x[1, -1] = x[2, 2050] = NAN
    x[3, 7], x[3, 4000] = INF, -INF
    x[4] = -INF
    got = _run(lambda t: getattr(K, reduce)(t * 1.0, axis=axis), [x], "cpu")
    _check(got, getattr(np, reduce)(x.astype(np.float64), axis=axis))
