"""F-scores, R2, the IoU family, Accuracy, the metrics at a constraint and the correlation
metrics against NumPy re-derivations of Keras 3's formulas (and sklearn-style closed forms),
accumulated over several batches with sample weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import metrics as M

rng = np.random.default_rng(11)
EPS = 1e-7


def _batches(metric, y, p, w, sizes=(5, 9, 6)):
    metric.reset_state()
    start = 0
    for n in sizes:
        sl = slice(start, start + n)
        metric.update_state(y[sl], p[sl], sample_weight=None if w is None else w[sl])
        start += n
    assert start == len(y)
    return metric.result()


# ---- F-beta ----------------------------------------------------------------------------------
def _np_fbeta(y, p, w, beta, average, threshold):
    if threshold is None:
        pred = (p >= p.max(-1, keepdims=True)) & (np.abs(p) > 1e-9)
    else:
        pred = p > threshold
    pred = pred.astype(np.float64)
    w = np.ones(len(y)) if w is None else w
    ww = w[:, None]
    axis = None if average == "micro" else 0
    tp = np.sum(pred * y * ww, axis=axis)
    fp = np.sum(pred * (1 - y) * ww, axis=axis)
    fn = np.sum((1 - pred) * y * ww, axis=axis)
    support = np.sum(y * ww, axis=axis)
    prec, rec = tp / (tp + fp + EPS), tp / (tp + fn + EPS)
    b2 = beta ** 2
    f = (1 + b2) * prec * rec / (b2 * prec + rec + EPS)
    if average == "weighted":
        return np.sum(f * support / (np.sum(support) + EPS))
    if average is not None:
        return np.mean(f)
    return f


@pytest.mark.parametrize("average", [None, "micro", "macro", "weighted"])
@pytest.mark.parametrize("threshold", [None, 0.45])
@pytest.mark.parametrize("weighted", [False, True])
def test_fbeta_matches_keras_formula(average, threshold, weighted):
    y = (rng.uniform(size=(20, 4)) < 0.4).astype("float32")
    p = rng.uniform(size=(20, 4)).astype("float32")
    w = rng.uniform(0.1, 2.0, 20) if weighted else None
    got = _batches(M.FBetaScore(average=average, beta=2.0, threshold=threshold), y, p, w)
    np.testing.assert_allclose(got, _np_fbeta(y, p, w, 2.0, average, threshold), rtol=1e-5)
    f1 = _batches(M.F1Score(average=average, threshold=threshold), y, p, w)
    np.testing.assert_allclose(f1, _np_fbeta(y, p, w, 1.0, average, threshold), rtol=1e-5)


def test_f1_closed_form_and_zero_row():
    # class 0: tp=1, fp=1, fn=1 -> F1 = 0.5; class 1: tp=1, fp=0, fn=1 -> F1 = 2/3; an all-zero
    # prediction row predicts nothing (Keras' rule with threshold=None)
    y = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], "float32")
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.0, 0.0], [0.2, 0.8]], "float32")
    m = M.F1Score()
    m.update_state(y, p)
    np.testing.assert_allclose(m.result(), [0.5, 2.0 / 3.0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"average": "mean"}, "average"), ({"beta": 0.0}, "beta"), ({"beta": "2"}, "beta"),
    ({"threshold": 1.5}, "threshold"), ({"threshold": 0.0}, "threshold")])
def test_fbeta_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        M.FBetaScore(**kwargs)


def test_fbeta_rank_error_names_metric():
    with pytest.raises(ValueError, match=r"FBetaScore expects 2D inputs"):
        M.FBetaScore().update_state(np.zeros(4), np.zeros(4))


# ---- R2 --------------------------------------------------------------------------------------
def _np_r2(y, p, w, aggregation, p_reg):
    w = np.ones(len(y)) if w is None else w
    ww = np.broadcast_to(w[:, None], y.shape)
    mean = np.sum(ww * y, 0) / np.sum(ww, 0)
    ss_tot = np.sum(ww * (y - mean) ** 2, 0)
    ss_res = np.sum(ww * (y - p) ** 2, 0)
    raw = 1 - ss_res / ss_tot
    if aggregation == "uniform_average":
        r2 = raw.mean()
    elif aggregation == "variance_weighted_average":
        r2 = np.sum(ss_tot * raw) / np.sum(ss_tot)
    else:
        r2 = raw
    n = len(y)
    if p_reg and p_reg < n - 1:
        r2 = 1 - (1 - r2) * (n - 1) / (n - p_reg - 1)
    return r2


@pytest.mark.parametrize("aggregation", ["uniform_average", "variance_weighted_average", None])
@pytest.mark.parametrize("num_regressors", [0, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_r2_matches_closed_form(aggregation, num_regressors, weighted):
    y = rng.normal(size=(20, 3)) * [1.0, 3.0, 0.5]
    p = y + rng.normal(size=(20, 3)) * 0.7
    w = rng.uniform(0.2, 2.0, 20) if weighted else None
    got = _batches(M.R2Score(aggregation, num_regressors), y.astype("float32"),
                   p.astype("float32"), w)
    want = _np_r2(y.astype("float32").astype(np.float64), p.astype("float32"), w, aggregation,
                  num_regressors)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_r2_keras_example_and_adjusted_fallback_warns():
    m = M.R2Score()
    m.update_state(np.array([[1.0], [4.0], [3.0]]), np.array([[2.0], [4.0], [4.0]]))
    np.testing.assert_allclose(m.result(), 0.57142854, rtol=1e-6)
    adj = M.R2Score(num_regressors=5)
    adj.update_state(np.array([1.0, 4.0, 3.0]), np.array([2.0, 4.0, 4.0]))  # rank 1 accepted
    with pytest.warns(UserWarning, match="More independent predictors"):
        np.testing.assert_allclose(adj.result(), 0.57142854, rtol=1e-6)
    with pytest.raises(ValueError, match="class_aggregation"):
        M.R2Score(class_aggregation="mean")
    with pytest.raises(ValueError, match="num_regressors"):
        M.R2Score(num_regressors=-1)


# ---- IoU family ------------------------------------------------------------------------------
def _np_cm(t, p, w, n):
    cm = np.zeros((n, n))
    np.add.at(cm, (t.ravel(), p.ravel()), w.ravel())
    return cm


def _np_iou(cm, ids):
    tp = np.diag(cm)
    den = cm.sum(0) + cm.sum(1) - tp
    tp, den = tp[ids], den[ids]
    return np.sum(tp / (den + EPS)) / (np.sum(den > 1e-9) + EPS)


@pytest.mark.parametrize("ignore_class", [None, 2])
def test_iou_and_mean_iou_match_confusion_matrix(ignore_class):
    t = rng.integers(0, 4, size=(20, 3))
    p = rng.integers(0, 4, size=(20, 3))
    w = rng.uniform(0.1, 2.0, 20)
    ww = np.broadcast_to(w[:, None], t.shape).copy()
    if ignore_class is not None:
        ww[t == ignore_class] = 0
    cm = _np_cm(t, p, ww, 4)
    got = _batches(M.IoU(4, [0, 3], ignore_class=ignore_class), t, p, w)
    np.testing.assert_allclose(got, _np_iou(cm, [0, 3]), rtol=1e-5)
    got = _batches(M.MeanIoU(4, ignore_class=ignore_class), t, p, w)
    np.testing.assert_allclose(got, _np_iou(cm, [0, 1, 2, 3]), rtol=1e-5)


def test_one_hot_and_binary_iou():
    t = rng.integers(0, 3, size=20)
    scores = rng.uniform(size=(20, 3)).astype("float32")
    onehot = np.eye(3, dtype="float32")[t]
    w = rng.uniform(0.1, 2.0, 20)
    cm = _np_cm(t, scores.argmax(-1), w, 3)
    np.testing.assert_allclose(_batches(M.OneHotIoU(3, [1, 2]), onehot, scores, w),
                               _np_iou(cm, [1, 2]), rtol=1e-5)
    np.testing.assert_allclose(_batches(M.OneHotMeanIoU(3), onehot, scores, w),
                               _np_iou(cm, [0, 1, 2]), rtol=1e-5)
    yb = rng.integers(0, 2, size=20).astype("float32")
    pb = rng.uniform(size=20).astype("float32")
    cm = _np_cm(yb.astype(int), (pb > 0.3).astype(int), w, 2)
    np.testing.assert_allclose(_batches(M.BinaryIoU([1], threshold=0.3), yb, pb, w),
                               _np_iou(cm, [1]), rtol=1e-5)


def test_iou_keras_docstring_example_and_errors():
    m = M.IoU(num_classes=2, target_class_ids=[0])
    m.update_state([0, 0, 1, 1], [0, 1, 0, 1])
    np.testing.assert_allclose(m.result(), 1 / 3, rtol=1e-6)
    with pytest.raises(ValueError, match="target_class_ids"):
        M.IoU(num_classes=2, target_class_ids=[2])
    bad = M.MeanIoU(3)
    with pytest.raises(IndexError):
        bad.update_state(np.array([0, 5]), np.array([0, 1]))
    assert bad.get_state() == []  # nothing merged


# ---- Accuracy, metrics at a constraint, correlations -----------------------------------------
def test_accuracy_exact_match_weighted():
    y = rng.integers(0, 3, size=(20, 2)).astype("float32")
    p = rng.integers(0, 3, size=(20, 2)).astype("float32")
    w = rng.uniform(0.1, 2.0, 20)
    eq = (y == p).astype(np.float64)
    want = np.sum(eq * w[:, None]) / np.sum(np.broadcast_to(w[:, None], eq.shape))
    np.testing.assert_allclose(_batches(M.Accuracy(), y, p, w), want, rtol=1e-6)
    m = M.Accuracy()
    m.update_state([[1], [2], [3], [4]], [[0], [2], [3], [4]])
    assert m.result() == 0.75


def _np_at(y, s, w, n_thr):
    thr = np.array([-1e-7] + [(i + 1) / (n_thr - 1) for i in range(n_thr - 2)] + [1 + 1e-7])
    pred = s[:, None] > thr[None, :]
    yp = (y != 0)[:, None]
    ww = w[:, None]
    tp, fp = ((yp & pred) * ww).sum(0), ((~yp & pred) * ww).sum(0)
    fn, tn = ((yp & ~pred) * ww).sum(0), ((~yp & ~pred) * ww).sum(0)
    div = lambda a, b: np.where(b > 0, a / np.where(b > 0, b, 1), 0.0)  # noqa: E731
    return {"sens": div(tp, tp + fn), "spec": div(tn, tn + fp), "prec": div(tp, tp + fp)}


@pytest.mark.parametrize("cls, value, constrained, dependent", [
    (M.SensitivityAtSpecificity, 0.6, "spec", "sens"),
    (M.SpecificityAtSensitivity, 0.7, "sens", "spec"),
    (M.PrecisionAtRecall, 0.5, "sens", "prec"),
    (M.RecallAtPrecision, 0.6, "prec", "sens")])
def test_metrics_at_constraint(cls, value, constrained, dependent):
    y = rng.integers(0, 2, size=20).astype("float32")
    s = np.clip(y * 0.3 + rng.uniform(size=20) * 0.7, 0, 1).astype("float32")
    w = rng.uniform(0.1, 2.0, 20)
    r = _np_at(y, s.astype(np.float64), w, 30)
    feasible = r[constrained] >= value
    want = r[dependent][feasible].max() if feasible.any() else 0.0
    np.testing.assert_allclose(_batches(cls(value, num_thresholds=30), y, s, w), want,
                               rtol=1e-6)
    with pytest.raises(ValueError, match=r"range \[0, 1\]"):
        cls(1.5)
    with pytest.raises(ValueError, match="num_thresholds"):
        cls(0.5, num_thresholds=0)


def test_correlation_metrics():
    y = rng.normal(size=(20, 6))
    p = 0.5 * y + rng.normal(size=(20, 6))
    w = rng.uniform(0.1, 2.0, 20)
    pear = np.array([np.corrcoef(a, b)[0, 1] for a, b in zip(y, p)])
    mt, mp = y.mean(1), p.mean(1)
    cov = ((y - mt[:, None]) * (p - mp[:, None])).mean(1)
    ccc = 2 * cov / (y.var(1) + p.var(1) + (mt - mp) ** 2)
    cos = np.sum(y * p, 1) / np.linalg.norm(y, axis=1) / np.linalg.norm(p, axis=1)
    for cls, per_sample in ((M.PearsonCorrelation, pear), (M.ConcordanceCorrelation, ccc),
                            (M.CosineSimilarity, cos)):
        got = _batches(cls(), y.astype("float32"), p.astype("float32"), w)
        np.testing.assert_allclose(got, np.sum(per_sample * w) / np.sum(w), rtol=1e-4,
                                   err_msg=cls.__name__)


# ---- configs, names, .keras ------------------------------------------------------------------
NEW = [M.FBetaScore(average="weighted", beta=0.5, threshold=0.3, name="fb"),
       M.F1Score(average="macro"), M.R2Score("variance_weighted_average", 2),
       M.IoU(3, [0, 2], ignore_class=1), M.MeanIoU(3, sparse_y_pred=False),
       M.BinaryIoU([1], threshold=0.4), M.OneHotIoU(3, [1]), M.OneHotMeanIoU(3),
       M.Accuracy(), M.SensitivityAtSpecificity(0.4, num_thresholds=50, class_id=1),
       M.SpecificityAtSensitivity(0.3), M.PrecisionAtRecall(0.2), M.RecallAtPrecision(0.9),
       M.CosineSimilarity(axis=-1), M.PearsonCorrelation(), M.ConcordanceCorrelation()]


@pytest.mark.parametrize("metric", NEW, ids=lambda m: type(m).__name__)
def test_config_round_trip(metric):
    data = json.loads(json.dumps(M.serialize(metric)))
    again = M.deserialize(data)
    assert type(again) is type(metric)
    assert again.get_config() == metric.get_config()


def test_string_names():
    assert isinstance(M.get("f1_score"), M.F1Score)
    assert isinstance(M.get("r2_score"), M.R2Score)
    assert isinstance(M.get("pearson_correlation"), M.PearsonCorrelation)


def test_new_metrics_in_evaluate_and_keras_file(tmp_path):
    x = rng.normal(size=(23, 5)).astype("float32")
    y = (rng.uniform(size=(23, 3)) < 0.4).astype("float32")
    model = kiln.Sequential([kiln.Input((5,)), kiln.layers.Dense(3, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy",
                  metrics=[M.F1Score(average="micro", threshold=0.5), M.R2Score(),
                           M.OneHotMeanIoU(3), M.PrecisionAtRecall(0.5)])
    sw = rng.uniform(0.2, 1.5, 23)
    logs = model.evaluate(x, y, sample_weight=sw, batch_size=7, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    for m in (M.F1Score(average="micro", threshold=0.5), M.R2Score(), M.OneHotMeanIoU(3),
              M.PrecisionAtRecall(0.5)):
        m.update_state(y, pred)
        np.testing.assert_allclose(logs[m.name], m.result(), rtol=1e-5, err_msg=m.name)
    np.testing.assert_allclose(logs["f1_score"], _np_fbeta(y, pred, None, 1.0, "micro", 0.5),
                               rtol=1e-5)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    assert loaded.get_compile_config()["metrics"] == model.get_compile_config()["metrics"]
    again = loaded.evaluate(x, y, batch_size=7, verbose=0, return_dict=True)
    plain = model.evaluate(x, y, batch_size=7, verbose=0, return_dict=True)
    for key in plain:
        np.testing.assert_allclose(again[key], plain[key], rtol=1e-5, err_msg=key)


@pytest.mark.parametrize("metric", NEW, ids=lambda m: type(m).__name__)
def test_each_new_metric_round_trips_through_a_keras_file(tmp_path, metric):
    model = kiln.Sequential([kiln.Input((3,)), kiln.layers.Dense(3)])
    model.compile("sgd", "mse", metrics=[metric])
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = kiln.models.load_model(path)
    (config,) = loaded.get_compile_config()["metrics"]
    assert config == M.serialize(metric)
    again = M.deserialize(config)
    assert type(again) is type(metric) and again.get_config() == metric.get_config()
