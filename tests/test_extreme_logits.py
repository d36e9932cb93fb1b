"""Cross-entropies from extreme logits (|x| near float32's maximum) are finite where the true
value is, against a float64 NumPy reference with log-sum-exp; once categorical cross-entropy
from logits [3e38, -3e38, 0] was NaN: x - max overflows to -inf for the middle class, and its
label 0 times -inf is NaN (sparse labels never multiply). Every path is covered: the loss
functions and objects, the op on every backend, the forms the simplifier rewrites into it, the
class axis elsewhere than last, a softmax/sigmoid model output (logits recovered) and the
gradient.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import losses as L

BIG = float(np.float32(3e38))
LOGITS = np.array([[BIG, -BIG, 0.0], [BIG, -BIG, 0.0], [BIG, -BIG, 0.0], [BIG, -BIG, 0.0],
                   [-BIG, 0.0, BIG], [1.0, 2.0, 3.0], [BIG, BIG, -BIG]], np.float32)
LABELS = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0], [0.5, 0, 0.5], [0, 0.25, 0.75],
                   [0.2, 0.3, 0.5], [0.5, 0.5, 0]], np.float32)
OVERFLOW = 2  # its true loss, 6e38, is beyond float32: inf


def _cce_ref(logits, labels) -> np.ndarray:
    """float64 log-sum-exp: sum(y * (log(sum(exp(z))) - z)) with z = x - max(x) (exact here;
    terms with y = 0 are 0, every z being finite in float64)."""
    x, y = logits.astype(np.float64), labels.astype(np.float64)
    z = x - np.max(x, axis=-1, keepdims=True)
    lse = np.log(np.sum(np.exp(z), axis=-1, keepdims=True))
    return np.sum(y * (lse - z), axis=-1)


def _bce_ref(logits, labels) -> np.ndarray:
    x, y = logits.astype(np.float64), labels.astype(np.float64)
    return np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))


def _close(got, ref64):
    """float32 result against the float64 reference rounded to float32 (inf where it
    overflows)."""
    with np.errstate(over="ignore"):
        want = ref64.astype(np.float32)
    assert not np.isnan(got).any(), got
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_reference():
    ref = _cce_ref(LOGITS, LABELS)
    np.testing.assert_allclose(ref[[0, 1, 2, 3, 4, 6]], [0.0, BIG, 2 * BIG, BIG / 2, BIG / 4,
                                                         np.log(2)], rtol=1e-12)


def test_categorical_crossentropy_from_logits():
    ref = _cce_ref(LOGITS, LABELS)
    _close(L.categorical_crossentropy(LABELS, LOGITS, from_logits=True), ref)
    got = L.CategoricalCrossentropy(from_logits=True, reduction=None)(LABELS, LOGITS)
    _close(got, ref)
    # a row whose loss overflows float32 is inf, the others finite
    assert np.isinf(got[OVERFLOW]) and np.isfinite(np.delete(got, OVERFLOW)).all()


def test_label_smoothing_and_class_axis_elsewhere():
    smooth = LABELS * 0.9 + 0.1 / 3
    _close(L.categorical_crossentropy(LABELS, LOGITS, from_logits=True, label_smoothing=0.1),
           _cce_ref(LOGITS, smooth))
    # classes on axis 0
    _close(L.categorical_crossentropy(LABELS.T.copy(), LOGITS.T.copy(), from_logits=True,
                                      axis=0), _cce_ref(LOGITS, LABELS))


def _cuda_skip():
    if importlib.util.find_spec("numba_cuda") is None:
        pytest.skip("numba-cuda is not installed")
    from kiln.core.backends.cuda import is_available

    if not is_available():
        pytest.skip("no CUDA device or simulator (set NUMBA_ENABLE_CUDASIM=1)")


FORMS = {
    "op": lambda x, y: K.softmax_cross_entropy(x, y),
    "log_softmax": lambda x, y: -K.sum(y * K.log_softmax(x), axis=-1),  # simplify rewrites
    "log_of_softmax": lambda x, y: K.sum(-(y * K.log(K.softmax(x))), axis=-1),
}


@pytest.mark.parametrize("backend", ["reference", "cpu", "cpu-nojit", "cuda"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_softmax_cross_entropy_on_every_backend(form, backend, monkeypatch):
    if backend == "cuda":
        _cuda_skip()
    if backend == "cpu-nojit":
        monkeypatch.setenv("KILN_JIT", "0")
        backend = "cpu"
    x, y = kiln.placeholder((None, 3)), kiln.placeholder((None, 3))
    fn = kiln.function([x, y], FORMS[form](x, y), backend=backend)
    with np.errstate(over="ignore", invalid="ignore"):
        got = fn(LOGITS, LABELS)
    _close(got, _cce_ref(LOGITS, LABELS))


def test_gradient_with_respect_to_extreme_logits():
    """d/dx sum(CE) = softmax(x) * sum(y) - y: finite, against float64."""
    x, y = kiln.placeholder((None, 3)), kiln.placeholder((None, 3))
    (g,) = kiln.grad(K.sum(K.softmax_cross_entropy(x, y)), [x])
    got = kiln.function([x, y], g)(LOGITS, LABELS)
    x64 = LOGITS.astype(np.float64)
    z = x64 - x64.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    want = p * LABELS.sum(-1, keepdims=True) - LABELS
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_softmax_model_output_uses_the_stable_form():
    """categorical_crossentropy of a softmax output recovers the logits (Keras'
    _keras_logits); the model's evaluate agrees with the float64 reference."""
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(
        3, kernel_initializer="identity", use_bias=False, activation="softmax")])
    model.compile("sgd", "categorical_crossentropy")
    rows = [0, 1, 3, 5, 6]  # finite true losses
    loss = model.evaluate(LOGITS[rows], LABELS[rows], verbose=0, batch_size=8)
    np.testing.assert_allclose(loss, np.mean(_cce_ref(LOGITS[rows], LABELS[rows])), rtol=1e-6)


