"""Losses against NumPy formulas, reductions, sample weights, the fused stable forms and
lookup by name."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln import losses as L
from kiln.core import toposort

EPS = 1e-7
rng = np.random.default_rng(0)
YT = rng.uniform(0, 1, (6, 4))
YP = rng.uniform(0.05, 0.95, (6, 4))


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _huber(t, p, d=1.0):
    e = np.abs(p - t)
    return np.where(e <= d, 0.5 * e ** 2, d * e - 0.5 * d * d).mean(-1)


def _bce(t, p):
    p = np.clip(p, EPS, 1 - EPS)
    return -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean(-1)


def _cce(t, p):
    p = p / p.sum(-1, keepdims=True)
    return -(t * np.log(np.clip(p, EPS, 1 - EPS))).sum(-1)


NUMPY = {
    "mean_squared_error": lambda t, p: ((t - p) ** 2).mean(-1),
    "mean_absolute_error": lambda t, p: np.abs(t - p).mean(-1),
    "mean_absolute_percentage_error":
        lambda t, p: 100 * (np.abs(t - p) / np.maximum(np.abs(t), EPS)).mean(-1),
    "mean_squared_logarithmic_error":
        lambda t, p: ((np.log(np.maximum(p, EPS) + 1) - np.log(np.maximum(t, EPS) + 1)) ** 2
                      ).mean(-1),
    "huber": _huber,
    "log_cosh": lambda t, p: np.log(np.cosh(p - t)).mean(-1),
    "binary_crossentropy": _bce,
    "categorical_crossentropy": _cce,
    "kl_divergence": lambda t, p: (np.clip(t, EPS, 1) * np.log(
        np.clip(t, EPS, 1) / np.clip(p, EPS, 1))).sum(-1),
    "poisson": lambda t, p: (p - t * np.log(p + EPS)).mean(-1),
    "hinge": lambda t, p: np.maximum(1 - t * p, 0).mean(-1),
    "squared_hinge": lambda t, p: (np.maximum(1 - t * p, 0) ** 2).mean(-1),
}


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_loss_function_matches_numpy(name):
    t, p = YT, YP
    if name in ("hinge", "squared_hinge"):
        t = np.where(YT > 0.5, 1.0, -1.0)
    got = L.get(name)(t, p)
    np.testing.assert_allclose(got, NUMPY[name](t, p), rtol=2e-5, atol=1e-6)


def test_hinge_converts_binary_labels():
    t01 = (YT > 0.5).astype(np.float64)
    np.testing.assert_allclose(L.hinge(t01, YP - 0.5), NUMPY["hinge"](2 * t01 - 1, YP - 0.5),
                               rtol=1e-5)


def test_sparse_categorical_crossentropy_and_logits():
    labels = np.array([0, 3, 1, 2, 2, 0])
    want = -np.log((YP / YP.sum(-1, keepdims=True))[np.arange(6), labels])
    np.testing.assert_allclose(L.sparse_categorical_crossentropy(labels, YP), want, rtol=1e-5)
    np.testing.assert_allclose(L.sparse_categorical_crossentropy(labels[:, None], YP), want,
                               rtol=1e-5)
    logits = rng.normal(size=(6, 4)) * 3
    want = -np.log(_softmax(logits)[np.arange(6), labels])
    np.testing.assert_allclose(
        L.sparse_categorical_crossentropy(labels, logits, from_logits=True), want, rtol=1e-5)
    np.testing.assert_allclose(L.SparseCategoricalCrossentropy(from_logits=True)(
        labels, logits), want.mean(), rtol=1e-5)


def test_binary_and_categorical_from_logits_and_label_smoothing():
    logits = rng.normal(size=(6, 4)) * 3
    t = (YT > 0.5).astype(np.float64)
    want = (np.maximum(logits, 0) - logits * t + np.log1p(np.exp(-np.abs(logits)))).mean(-1)
    np.testing.assert_allclose(L.binary_crossentropy(t, logits, from_logits=True), want,
                               rtol=1e-5)
    ls = 0.2
    np.testing.assert_allclose(L.binary_crossentropy(t, YP, label_smoothing=ls),
                               _bce(t * (1 - ls) + 0.5 * ls, YP), rtol=1e-5)
    onehot = np.eye(4)[[0, 1, 2, 3, 0, 1]]
    np.testing.assert_allclose(L.categorical_crossentropy(onehot, logits, from_logits=True),
                               -(onehot * np.log(_softmax(logits))).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(L.categorical_crossentropy(onehot, YP, label_smoothing=ls),
                               _cce(onehot * (1 - ls) + ls / 4, YP), rtol=1e-5)


def test_fused_softmax_cross_entropy_is_used_and_stable():
    logits_ph = kiln.placeholder((None, 4))
    probs = K.softmax(logits_ph)
    labels_ph = kiln.placeholder((None,), "int32")
    onehot_ph = kiln.placeholder((None, 4))
    sparse = L.sparse_categorical_crossentropy(labels_ph, probs)
    dense = L.categorical_crossentropy(onehot_ph, probs)
    for node, op in ((sparse, "sparse_softmax_cross_entropy"), (dense, "softmax_cross_entropy")):
        ops = {n.op for n in toposort([node])}
        assert op in ops and "log" not in ops and "softmax" not in ops
    big = np.array([[200.0, 0.0, -200.0, 0.0]], np.float32)
    f = kiln.function([logits_ph, labels_ph], sparse)
    np.testing.assert_allclose(f(big, np.array([2], np.int32)), [400.0], rtol=1e-5)
    sig = K.sigmoid(logits_ph)
    bce = L.binary_crossentropy(onehot_ph, sig)
    assert "softplus" in {n.op for n in toposort([bce])}


def test_reductions_and_sample_weight():
    t, p = YT, YP
    per = NUMPY["mean_squared_error"](t, p)
    w = rng.uniform(0, 2, 6)
    np.testing.assert_allclose(L.MeanSquaredError()(t, p), per.mean(), rtol=1e-5)
    np.testing.assert_allclose(L.MeanSquaredError()(t, p, sample_weight=w),
                               (per * w).sum() / 6, rtol=1e-5)
    np.testing.assert_allclose(L.MeanSquaredError(reduction="sum")(t, p, sample_weight=w),
                               (per * w).sum(), rtol=1e-5)
    np.testing.assert_allclose(L.MeanSquaredError(reduction=None)(t, p), per, rtol=1e-5)
    np.testing.assert_allclose(L.MeanSquaredError(reduction="mean_with_sample_weight")(
        t, p, sample_weight=w), (per * w).sum() / w.sum(), rtol=1e-5)
    np.testing.assert_allclose(L.Huber(delta=0.1)(t, p), _huber(t, p, 0.1).mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        L.MeanSquaredError(reduction="average")


def test_rank_matching_and_shape_errors():
    t = rng.normal(size=(5,))
    p = rng.normal(size=(5, 1))
    np.testing.assert_allclose(L.mean_squared_error(t, p), (t - p[:, 0]) ** 2, rtol=1e-5)
    with pytest.raises(ValueError, match="mean_squared_error"):
        L.mean_squared_error(rng.normal(size=(5, 3)), rng.normal(size=(5, 4)))
    with pytest.raises(ValueError, match="same shape"):
        L.categorical_crossentropy(np.eye(3), YP[:3])


def test_custom_callable_loss_in_a_model():
    def cubic(y_true, y_pred):
        return K.mean(K.abs(y_true - y_pred) ** 3.0, axis=-1)

    model = kiln.Sequential([kiln.Input((2,)), kiln.layers.Dense(1, kernel_initializer="zeros")])
    model.compile("sgd", cubic)
    x = np.ones((4, 2), np.float32)
    y = np.full((4, 1), 2.0, np.float32)
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), 8.0, rtol=1e-6)


def test_get_aliases_and_unknown():
    assert L.get("mse") is L.mean_squared_error
    assert L.get("MAE") is L.mean_absolute_error
    assert isinstance(L.get("CategoricalCrossentropy"), L.CategoricalCrossentropy)
    assert L.get(None) is None
    with pytest.raises(ValueError, match="Valid names"):
        L.get("nope")
    cfg = L.serialize(L.BinaryCrossentropy(from_logits=True))
    restored = L.deserialize(cfg)
    assert isinstance(restored, L.BinaryCrossentropy)
    assert restored.get_config()["from_logits"] is True
