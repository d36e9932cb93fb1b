"""Metrics against NumPy, accumulated across batches, computed as graph statistics inside the
train/test graph, and resolved by name like Keras."""

from __future__ import annotations

import json

import numpy as np
import pytest
from model_helpers import blobs

import kiln
from kiln import layers
from kiln import metrics as M

rng = np.random.default_rng(0)


def _exact_roc_auc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return greater / (len(pos) * len(neg))


def _keras_auc(y, s, n=200, w=None):
    """Keras' AUC algorithm, re-derived in NumPy: counts at thresholds, trapezoids."""
    w = np.ones_like(s) if w is None else w
    thr = np.array([-1e-7] + [(i + 1) / (n - 1) for i in range(n - 2)] + [1 + 1e-7])
    pred = s[:, None] > thr[None, :]
    tp = ((y == 1)[:, None] * pred * w[:, None]).sum(0)
    fp = ((y == 0)[:, None] * pred * w[:, None]).sum(0)
    fn = ((y == 1) * w).sum() - tp
    tn = ((y == 0) * w).sum() - fp
    tpr = tp / (tp + fn)
    fpr = fp / (fp + tn)
    return np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2)


def test_accuracies_match_numpy_and_accumulate():
    logits = rng.normal(size=(50, 5))
    labels = rng.integers(0, 5, 50)
    onehot = np.eye(5)[labels]
    sparse = M.SparseCategoricalAccuracy()
    sparse.update_state(labels[:20], logits[:20])
    sparse.update_state(labels[20:], logits[20:])
    np.testing.assert_allclose(sparse.result(), np.mean(logits.argmax(1) == labels))
    cat = M.CategoricalAccuracy()
    cat.update_state(onehot, logits)
    np.testing.assert_allclose(cat.result(), np.mean(logits.argmax(1) == labels))
    w = rng.uniform(0, 1, 50)
    weighted = M.SparseCategoricalAccuracy()
    weighted.update_state(labels, logits, sample_weight=w)
    np.testing.assert_allclose(weighted.result(), np.sum((logits.argmax(1) == labels) * w)
                               / w.sum(), rtol=1e-6)
    topk = M.SparseTopKCategoricalAccuracy(k=2)
    topk.update_state(labels, logits)
    rank = (logits > logits[np.arange(50), labels][:, None]).sum(1)
    np.testing.assert_allclose(topk.result(), np.mean(rank < 2))
    topk_cat = M.TopKCategoricalAccuracy(k=3)
    topk_cat.update_state(onehot, logits)
    np.testing.assert_allclose(topk_cat.result(), np.mean(rank < 3))
    probs = rng.uniform(size=(50, 1))
    y01 = rng.integers(0, 2, (50, 1))
    binary = M.BinaryAccuracy(threshold=0.3)
    binary.update_state(y01, probs)
    np.testing.assert_allclose(binary.result(), np.mean((probs > 0.3) == y01))
    sparse.reset_state()
    assert sparse.result() == 0.0


def test_regression_metrics_and_mean():
    t, p = rng.normal(size=(30, 3)), rng.normal(size=(30, 3))
    mse, mae, rmse = M.MeanSquaredError(), M.MeanAbsoluteError(), M.RootMeanSquaredError()
    for m in (mse, mae, rmse):
        m.update_state(t[:10], p[:10])
        m.update_state(t[10:], p[10:])
    np.testing.assert_allclose(mse.result(), np.mean((t - p) ** 2), rtol=1e-5)
    np.testing.assert_allclose(mae.result(), np.mean(np.abs(t - p)), rtol=1e-5)
    np.testing.assert_allclose(rmse.result(), np.sqrt(np.mean((t - p) ** 2)), rtol=1e-5)
    mean = M.Mean()
    mean.update_state(np.array([1.0, 2.0, 3.0]))
    mean.update_state(np.array([10.0]), sample_weight=np.array([2.0]))
    np.testing.assert_allclose(mean.result(), (1 + 2 + 3 + 20) / 5)