BX = np.array([[BIG], [BIG], [-BIG], [-BIG], [BIG], [0.0], [100.0], [-100.0]], np.float32)
BY = np.array([[0.0], [1.0], [0.0], [1.0], [0.5], [0.5], [0.0], [1.0]], np.float32)


def test_binary_crossentropy_from_logits():
    ref = _bce_ref(BX, BY)[:, 0]
    _close(L.binary_crossentropy(BY, BX, from_logits=True), ref)
    _close(L.BinaryCrossentropy(from_logits=True, reduction=None)(BY, BX), ref)
    smooth = BY * 0.8 + 0.1
    _close(L.binary_crossentropy(BY, BX, from_logits=True, label_smoothing=0.2),
           _bce_ref(BX, smooth)[:, 0])


@pytest.mark.parametrize("backend", ["reference", "cpu", "cpu-nojit"])
def test_binary_crossentropy_of_a_sigmoid_output(backend, monkeypatch):
    """BCE of sigmoid(x) recovers x: finite at x = +-3e38, where the probability is 0 or 1."""
    if backend == "cpu-nojit":
        monkeypatch.setenv("KILN_JIT", "0")
        backend = "cpu"
    x, y = kiln.placeholder((None, 1)), kiln.placeholder((None, 1))
    fn = kiln.function([x, y], L.binary_crossentropy(y, K.sigmoid(x)), backend=backend)
    _close(fn(BX, BY), _bce_ref(BX, BY)[:, 0])


def test_sparse_categorical_crossentropy_agrees():
    labels = np.array([0, 2, 1, 0, 2, 2, 1])
    ref = _cce_ref(LOGITS, np.eye(3, dtype=np.float32)[labels])
    _close(L.sparse_categorical_crossentropy(labels, LOGITS, from_logits=True), ref)


def test_the_mean_over_a_batch_of_losses_near_the_float32_maximum_is_finite():
    """Binary cross-entropy at logit 3e38, label 0 is 3e38 per sample; its mean over a batch
    was inf (the losses' sum overflows float32): the mean divides before it sums."""
    x = np.full((4, 1), BIG, np.float32)
    y = np.zeros((4, 1), np.float32)
    want = np.mean(_bce_ref(x, y))
    np.testing.assert_allclose(L.BinaryCrossentropy(from_logits=True)(y, x), want, rtol=1e-6)
    weighted = L.BinaryCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
    np.testing.assert_allclose(weighted(y, x, sample_weight=np.full(4, 0.5, np.float32)),
                               want, rtol=1e-6)
    model = kiln.Sequential([kiln.Input((1,)), kiln.layers.Dense(
        1, kernel_initializer="ones", use_bias=False)])
    model.compile("sgd", L.BinaryCrossentropy(from_logits=True))
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), want, rtol=1e-6)
