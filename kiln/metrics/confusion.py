"""Confusion-matrix metrics: Precision, Recall and the weighted counts of true/false
positives/negatives, from counts per threshold (Keras' ``update_confusion_matrix_variables``)."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.core import format_shape as fmt
from kiln.losses.base import _c, _float, squeeze_or_expand_to_same_rank
from kiln.metrics.base import Metric, weights_like

#: Keras' ``NEG_INF``: the value of the predictions ``top_k`` filters out, and the default
#: threshold of Precision/Recall with ``top_k`` (every kept prediction counts as positive)
NEG_INF = -1e10


def _check_top_k(who: str, top_k: Any) -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"{who}: top_k must be a positive integer, received {top_k!r}")
    return int(top_k)


def _filter_top_k(x: Node, k: int, who: str) -> Node:
    """Keras' ``_filter_top_k``: keeps the ``k`` largest entries of the last axis (ties go to
    the lower index, like ``top_k``) and sets the others to ``NEG_INF``.

    An entry is kept when fewer than ``k`` entries are greater or equal with a lower index
    (pairwise comparisons: O(classes**2) per sample)."""
    n = x.shape[-1] if x.ndim > 1 else None
    if n is None:
        raise ValueError(f"{who}: top_k ranks the last (class) axis of each sample and needs "
                         "predictions of shape (samples, ..., classes) with a known class "
                         f"count, received shape {fmt(x.shape)} (for one sample, pass "
                         "[[...]])")
    if k > n:
        raise ValueError(f"{who}: top_k={k} exceeds the {n} entries of the predictions' last "
                         f"axis (shape {fmt(x.shape)})")
    xi = K.expand_dims(x, -1)  # [..., i, 1]
    xj = K.expand_dims(x, -2)  # [..., 1, j]
    earlier = K.constant(np.tri(n, n, -1, dtype=x.dtype))  # [i, j] = j < i
    ahead = K.cast(xj > xi, x.dtype) + K.cast(K.equal(xj, xi), x.dtype) * earlier
    rank = K.sum(ahead, axis=-1)
    return K.where(rank < _c(float(k), rank), x, _c(NEG_INF, x))


def _confusion_stats(y_true: Node, y_pred: Node, sample_weight: Node | None,
                     thresholds: np.ndarray, class_id: int | None = None,
                     which: tuple[str, ...] = ("tp", "fp", "tn", "fn"),
                     top_k: int | None = None, multi_label: bool = False,
                     label_weights: np.ndarray | None = None,
                     who: str = "confusion-matrix metric") -> list[Node]:
    """Weighted counts of true/false positives/negatives at each threshold
    (``prediction > threshold`` is positive; any non-zero label is positive), Keras'
    ``update_confusion_matrix_variables``:

    * ``top_k``: per sample only the ``k`` largest predictions of the last axis are kept, the
      others become ``NEG_INF`` (predicted negative); applied before ``class_id``;
    * ``multi_label``: counts per label (last axis), shape ``(thresholds, labels)``; else all
      entries are flattened into one binary problem, shape ``(thresholds,)``;
    * ``label_weights`` (flattened case only): multiply the sample weights along the last axis.
    """
    y_pred = _float(y_pred)
    y_true = K.cast(y_true, y_pred.dtype) if y_true.dtype != y_pred.dtype else y_true
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    if y_true.ndim != y_pred.ndim or not all(a is None or b is None or a == b or a == 1
                                             for a, b in zip(y_true.shape, y_pred.shape)):
        raise ValueError(f"{who}: labels of shape {fmt(y_true.shape)} do not "
                         f"match predictions of shape {fmt(y_pred.shape)} (Precision, Recall and "
                         "AUC take one label per prediction, e.g. binary labels)")
    sw = weights_like(sample_weight, y_pred)
    if top_k is not None:
        y_pred = _filter_top_k(y_pred, top_k, who)
    if class_id is not None:
        y_true = y_true[..., class_id]
        y_pred = y_pred[..., class_id]
        sw = sw[..., class_id] if sw is not None else None
    y_true = K.broadcast_like(y_true, y_pred)
    if label_weights is not None:
        n = y_pred.shape[-1] if y_pred.ndim > 1 else None
        if n != len(label_weights):
            raise ValueError(f"{who}: label_weights has {len(label_weights)} entries but the "
                             f"predictions of shape {fmt(y_pred.shape)} have "
                             f"{n if n is not None else 'no'} labels on their last axis")
        lw = K.broadcast_like(K.constant(np.asarray(label_weights, y_pred.dtype)), y_pred)
        sw = lw if sw is None else sw * lw
    thr = np.asarray(thresholds, y_pred.dtype)
    if multi_label:  # [sample, threshold, label]
        pred = K.expand_dims(y_pred, 1)
        raw_label = K.expand_dims(y_true, 1)
        w = K.expand_dims(sw, 1) if sw is not None else None
        thr_node = K.constant(thr.reshape(1, -1, 1))
    else:  # [entry, threshold]
        pred = K.reshape(y_pred, (-1, 1))
        raw_label = K.reshape(y_true, (-1, 1))
        w = K.reshape(sw, (-1, 1)) if sw is not None else None
        thr_node = K.constant(thr.reshape(1, -1))
    label = K.cast(K.not_equal(raw_label, _c(0.0, y_pred)), y_pred.dtype)
    pos = K.cast(pred > thr_node, y_pred.dtype)
    one = _c(1.0, y_pred)
    pos_l = label if w is None else label * w
    neg_l = (one - label) if w is None else (one - label) * w
    tp = K.sum(pos * pos_l, axis=0)
    fp = K.sum(pos * neg_l, axis=0)
    out = {"tp": tp, "fp": fp}
    if "fn" in which:
        out["fn"] = K.sum(pos_l, axis=0) - tp
    if "tn" in which:
        out["tn"] = K.sum(neg_l, axis=0) - fp
    return [out[k] for k in which]


def _divide_no_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)


class _ConfusionMetric(Metric):
    _which: tuple[str, ...] = ()

    def __init__(self, thresholds: Any = None, top_k: int | None = None,
                 class_id: int | None = None, name: str | None = None, dtype: Any = None):
        top_k = _check_top_k(type(self).__name__, top_k)
        self.init_thresholds = thresholds
        self._single = thresholds is None or np.ndim(thresholds) == 0
        if thresholds is None:
            thr = [0.5 if top_k is None else NEG_INF]
        else:
            thr = np.atleast_1d(thresholds).tolist()
            for t in thr:
                if not 0.0 <= float(t) <= 1.0:
                    raise ValueError(f"{type(self).__name__}: thresholds must be in [0, 1], "
                                     f"received {thresholds!r}")
        self.thresholds = np.asarray(thr, np.float64)
        self.top_k = top_k
        self.class_id = class_id
        super().__init__(name=name, dtype=dtype)

    def reset_state(self) -> None:
        self._state = [np.zeros(len(self.thresholds)) for _ in self._which]

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        return _confusion_stats(y_true, y_pred, sample_weight, self.thresholds, self.class_id,
                                self._which, top_k=self.top_k, who=type(self).__name__)

    def merge(self, values: list[np.ndarray]) -> None:
        for s, v in zip(self._state, values):
            s += v

    def _out(self, value: np.ndarray) -> Any:
        return float(value[0]) if self._single else value

    def _state_values(self) -> list[Any]:
        return list(self._state)

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        if any(v.shape != s.shape for v, s in zip(values, self._state)):
            raise ValueError(f"{self.name}: state shapes {[v.shape for v in values]} do not "
                             f"fit {len(self.thresholds)} thresholds")
        self._state = [v.copy() for v in values]

    def get_config(self) -> dict:
        config = super().get_config()
        thr = self.init_thresholds
        config.update({"thresholds": thr.tolist() if isinstance(thr, np.ndarray) else thr,
                       "top_k": self.top_k, "class_id": self.class_id})
        return config


class Precision(_ConfusionMetric):
    """``tp / (tp + fp)`` with ``prediction > threshold`` as positive.

    With ``top_k`` (Keras' rule), per sample only the ``k`` largest predictions of the last
    axis are kept (ties go to the lower index); the others count as predicted negative. Then
    the default threshold is ``NEG_INF`` (every kept prediction is positive), else 0.5.

    Args:
        thresholds: a float or a list of floats in [0, 1] (then the result is an array).
        top_k: optional positive int, the number of top predictions per sample to consider.
        class_id: optional class index to compute the metric for (after ``top_k``).

    Example:
        >>> m = kiln.metrics.Precision(top_k=1)
        >>> m.update_state([[0, 1, 0], [1, 0, 0]], [[0.2, 0.5, 0.3], [0.1, 0.7, 0.2]])
        >>> m.result()
        0.5
    """

    _which = ("tp", "fp")

    def result(self) -> Any:
        tp, fp = self._state
        return self._out(_divide_no_nan(tp, tp + fp))


class Recall(_ConfusionMetric):
    """``tp / (tp + fn)`` with ``prediction > threshold`` as positive.

    ``thresholds``, ``top_k`` and ``class_id`` as for :class:`Precision` (with ``top_k`` a
    label counts as recalled when its class is among the sample's ``k`` top predictions).
    """

    _which = ("tp", "fn")

    def result(self) -> Any:
        tp, fn = self._state
        return self._out(_divide_no_nan(tp, tp + fn))


class _Counts(_ConfusionMetric):
    _kind = "tp"

    def __init__(self, thresholds: Any = None, name: str | None = None, dtype: Any = None):
        super().__init__(thresholds=thresholds, name=name, dtype=dtype)

    def result(self) -> Any:
        return self._out(self._state[0])

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "thresholds": self.init_thresholds}


class TruePositives(_Counts):
    """Weighted count of true positives."""
    _which = ("tp",)


class FalsePositives(_Counts):
    """Weighted count of false positives."""
    _which = ("fp",)


class TrueNegatives(_Counts):
    """Weighted count of true negatives."""
    _which = ("tn",)


class FalseNegatives(_Counts):
    """Weighted count of false negatives."""
    _which = ("fn",)