def test_precision_recall_match_numpy():
    y = rng.integers(0, 2, 200)
    s = rng.uniform(size=200)
    w = rng.uniform(0, 2, 200)
    for thr in (0.5, 0.3):
        p, r = M.Precision(thresholds=thr), M.Recall(thresholds=thr)
        for m in (p, r):
            m.update_state(y[:120], s[:120], sample_weight=w[:120])
            m.update_state(y[120:], s[120:], sample_weight=w[120:])
        pos = s > thr
        tp = np.sum(w * (pos & (y == 1)))
        np.testing.assert_allclose(p.result(), tp / np.sum(w * pos), rtol=1e-5)
        np.testing.assert_allclose(r.result(), tp / np.sum(w * (y == 1)), rtol=1e-5)
    multi = M.Precision(thresholds=[0.2, 0.8])
    multi.update_state(y, s)
    assert multi.result().shape == (2,)


def test_auc_matches_keras_algorithm_and_exact_value():
    y = rng.integers(0, 2, 300)
    s = np.clip(0.3 * y + rng.uniform(size=300) * 0.7, 0, 1)
    auc = M.AUC()
    auc.update_state(y[:100], s[:100])
    auc.update_state(y[100:], s[100:])
    np.testing.assert_allclose(auc.result(), _keras_auc(y, s), rtol=1e-6)
    assert abs(auc.result() - _exact_roc_auc(y, s)) < 0.01
    w = rng.uniform(0, 1, 300)
    weighted = M.AUC(num_thresholds=50)
    weighted.update_state(y, s, sample_weight=w)
    np.testing.assert_allclose(weighted.result(), _keras_auc(y, s, 50, w), rtol=1e-6)
    pr = M.AUC(curve="PR")
    pr.update_state(y, s)
    assert 0.5 < pr.result() <= 1.0


