"""Focal cross-entropies, Dice and Tversky against NumPy transcriptions of Keras 3's formulas;
gradients against float64 central finite differences; configs and .keras round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fd_oracle import numeric_grad

import kiln
from kiln import losses as L

rng = np.random.default_rng(3)
EPS = 1e-7


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np_bfce(y, p, balance=False, alpha=0.25, gamma=2.0, logits=False, ls=0.0):
    if ls:
        y = y * (1 - ls) + 0.5 * ls
    if logits:
        p = _sigmoid(p)
    pc = np.clip(p, EPS, 1 - EPS)
    bce = -(y * np.log(pc) + (1 - y) * np.log(1 - pc))
    p_t = y * p + (1 - y) * (1 - p)
    f = (1 - p_t) ** gamma * bce
    if balance:
        f = (y * alpha + (1 - y) * (1 - alpha)) * f
    return f.mean(-1)


def _np_cfce(y, p, alpha=0.25, gamma=2.0, logits=False, ls=0.0):
    if ls:
        y = y * (1 - ls) + ls / y.shape[-1]
    if logits:
        e = np.exp(p - p.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    out = np.clip(p / p.sum(-1, keepdims=True), EPS, 1 - EPS)
    return np.sum(alpha * (1 - out) ** gamma * -y * np.log(out), -1)


def _np_dice(y, p, axis=None):
    inter = np.sum(y * p, axis=axis)
    return 1 - 2 * inter / (np.sum(y, axis=axis) + np.sum(p, axis=axis) + EPS)


def _np_tversky(y, p, alpha=0.5, beta=0.5, axis=None):
    tp = np.sum(y * p, axis=axis)
    a = np.sum((1 - p) * y, axis=axis)
    b = np.sum(p * (1 - y), axis=axis)
    return 1 - tp / (tp + alpha * a + beta * b + EPS)


@pytest.mark.parametrize("kwargs", [
    {}, {"apply_class_balancing": True, "alpha": 0.4}, {"gamma": 0.5, "label_smoothing": 0.1},
    {"from_logits": True, "gamma": 3.0}, {"from_logits": True, "apply_class_balancing": True}])
def test_binary_focal_matches_keras(kwargs):
    y = (rng.uniform(size=(6, 4)) < 0.5).astype("float32")
    logits = kwargs.get("from_logits", False)
    p = (rng.normal(size=(6, 4)) * 3 if logits else rng.uniform(0.01, 0.99, (6, 4)))
    p = p.astype("float32")
    np_kwargs = {"balance": kwargs.get("apply_class_balancing", False),
                 "alpha": kwargs.get("alpha", 0.25), "gamma": kwargs.get("gamma", 2.0),
                 "logits": logits, "ls": kwargs.get("label_smoothing", 0.0)}
    want = _np_bfce(y.astype(np.float64), p.astype(np.float64), **np_kwargs)
    np.testing.assert_allclose(L.binary_focal_crossentropy(y, p, **kwargs), want, rtol=2e-5,
                               atol=1e-7)
    w = rng.uniform(0.2, 2.0, 6)
    got = L.BinaryFocalCrossentropy(**kwargs)(y, p, sample_weight=w)
    np.testing.assert_allclose(got, np.mean(want * w), rtol=2e-5)


@pytest.mark.parametrize("kwargs", [
    {}, {"alpha": 0.5, "gamma": 1.0}, {"label_smoothing": 0.2},
    {"from_logits": True}, {"from_logits": True, "gamma": 0.0, "alpha": 1.0}])
def test_categorical_focal_matches_keras(kwargs):
    labels = rng.integers(0, 5, size=7)
    y = np.eye(5, dtype="float32")[labels]
    logits = kwargs.get("from_logits", False)
    p = rng.normal(size=(7, 5)) * 2 if logits else rng.uniform(0.05, 1.0, (7, 5))
    p = p.astype("float32")
    want = _np_cfce(y.astype(np.float64), p.astype(np.float64), kwargs.get("alpha", 0.25),
                    kwargs.get("gamma", 2.0), logits, kwargs.get("label_smoothing", 0.0))
    np.testing.assert_allclose(L.categorical_focal_crossentropy(y, p, **kwargs), want,
                               rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(L.CategoricalFocalCrossentropy(**kwargs)(y, p), want.mean(),
                               rtol=2e-5)


def test_categorical_focal_gamma0_alpha1_is_crossentropy():
    y = np.eye(4, dtype="float32")[[0, 3, 1]]
    x = rng.normal(size=(3, 4)).astype("float32")
    np.testing.assert_allclose(
        L.categorical_focal_crossentropy(y, x, alpha=1.0, gamma=0.0, from_logits=True),
        L.categorical_crossentropy(y, x, from_logits=True), rtol=1e-5)


def test_focal_from_logits_stays_finite_at_extreme_logits():
    y = np.array([[1.0, 0.0]], "float32")
    x = np.array([[-200.0, 200.0]], "float32")
    got = L.binary_focal_crossentropy(y, x, from_logits=True)
    # p_t = 0: focal factor 1, bce = softplus(200) - 0 = 200 and softplus(-200)... -> mean 200
    np.testing.assert_allclose(got, [200.0], rtol=1e-6)
    assert np.isfinite(L.categorical_focal_crossentropy(y, x, from_logits=True)).all()


@pytest.mark.parametrize("axis", [None, (1, 2)])
def test_dice_and_tversky_match_keras(axis):
    y = (rng.uniform(size=(3, 4, 5)) < 0.4).astype("float32")
    p = rng.uniform(size=(3, 4, 5)).astype("float32")
    y64, p64 = y.astype(np.float64), p.astype(np.float64)
    np.testing.assert_allclose(L.dice(y, p, axis=axis), _np_dice(y64, p64, axis), rtol=1e-5)
    np.testing.assert_allclose(L.tversky(y, p, 0.7, 0.3, axis=axis),
                               _np_tversky(y64, p64, 0.7, 0.3, axis), rtol=1e-5)
    np.testing.assert_allclose(L.Dice(axis=axis)(y, p), np.mean(_np_dice(y64, p64, axis)),
                               rtol=1e-5)
    np.testing.assert_allclose(L.Tversky(alpha=0.2, beta=0.8, axis=axis)(y, p),
                               np.mean(_np_tversky(y64, p64, 0.2, 0.8, axis)), rtol=1e-5)


@pytest.mark.parametrize("make, logits", [
    (lambda: L.BinaryFocalCrossentropy(apply_class_balancing=True, gamma=2.0), False),
    (lambda: L.BinaryFocalCrossentropy(from_logits=True, label_smoothing=0.1), True),
    (lambda: L.CategoricalFocalCrossentropy(gamma=1.5), False),
    (lambda: L.CategoricalFocalCrossentropy(from_logits=True), True),
    (lambda: L.Dice(axis=1), False), (lambda: L.Tversky(alpha=0.3, beta=0.7), False)])
def test_gradients_match_finite_differences(make, logits):
    loss = make()
    y = np.eye(3)[[0, 2, 1, 1]]
    x = rng.normal(size=(4, 3)) if logits else rng.uniform(0.1, 0.9, (4, 3))
    ph = kiln.placeholder((None, 3), "float64")
    yp = kiln.placeholder((None, 3), "float64")
    value = loss(yp, ph)
    f = kiln.function([yp, ph], [value, kiln.grad(value, [ph])[0]], backend="reference")
    g = f(y, x)[1]
    num = numeric_grad(lambda: float(f(y, x)[0]), x)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("loss", [
    L.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=0.3, gamma=1.0,
                              from_logits=True, label_smoothing=0.05),
    L.CategoricalFocalCrossentropy(alpha=0.5, gamma=3.0, reduction="sum"),
    L.Dice(axis=[1]), L.Tversky(alpha=0.9, beta=0.1, name="tv"),
    L.CategoricalGeneralizedCrossEntropy(q=0.2)], ids=lambda x: type(x).__name__)
def test_loss_config_round_trip(loss):
    again = L.deserialize(json.loads(json.dumps(L.serialize(loss))))
    assert type(again) is type(loss) and again.get_config() == loss.get_config()
    assert L.get(type(loss).__name__).__class__ is type(loss)


def test_function_aliases_and_bad_gamma():
    for name in ("binary_focal_crossentropy", "categorical_focal_crossentropy", "dice",
                 "tversky", "categorical_generalized_cross_entropy"):
        assert L.get(name) is getattr(L, name)
    with pytest.raises(ValueError, match="gamma must be a non-negative"):
        L.binary_focal_crossentropy(np.ones((2, 2)), np.ones((2, 2)) * 0.5, gamma=-1.0)


def test_focal_loss_trains_and_round_trips_keras_file(tmp_path):
    x = rng.normal(size=(16, 3)).astype("float32")
    y = (x[:, :2] > 0).astype("float32")
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(2)])
    model.compile(kiln.optimizers.SGD(0.5),
                  L.BinaryFocalCrossentropy(from_logits=True, apply_class_balancing=True))
    first = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=5, batch_size=8, verbose=0)
    assert model.evaluate(x, y, verbose=0) < first
    path = str(tmp_path / "f.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    assert loaded.get_compile_config()["loss"] == model.get_compile_config()["loss"]
    np.testing.assert_allclose(loaded.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0),
                               rtol=1e-6)


# ---- generalized cross-entropy ---------------------------------------------------------------
@pytest.mark.parametrize("q", [0.3, 0.7])
def test_generalized_cross_entropy_matches_keras(q):
    labels = rng.integers(0, 4, size=9)
    p = rng.uniform(0.05, 1.0, (9, 4))
    p = (p / p.sum(-1, keepdims=True)).astype("float32")
    want = (1 - p[np.arange(9), labels].astype(np.float64) ** q) / q
    np.testing.assert_allclose(L.categorical_generalized_cross_entropy(labels, p, q=q), want,
                               rtol=1e-5)
    np.testing.assert_allclose(L.CategoricalGeneralizedCrossEntropy(q=q)(labels[:, None], p),
                               want.mean(), rtol=1e-5)
    with pytest.raises(IndexError):
        L.categorical_generalized_cross_entropy(np.array([0, 4]), p[:2], q=0.5)
    with pytest.raises(ValueError, match=r"q must be in the interval \(0, 1\)"):
        L.CategoricalGeneralizedCrossEntropy(q=1.0)(labels, p)


def test_generalized_cross_entropy_in_a_model_takes_integer_labels(tmp_path):
    x = rng.normal(size=(12, 3)).astype("float32")
    y = rng.integers(0, 3, size=12)
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(3, activation="softmax")])
    model.compile("sgd", L.CategoricalGeneralizedCrossEntropy(q=0.4), metrics=["accuracy"])
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    p = model.predict(x, verbose=0).astype(np.float64)
    np.testing.assert_allclose(logs["loss"], np.mean((1 - p[np.arange(12), y] ** 0.4) / 0.4),
                               rtol=1e-5)
    np.testing.assert_allclose(logs["accuracy"], np.mean(p.argmax(-1) == y), rtol=1e-6)
    path = str(tmp_path / "g.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    again = loaded.evaluate(x, y, verbose=0, return_dict=True)
    np.testing.assert_allclose([again["loss"], again["accuracy"]],
                               [logs["loss"], logs["accuracy"]], rtol=1e-6)


@pytest.mark.parametrize("loss", [
    L.BinaryFocalCrossentropy(gamma=1.5, alpha=0.4, apply_class_balancing=True),
    L.CategoricalFocalCrossentropy(label_smoothing=0.1), L.Dice(axis=[1]),
    L.Tversky(alpha=0.7, beta=0.3), L.CategoricalGeneralizedCrossEntropy(q=0.3)],
    ids=lambda x: type(x).__name__)
def test_each_new_loss_round_trips_through_a_keras_file(tmp_path, loss):
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(3, activation="softmax")])
    model.compile("sgd", loss)
    path = str(tmp_path / "l.keras")
    model.save(path)
    config = kiln.models.load_model(path).get_compile_config()["loss"]
    assert config == L.serialize(loss)
    again = L.deserialize(config)
    assert type(again) is type(loss) and again.get_config() == loss.get_config()
