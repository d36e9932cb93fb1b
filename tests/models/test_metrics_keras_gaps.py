"""Precision/Recall with ``top_k`` and AUC with ``multi_label``/``label_weights`` against NumPy
re-derivations of Keras 3's rules (metrics_utils.update_confusion_matrix_variables and
AUC.result), standalone, accumulated over batches and inside ``model.evaluate``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
from kiln import layers
from kiln import metrics as M

rng = np.random.default_rng(7)
NEG_INF = -1e10


# ---- NumPy oracles ---------------------------------------------------------------------------
def _np_filter_top_k(s, k):
    """Keras' _filter_top_k: keep the k largest of the last axis (a stable descending sort puts
    the lower index first among ties, like top_k), the rest becomes NEG_INF."""
    order = np.argsort(-s, axis=-1, kind="stable")[..., :k]
    keep = np.zeros(s.shape, bool)
    np.put_along_axis(keep, order, True, axis=-1)
    return np.where(keep, s, NEG_INF)


def _np_precision_recall(y, s, thr, top_k=None, class_id=None, w=None):
    """(precision, recall) by Keras' rule: top_k filter, then class_id slice, then
    ``pred > thr`` is positive; sample weights broadcast over the class axis."""
    w = np.ones(s.shape[0]) if w is None else w
    w = np.broadcast_to(w[:, None], s.shape)
    if top_k is not None:
        s = _np_filter_top_k(s, top_k)
    y = y != 0
    if class_id is not None:
        s, y, w = s[:, class_id], y[:, class_id], w[:, class_id]
    pos = s > thr
    tp = np.sum(w * (pos & y))
    fp = np.sum(w * (pos & ~y))
    fn = np.sum(w * (~pos & y))
    return (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)


def _thresholds(n):
    return np.array([-1e-7] + [(i + 1) / (n - 1) for i in range(n - 2)] + [1 + 1e-7])


def _np_counts(y, s, thr, w):
    """tp, fp, tn, fn of one binary problem (1-D arrays) at each threshold."""
    pred = s[:, None] > thr[None, :]
    yp = (y != 0)[:, None]
    tp = ((yp & pred) * w[:, None]).sum(0)
    fp = ((~yp & pred) * w[:, None]).sum(0)
    fn = ((yp & ~pred) * w[:, None]).sum(0)
    tn = ((~yp & ~pred) * w[:, None]).sum(0)
    return tp, fp, tn, fn


def _div(a, b):
    return np.where(b != 0, a / np.where(b != 0, b, 1), 0.0)


def _np_auc_from_counts(tp, fp, tn, fn, curve="ROC", method="interpolation"):
    """Keras' AUC.result / interpolate_pr_auc for one label, restated in NumPy."""
    if curve == "PR" and method == "interpolation":
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        slope = _div(dtp, np.maximum(p[:-1] - p[1:], 0))
        intercept = tp[1:] - slope * p[1:]
        ratio = np.where((p[:-1] > 0) & (p[1:] > 0), _div(p[:-1], np.maximum(p[1:], 0)), 1.0)
        return np.sum(_div(slope * (dtp + intercept * np.log(ratio)),
                           np.maximum(tp[1:] + fn[1:], 0)))
    recall = _div(tp, tp + fn)
    x, y = (_div(fp, fp + tn), recall) if curve == "ROC" else (recall, _div(tp, tp + fp))
    heights = {"interpolation": (y[:-1] + y[1:]) / 2, "minoring": np.minimum(y[:-1], y[1:]),
               "majoring": np.maximum(y[:-1], y[1:])}[method]
    return np.sum((x[:-1] - x[1:]) * heights)


def _np_auc(y, s, n=200, w=None, curve="ROC", method="interpolation"):
    w = np.ones(len(s)) if w is None else w
    return _np_auc_from_counts(*_np_counts(y, s, _thresholds(n), w), curve, method)


def _np_multilabel_auc(y, s, n=200, w=None, label_weights=None, **kw):
    aucs = np.array([_np_auc(y[:, j], s[:, j], n, w, **kw) for j in range(s.shape[1])])
    if label_weights is None:
        return aucs.mean()
    lw = np.asarray(label_weights, float)
    return np.sum(aucs * lw) / lw.sum()


def _exact_roc_auc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return greater / (len(pos) * len(neg))


def _scores(n, c, decimals=None):
    s = rng.uniform(size=(n, c))
    return np.round(s, decimals) if decimals is not None else s


def _multilabel(n, c):
    """Labels correlated with the scores so the AUCs are far from 0.5 and differ per label."""
    s = rng.uniform(size=(n, c))
    y = (s * np.linspace(0.3, 1.0, c) + 0.6 * rng.uniform(size=(n, c)) > 0.6).astype(int)
    return y, s


