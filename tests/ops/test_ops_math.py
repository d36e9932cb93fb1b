"""Issue 44, keras.ops.math: kiln.ops.math against Keras 3 (eager and compiled graph) and
SciPy / NumPy closed forms, finite-difference gradients, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops
from test_ops_numpy import check

import kiln.ops as K

rng = np.random.default_rng(11)
X = rng.normal(size=(3, 8)).astype("float32")
XI = rng.normal(size=(3, 8)).astype("float32")
IMG = rng.normal(size=(2, 4, 6)).astype("float32")
DATA = rng.normal(size=(6, 2, 3)).astype("float32")
IDS = np.array([0, 2, 0, 3, -1, 2], "int32")
SIG = rng.normal(size=(2, 40)).astype("float32")


def _k(name, *arrays, **kw):
    return (lambda *a: getattr(K.math, name)(*a, **kw),
            lambda ko: lambda *a: getattr(ko, name)(*a, **kw), list(arrays))


def _pair(name, *arrays, **kw):  # ops taking a (real, imag) pair
    return (lambda r, i: getattr(K.math, name)((r, i), **kw),
            lambda ko: lambda r, i: getattr(ko, name)((r, i), **kw), list(arrays))


def _np_pair(name, fn, *arrays):
    def ref(r, i):
        z = fn(r.astype("float64") + 1j * i)
        return z.real.astype(r.dtype), z.imag.astype(r.dtype)
    return (lambda r, i: getattr(K.math, name)((r, i)), lambda ko: ref, list(arrays))


CASES = {
    "segment_sum": _k("segment_sum", DATA, IDS, num_segments=4),
    "segment_max": _k("segment_max", DATA, IDS, num_segments=5),
    "segment_min": _k("segment_min", DATA, IDS, num_segments=4),
    "segment_prod": _k("segment_prod", DATA, IDS, num_segments=4),
    "in_top_k": _k("in_top_k", np.array([0, 3, 7], "int32"), X, k=3),
    "cdist": _k("cdist", IMG, IMG[:, :3] + 1),
    "extract_sequences": _k("extract_sequences", SIG, sequence_length=7, sequence_stride=3),
    # NumPy's FFTs as the oracle (Keras' NumPy backend runs these through JAX, whose threads
    # would then sit beside kiln's forked compile workers)
    "fft": _np_pair("fft", np.fft.fft, X, XI),
    "fft2": _np_pair("fft2", np.fft.fft2, IMG, IMG[::-1].copy()),
    "ifft2": _np_pair("ifft2", np.fft.ifft2, IMG, IMG[::-1].copy()),
    "rfft": _k("rfft", X),
    "rfft_length": _k("rfft", X, fft_length=6),
    "rfft_length_odd": _k("rfft", X, fft_length=11),
    "irfft": _pair("irfft", X[:, :5], XI[:, :5]),
    "irfft_length_odd": _pair("irfft", X[:, :5], XI[:, :5], fft_length=9),
    "stft": _k("stft", SIG, sequence_length=10, sequence_stride=4, fft_length=16),
    "stft_hamming_nocenter": _k("stft", SIG, sequence_length=8, sequence_stride=3,
                                fft_length=8, window="hamming", center=False),
    "erfc": _k("erfc", X * 2),
    "erfinv": _k("erfinv", np.tanh(X)),
    "logdet": _k("logdet", (lambda a: a @ a.T + np.eye(3, dtype="float32"))(X[:, :3])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(name):
    ko = keras_ops()
    fn, kfn, arrays = CASES[name]
    check_keras(fn, kfn(ko), *arrays, rtol=1e-4, atol=2e-5)


def test_istft_inverts_stft():
    """istft(stft(x)) is x (scipy's normalization; the windowed frames overlap enough)."""
    for kw in ({}, {"window": "hamming"}, {"window": None, "center": False}):
        spec = K.stft(SIG, 16, 4, 16, **kw)
        back = K.istft(spec, 16, 4, 16, length=40 if kw.get("center", True) else None, **kw)
        n = back.shape[-1]
        np.testing.assert_allclose(back, SIG[:, :n], atol=1e-4)


def test_istft_matches_keras():
    ko = keras_ops()
    re, im = K.stft(SIG, 10, 4, 16)
    for kw in ({}, {"length": 35}, {"window": "hamming", "center": False}):
        want = np.asarray(ko.istft((re, im), 10, 4, 16, **kw))
        check(lambda r, i, kw=kw: K.istft((r, i), 10, 4, 16, **kw), lambda r, i, w=want: w, re, im,
              rtol=1e-4, atol=1e-5)


def test_special_functions_closed_forms():
    xs = np.linspace(-0.9999, 0.9999, 41)
    np.testing.assert_allclose(K.erf(K.erfinv(xs)), xs, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(K.erfinv(np.array([1.0, -1.0])), [np.inf, -np.inf])
    assert np.isnan(K.erfinv(np.array([1.5])))[0]
    z = np.linspace(-5, 9, 29)
    want = np.array([math.erfc(v) for v in z])
    np.testing.assert_allclose(K.erfc(z), want, rtol=2e-7)


def test_segment_ids_infer_num_segments():
    out = K.segment_sum(DATA, IDS)
    assert out.shape == (4, 2, 3)
    np.testing.assert_allclose(out[2], DATA[1] + DATA[5], rtol=1e-6)


GRADS = {
    "segment_sum": (lambda d: K.segment_sum(d, IDS, 4), [DATA]),
    "segment_max": (lambda d: K.segment_max(d, np.array([0, 1, 0, 1, -1, 2], "int32"), 3),
                    [DATA]),  # no empty segment: its -inf has no finite difference
    "segment_prod": (lambda d: K.segment_prod(d, IDS, 4), [DATA]),
    "cdist": (K.cdist, [IMG, IMG[:, :3] + 1]),
    "fft2_real": (lambda r, i: K.fft2((r, i))[0], [IMG, IMG[::-1]]),
    "irfft": (lambda r, i: K.irfft((r, i), 9), [X[:, :5], XI[:, :5]]),
    "stft_imag": (lambda s: K.stft(s, 10, 4, 16)[1], [SIG[:1]]),
    "erfc": (K.erfc, [X]),
    "erfinv": (K.erfinv, [np.tanh(X)]),
    "logdet": (K.logdet, [rng.normal(size=(3, 3)) + 3 * np.eye(3)]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradient_matches_finite_differences(name):
    fn, arrays = GRADS[name]
    check_grad(fn, *arrays, rtol=2e-4, atol=1e-6)


def test_erfinv_gradient_is_exact():
    xs = np.linspace(-0.99, 0.99, 9)
    (g,) = K.linalg.jvp(K.erfinv, (xs,), (np.ones_like(xs),))[1:]
    np.testing.assert_allclose(g, math.sqrt(math.pi) / 2 * np.exp(K.erfinv(xs) ** 2),
                               rtol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="fft: expected a tuple"):
        K.fft(X)
    with pytest.raises(ValueError, match="stft: fft_length 8 must be >= sequence_length 10"):
        K.stft(SIG, 10, 4, 8)
    with pytest.raises(ValueError, match="segment_sum: num_segments must be given"):
        import kiln
        K.segment_sum(kiln.placeholder((6, 2)), kiln.placeholder((6,), "int32"))