def test_metrics_in_fit_are_graph_statistics_equal_to_numpy():
    x, y = blobs(96)
    model = kiln.Sequential([kiln.Input((8,)), layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy",
                  metrics=["accuracy", M.SparseTopKCategoricalAccuracy(k=3)],
                  weighted_metrics=["accuracy"])
    logs = model.evaluate(x, y, batch_size=20, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    assert list(logs) == ["loss", "accuracy", "sparse_top_k_categorical_accuracy",
                          "weighted_accuracy"]
    np.testing.assert_allclose(logs["accuracy"], np.mean(pred.argmax(1) == y))
    rank = (pred > pred[np.arange(96), y][:, None]).sum(1)
    np.testing.assert_allclose(logs["sparse_top_k_categorical_accuracy"], np.mean(rank < 3))
    w = np.linspace(0.1, 1, 96)
    values = model.evaluate(x, y, sample_weight=w, batch_size=20, verbose=0)
    correct = pred.argmax(1) == y
    np.testing.assert_allclose(values[1], np.mean(correct))  # `metrics` ignore sample weights
    np.testing.assert_allclose(values[3], np.sum(correct * w) / w.sum(), rtol=1e-6)
    ops = model.test_function.graph.count_ops()
    assert ops.get("argmax", 0) >= 1  # the accuracy statistics are nodes of the test graph


def test_accuracy_resolution_like_keras():
    def resolved(loss, y_shape, out_units, y=None):
        model = kiln.Sequential([kiln.Input((4,)), layers.Dense(out_units, activation="sigmoid")])
        model.compile("sgd", loss, metrics=["acc"])
        x = np.zeros((4, 4), np.float32)
        target = np.zeros(y_shape, np.float32) if y is None else y
        model.evaluate(x, target, verbose=0)
        return type(model.metrics[-1]).__name__, model.metrics[-1].name

    assert resolved("binary_crossentropy", (4, 1), 1) == ("BinaryAccuracy", "acc")
    assert resolved("categorical_crossentropy", (4, 3), 3) == ("CategoricalAccuracy", "acc")
    assert resolved("sparse_categorical_crossentropy", (4,), 3,
                    np.zeros(4, np.int64))[0] == "SparseCategoricalAccuracy"
    assert resolved("mse", (4, 1), 1)[0] == "BinaryAccuracy"
    assert resolved("mse", (4, 3), 3)[0] == "CategoricalAccuracy"


def test_get_names_and_errors():
    assert isinstance(M.get("mae"), M.MeanAbsoluteError) and M.get("mae").name == "mae"
    assert isinstance(M.get("AUC"), M.AUC)
    with pytest.raises(ValueError, match="Valid names"):
        M.get("acuracy")
    with pytest.raises(TypeError):
        M.get(3)
    custom = M.get(lambda yt, yp: kiln.ops.mean(kiln.ops.abs(yt - yp), axis=-1))
    custom.update_state(np.ones((2, 2)), np.zeros((2, 2)))
    assert custom.result() == 1.0


def test_confusion_metrics_reject_mismatched_shapes_before_running():
    model = kiln.Sequential([kiln.Input((4,)), layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=[M.AUC()])
    with pytest.raises(ValueError, match="do not match predictions"):
        model.evaluate(np.ones((8, 4)), np.arange(8) % 3, verbose=0)


def test_compile_config_round_trip():
    model = kiln.Sequential([kiln.Input((4,)), layers.Dense(3, activation="softmax")])
    model.compile(kiln.optimizers.Adam(0.01), kiln.losses.SparseCategoricalCrossentropy(),
                  metrics=["accuracy", M.AUC(num_thresholds=20)])
    config = json.loads(json.dumps(model.get_compile_config()))
    clone = kiln.Sequential([kiln.Input((4,)), layers.Dense(3, activation="softmax")])
    clone.compile_from_config(config)
    assert type(clone.optimizer).__name__ == "Adam"
    assert clone.optimizer.learning_rate == pytest.approx(0.01)
    assert isinstance(clone._compile_args["loss"], kiln.losses.SparseCategoricalCrossentropy)
    assert clone._compile_args["metrics"][1].num_thresholds == 20


@pytest.mark.parametrize("make, inputs", [
    (lambda: kiln.metrics.Mean(), 1),
    (lambda: kiln.metrics.SparseCategoricalAccuracy(), "sparse"),
    (lambda: kiln.metrics.Precision(thresholds=[0.3, 0.6]), "binary"),
    (lambda: kiln.metrics.AUC(num_thresholds=20), "binary"),
    (lambda: kiln.metrics.AUC(num_thresholds=20, multi_label=True), "binary"),
])
def test_metric_state_round_trips_through_json(make, inputs):
    """get_state -> JSON -> set_state on a fresh metric, then one more batch on both: the
    same result (what a mid-epoch backup relies on)."""
    import json

    rng = np.random.default_rng(5)

    def batch():
        if inputs == 1:
            return (rng.normal(size=8),)
        if inputs == "sparse":
            return rng.integers(0, 3, 8), rng.random((8, 3))
        return rng.integers(0, 2, (8, 3)).astype("float32"), rng.random((8, 3))

    a, b = make(), make()
    if isinstance(a, kiln.metrics.AUC) and a.multi_label:  # unshaped before the first batch
        b.set_state(json.loads(json.dumps(a.get_state())))
    a.update_state(*batch())
    a.update_state(*batch())
    b.set_state(json.loads(json.dumps(a.get_state())))
    np.testing.assert_array_equal(np.asarray(b.result()), np.asarray(a.result()))
    last = batch()
    a.update_state(*last)
    b.update_state(*last)
    np.testing.assert_array_equal(np.asarray(b.result()), np.asarray(a.result()))
    with pytest.raises(ValueError, match=a.name):
        b.set_state(a.get_state()[:1] if len(a.get_state()) > 1 else [])