# ---- Precision / Recall with top_k ----------------------------------------------------------
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("class_id", [None, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_precision_recall_top_k_match_keras_rule(top_k, class_id, weighted):
    n, c = 90, 5
    s = _scores(n, c, decimals=1)  # rounded: ties at the top-k border are common
    y = (rng.uniform(size=(n, c)) < 0.35).astype(int)
    w = rng.uniform(0, 2, n) if weighted else None
    p = M.Precision(top_k=top_k, class_id=class_id)
    r = M.Recall(top_k=top_k, class_id=class_id)
    for m in (p, r):  # accumulated over three batches
        for sl in (slice(0, 30), slice(30, 61), slice(61, n)):
            m.update_state(y[sl], s[sl], sample_weight=None if w is None else w[sl])
    want_p, want_r = _np_precision_recall(y, s, NEG_INF, top_k, class_id, w)
    np.testing.assert_allclose(p.result(), want_p, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(r.result(), want_r, rtol=1e-6, atol=1e-12)
    assert 0.0 < p.result() < 1.0 and 0.0 < r.result() < 1.0


@pytest.mark.parametrize("thresholds", [0.5, 0.3, [0.2, 0.5, 0.9]])
def test_top_k_with_explicit_thresholds(thresholds):
    s = _scores(60, 4)
    y = (rng.uniform(size=(60, 4)) < 0.4).astype(int)
    w = rng.uniform(0, 1, 60)
    for cls, col in ((M.Precision, 0), (M.Recall, 1)):
        m = cls(thresholds=thresholds, top_k=2)
        m.update_state(y, s, sample_weight=w)
        want = [_np_precision_recall(y, s, t, 2, None, w)[col]
                for t in np.atleast_1d(thresholds)]
        got = np.atleast_1d(m.result())
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_top_k_keras_docstring_examples_and_ties():
    # keras.metrics.Precision docstring (as one sample): ties go to the lower index
    m = M.Precision(top_k=2)
    m.update_state([[0, 0, 1, 1]], [[1, 1, 1, 1]])
    assert m.result() == 0.0
    m = M.Precision(top_k=4)
    m.update_state([[0, 0, 1, 1]], [[1, 1, 1, 1]])
    assert m.result() == 0.5
    # rank-1 predictions have no class axis per sample (Keras would rank the whole batch)
    with pytest.raises(ValueError, match=r"Precision: top_k ranks the last \(class\) axis.*"
                                         r"\(None,\)"):
        m.update_state([0, 0, 1, 1], [1, 1, 1, 1])
    # kept predictions count as positive whatever their value (default threshold NEG_INF)
    r = M.Recall(top_k=1)
    r.update_state(np.array([[0, 1, 0], [1, 0, 0]]), np.array([[0.1, 0.2, 0.05], [0.3, 0.3, 0.]]))
    assert r.result() == 1.0


def test_class_id_without_top_k_keeps_threshold_0_5():
    s = _scores(40, 3)
    y = (rng.uniform(size=(40, 3)) < 0.5).astype(int)
    p = M.Precision(class_id=1)
    p.update_state(y, s)
    np.testing.assert_allclose(p.result(), _np_precision_recall(y, s, 0.5, None, 1)[0],
                               rtol=1e-6)


# ---- AUC multi_label / label_weights --------------------------------------------------------
@pytest.mark.parametrize("curve,method", [("ROC", "interpolation"), ("PR", "interpolation"),
                                          ("ROC", "minoring"), ("PR", "majoring")])
@pytest.mark.parametrize("label_weights", [None, [1.0, 0.0, 3.0, 0.5]])
def test_auc_multi_label_matches_keras_rule(curve, method, label_weights):
    y, s = _multilabel(150, 4)
    w = rng.uniform(0, 2, 150)
    auc = M.AUC(num_thresholds=50, curve=curve, summation_method=method, multi_label=True,
                label_weights=label_weights)
    auc.update_state(y[:64], s[:64], sample_weight=w[:64])
    auc.update_state(y[64:], s[64:], sample_weight=w[64:])
    assert auc.true_positives.shape == (50, 4)
    want = _np_multilabel_auc(y, s, 50, w, label_weights, curve=curve, method=method)
    np.testing.assert_allclose(auc.result(), want, rtol=1e-6)
    # the same as kiln's single-label AUC on each column, averaged
    single = []
    for j in range(4):
        one = M.AUC(num_thresholds=50, curve=curve, summation_method=method)
        one.update_state(y[:, j], s[:, j], sample_weight=w)
        single.append(one.result())
    lw = np.ones(4) if label_weights is None else np.asarray(label_weights)
    np.testing.assert_allclose(auc.result(), np.sum(np.array(single) * lw) / lw.sum(),
                               rtol=1e-6)


def test_auc_multi_label_roc_is_close_to_exact_per_label_auc():
    y, s = _multilabel(400, 3)
    auc = M.AUC(num_thresholds=2000, multi_label=True, label_weights=[2.0, 1.0, 1.0])
    for i in range(0, 400, 100):
        auc.update_state(y[i:i + 100], s[i:i + 100])
    exact = [_exact_roc_auc(y[:, j], s[:, j]) for j in range(3)]
    assert len(set(np.round(exact, 2))) == 3  # distinct per-label AUCs
    want = (2 * exact[0] + exact[1] + exact[2]) / 4
    assert abs(auc.result() - want) < 1e-2


def test_auc_multi_label_from_logits_and_num_labels():
    y, s = _multilabel(80, 3)
    logits = np.log(s / (1 - s))
    auc = M.AUC(multi_label=True, num_labels=3, from_logits=True)
    assert auc.true_positives.shape == (200, 3)  # built at construction, like Keras
    auc.update_state(y, logits)
    np.testing.assert_allclose(auc.result(), _np_multilabel_auc(y, s), rtol=1e-5)
    auc.reset_state()
    assert auc.true_positives.shape == (200, 3) and not auc.true_positives.any()


@pytest.mark.parametrize("curve", ["ROC", "PR"])
def test_auc_label_weights_flattened(curve):
    y, s = _multilabel(120, 3)
    lw = np.array([0.5, 2.0, 1.0])
    sw = rng.uniform(0, 1, 120)
    auc = M.AUC(num_thresholds=100, curve=curve, label_weights=lw)
    auc.update_state(y[:50], s[:50], sample_weight=sw[:50])
    auc.update_state(y[50:], s[50:], sample_weight=sw[50:])
    assert auc.true_positives.shape == (100,)
    w = (sw[:, None] * lw[None, :]).ravel()
    want = _np_auc(y.ravel(), s.ravel(), 100, w, curve=curve)
    np.testing.assert_allclose(auc.result(), want, rtol=1e-6)
    plain = M.AUC(num_thresholds=100, curve=curve)
    plain.update_state(y, s, sample_weight=sw)
    assert abs(plain.result() - auc.result()) > 1e-4  # the label weights matter


# ---- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize("metric", [
    M.Precision(top_k=2, class_id=1, name="p2"),
    M.Recall(thresholds=[0.1, 0.4], top_k=1),
    M.AUC(num_thresholds=30, curve="PR", summation_method="majoring", multi_label=True,
          num_labels=3, label_weights=[1.0, 2.0, 0.5], from_logits=True, name="ml_auc"),
    M.AUC(thresholds=[0.25, 0.5, 0.75], label_weights=[1.0, 3.0, 2.0]),
])
def test_config_round_trip(metric):
    config = json.loads(json.dumps(metric.get_config()))
    clone = type(metric).from_config(config)
    assert clone.get_config() == metric.get_config()
    again = M.deserialize(json.loads(json.dumps(M.serialize(metric))))
    assert type(again) is type(metric) and again.get_config() == metric.get_config()
    y, s = _multilabel(40, 3)
    metric.reset_state()
    for m in (metric, clone):
        m.update_state(y, s)
    np.testing.assert_allclose(clone.result(), metric.result())
    if isinstance(metric, M.AUC):
        assert config["multi_label"] == metric.multi_label
        assert config["label_weights"] == metric.label_weights.tolist()
    else:
        assert config["top_k"] == metric.top_k


# ---- inside model.evaluate ------------------------------------------------------------------
def test_metrics_through_evaluate_match_standalone():
    n, c = 53, 4
    x = rng.normal(size=(n, 6)).astype("float32")
    y = (rng.uniform(size=(n, c)) < 0.4).astype("float32")
    sw = rng.uniform(0.2, 1.5, n)
    model = kiln.Sequential([kiln.Input((6,)), layers.Dense(c, activation="sigmoid")])

    def make():
        return [M.Precision(top_k=2, name="p_top2"),
                M.Recall(top_k=1, class_id=2, name="r_top1_c2"),
                M.AUC(multi_label=True, label_weights=[1.0, 2.0, 0.0, 1.0], name="auc_ml"),
                M.AUC(curve="PR", label_weights=[0.5, 1.0, 2.0, 1.0], name="auc_lw")]

    model.compile("sgd", "binary_crossentropy", metrics=make(),
                  weighted_metrics=[M.Precision(top_k=2, name="wp_top2"),
                                    M.AUC(multi_label=True, name="wauc_ml")])
    logs = model.evaluate(x, y, sample_weight=sw, batch_size=10, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    for m in make():
        m.update_state(y, pred)
        np.testing.assert_allclose(logs[m.name], m.result(), rtol=1e-5, err_msg=m.name)
    wp, wauc = M.Precision(top_k=2), M.AUC(multi_label=True)
    for m in (wp, wauc):
        m.update_state(y, pred, sample_weight=sw)
    np.testing.assert_allclose(logs["wp_top2"], wp.result(), rtol=1e-5)
    np.testing.assert_allclose(logs["wauc_ml"], wauc.result(), rtol=1e-5)
    # and against the NumPy oracles
    np.testing.assert_allclose(logs["p_top2"], _np_precision_recall(y, pred, NEG_INF, 2)[0],
                               rtol=1e-5)
    np.testing.assert_allclose(logs["r_top1_c2"],
                               _np_precision_recall(y, pred, NEG_INF, 1, 2)[1], rtol=1e-5)
    np.testing.assert_allclose(logs["auc_ml"], _np_multilabel_auc(
        y, pred.astype(np.float64), label_weights=[1.0, 2.0, 0.0, 1.0]), rtol=1e-4)
    # a second evaluate starts from a reset state
    again = model.evaluate(x, y, sample_weight=sw, batch_size=25, verbose=0, return_dict=True)
    for key in ("p_top2", "auc_ml", "auc_lw", "wauc_ml"):
        np.testing.assert_allclose(again[key], logs[key], rtol=1e-5, err_msg=key)


# ---- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("top_k", [0, -1, 1.5, True, "2"])
@pytest.mark.parametrize("cls", [M.Precision, M.Recall])
def test_invalid_top_k(cls, top_k):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: top_k .*{top_k!r}"):
        cls(top_k=top_k)


def test_top_k_larger_than_classes_raises_before_state_changes():
    p = M.Precision(top_k=4)
    with pytest.raises(ValueError, match=r"Precision: top_k=4 exceeds the 3 entries"):
        p.update_state(np.zeros((2, 3)), np.ones((2, 3)))
    assert np.asarray(p.variables[0]).sum() == 0 and p.result() == 0.0


def test_auc_label_weights_wrong_length_raises_before_state_changes():
    y, s = _multilabel(20, 3)
    auc = M.AUC(multi_label=True, label_weights=[1.0, 2.0, 3.0])
    auc.update_state(y, s)
    before = [np.array(v) for v in auc.variables]
    with pytest.raises(ValueError, match=r"AUC: label_weights has 3 entries .*\(None, 4\)"):
        auc.update_state(np.zeros((5, 4)), np.ones((5, 4)))
    assert all(np.array_equal(a, b) for a, b in zip(before, auc.variables))
    flat = M.AUC(label_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"AUC: label_weights has 2 entries .*\(None, 3\)"):
        flat.update_state(y, s)
    assert not flat.true_positives.any()
    with pytest.raises(ValueError, match="label_weights has 2 entries but num_labels=3"):
        M.AUC(multi_label=True, num_labels=3, label_weights=[1.0, 2.0])
    with pytest.raises(ValueError, match=r"AUC: label_weights must be .*-1\.0"):
        M.AUC(multi_label=True, label_weights=[1.0, -1.0])


def test_auc_multi_label_rank_and_label_count_errors():
    auc = M.AUC(multi_label=True)
    with pytest.raises(ValueError, match=r"AUC: multi_label=True needs predictions of rank 2.*"
                                         r"\(None,\)"):
        auc.update_state(np.array([0, 1, 1]), np.array([0.2, 0.6, 0.9]))
    assert auc.result() == 0.0 and auc.true_positives.shape == (200, 0)
    fixed = M.AUC(multi_label=True, num_labels=2)
    with pytest.raises(ValueError, match=r"AUC: the state holds 2 labels"):
        fixed.update_state(np.zeros((3, 3)), np.ones((3, 3)))
    assert not fixed.true_positives.any()
    with pytest.raises(ValueError, match="num_labels is needed only when multi_label=True"):
        M.AUC(num_labels=3)
    model = kiln.Sequential([kiln.Input((4,)), layers.Dense(3, activation="sigmoid")])
    model.compile("sgd", "binary_crossentropy",
                  metrics=[M.AUC(multi_label=True, label_weights=[1.0, 1.0])])
    with pytest.raises(ValueError, match="label_weights has 2 entries"):
        model.evaluate(np.ones((6, 4)), np.ones((6, 3)), verbose=0)
