"""AUC: the area under the ROC or PR curve, from confusion counts at many thresholds."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.core import format_shape as fmt
from kiln.losses.base import EPSILON, _float
from kiln.metrics.base import Metric
from kiln.metrics.confusion import _confusion_stats, _divide_no_nan


class AUC(Metric):
    """Area under the ROC (or PR) curve, from confusion counts at ``num_thresholds`` thresholds
    (Keras' method: thresholds evenly spaced in [0, 1] plus ``-eps`` and ``1 + eps``;
    trapezoidal "interpolation" sums for ROC, Davis-Goadrich interpolation for PR).

    With ``multi_label=True`` (Keras' rule) the counts are kept per label (the last axis of
    rank-2 predictions; state shape ``(num_thresholds, num_labels)``), an AUC is computed per
    label and the result is their mean, weighted by ``label_weights`` when given
    (``sum(auc * w) / sum(w)``). With ``multi_label=False`` all entries are flattened into one
    binary problem and ``label_weights`` multiply the sample weights along the last axis.

    Args:
        num_thresholds: number of thresholds (default 200).
        curve: ``"ROC"`` (default) or ``"PR"``.
        summation_method: ``"interpolation"`` (default), ``"minoring"`` or ``"majoring"``.
        thresholds: optional explicit thresholds in [0, 1] (overrides ``num_thresholds``).
        multi_label: one AUC per label, averaged (see above).
        num_labels: the number of labels (``multi_label`` only; else taken from the first
            batch).
        label_weights: optional non-negative weight per label (see above).
        from_logits: apply a sigmoid to the predictions first.

    Example:
        >>> m = kiln.metrics.AUC(multi_label=True, label_weights=[1.0, 3.0])
        >>> m.update_state([[0, 1], [1, 0], [1, 1]], [[0.2, 0.9], [0.7, 0.5], [0.6, 0.4]])
        >>> m.result()  # label AUCs 1.0 and 0.5: (1.0 * 1.0 + 3.0 * 0.5) / 4
        0.625
    """

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC",
                 summation_method: str = "interpolation", name: str | None = None,
                 dtype: Any = None, thresholds: Any = None, multi_label: bool = False,
                 num_labels: int | None = None, label_weights: Any = None,
                 from_logits: bool = False):
        curve = str(curve).upper()
        if curve not in ("ROC", "PR"):
            raise ValueError(f"AUC: curve must be 'ROC' or 'PR', received {curve!r}")
        summation_method = str(summation_method).lower()
        if summation_method not in ("interpolation", "minoring", "majoring"):
            raise ValueError("AUC: summation_method must be 'interpolation', 'minoring' or "
                             f"'majoring', received {summation_method!r}")
        if num_labels is not None:
            if not multi_label:
                raise ValueError("AUC: num_labels is needed only when multi_label=True, "
                                 f"received num_labels={num_labels!r}")
            if (isinstance(num_labels, bool) or not isinstance(num_labels, (int, np.integer))
                    or num_labels < 1):
                raise ValueError(f"AUC: num_labels must be a positive integer, received "
                                 f"{num_labels!r}")
            num_labels = int(num_labels)
        if label_weights is not None:
            lw = np.asarray(label_weights, np.float64)
            if lw.ndim != 1 or lw.size == 0 or not np.all(np.isfinite(lw)) or np.any(lw < 0):
                raise ValueError("AUC: label_weights must be a non-empty 1-D list of "
                                 f"non-negative numbers, received {label_weights!r}")
            if num_labels is not None and lw.size != num_labels:
                raise ValueError(f"AUC: label_weights has {lw.size} entries but "
                                 f"num_labels={num_labels}")
            label_weights = lw
        if thresholds is not None:
            inner = sorted(float(t) for t in np.atleast_1d(thresholds))
            self._init_thresholds = inner
            num_thresholds = len(inner) + 2
        else:
            if num_thresholds <= 1:
                raise ValueError(f"AUC: num_thresholds must be > 1, received {num_thresholds}")
            self._init_thresholds = None
            inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        self.num_thresholds = int(num_thresholds)
        self.thresholds = np.asarray([0.0 - EPSILON] + inner + [1.0 + EPSILON], np.float64)
        self.curve = curve
        self.summation_method = summation_method
        self.multi_label = bool(multi_label)
        self.num_labels = num_labels
        self.label_weights: np.ndarray | None = label_weights
        self._num_labels = num_labels  # the state's label count, fixed by the first batch
        self._from_logits = bool(from_logits)
        super().__init__(name=name, dtype=dtype)

    def reset_state(self) -> None:
        if self.multi_label and self._num_labels is None:
            self._state: list[np.ndarray] | None = None  # shaped by the first batch
            return
        shape = (self.num_thresholds, self._num_labels) if self.multi_label else \
            (self.num_thresholds,)
        self._state = [np.zeros(shape) for _ in range(4)]

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        if self.multi_label:
            if y_pred.ndim != 2:
                raise ValueError("AUC: multi_label=True needs predictions of rank 2 (samples, "
                                 f"labels), received shape {fmt(y_pred.shape)}")
            n = y_pred.shape[-1]
            if n is None:
                raise ValueError("AUC: multi_label=True needs a known number of labels (last "
                                 f"axis), received shape {fmt(y_pred.shape)}")
            if self.label_weights is not None and len(self.label_weights) != n:
                raise ValueError(f"AUC: label_weights has {len(self.label_weights)} entries "
                                 f"but the predictions of shape {fmt(y_pred.shape)} have {n} "
                                 "labels")
            if self._num_labels is not None and n != self._num_labels:
                raise ValueError(f"AUC: the state holds {self._num_labels} labels "
                                 f"(num_labels={self.num_labels}), received predictions of "
                                 f"shape {fmt(y_pred.shape)}")
        if self._from_logits:
            y_pred = K.sigmoid(_float(y_pred))
        return _confusion_stats(y_true, y_pred, sample_weight, self.thresholds,
                                multi_label=self.multi_label,
                                label_weights=None if self.multi_label else self.label_weights,
                                who="AUC")

    def merge(self, values: list[np.ndarray]) -> None:
        if self._state is None:
            self._num_labels = int(values[0].shape[-1])
            self.reset_state()
        assert self._state is not None
        if values[0].shape != self._state[0].shape:
            raise ValueError(f"AUC: statistics of shape {values[0].shape} do not match the "
                             f"state of shape {self._state[0].shape} (multi_label needs the "
                             "same number of labels in every batch)")
        for s, v in zip(self._state, values):
            s += v

    def _counts(self) -> list[np.ndarray]:
        if self._state is None:
            return [np.zeros((self.num_thresholds, 0)) for _ in range(4)]
        return self._state

    @property
    def true_positives(self) -> np.ndarray:
        return self._counts()[0]

    @property
    def false_positives(self) -> np.ndarray:
        return self._counts()[1]

    @property
    def true_negatives(self) -> np.ndarray:
        return self._counts()[2]

    @property
    def false_negatives(self) -> np.ndarray:
        return self._counts()[3]

    def _state_values(self) -> list[Any]:
        return list(self._counts())

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        shape = values[0].shape
        ok = shape[0] == self.num_thresholds and len(shape) == (2 if self.multi_label else 1)
        if not ok or any(v.shape != shape for v in values):
            raise ValueError(f"{self.name}: state shapes {[v.shape for v in values]} do not "
                             f"fit num_thresholds={self.num_thresholds}, "
                             f"multi_label={self.multi_label}")
        if self.multi_label:
            if shape[1] == 0:  # saved before the first batch
                self._num_labels = self.num_labels
                self.reset_state()
                return
            self._num_labels = shape[1]
        self._state = [v.copy() for v in values]

    def _reduce(self, terms: np.ndarray) -> float:
        """Sums the per-interval terms: one AUC, or the (label-weighted) mean of the per-label
        AUCs with ``multi_label``."""
        if not self.multi_label:
            return float(np.sum(terms))
        by_label = np.sum(terms, axis=0)
        if self.label_weights is None:
            return float(np.mean(by_label))
        lw = self.label_weights
        return float(_divide_no_nan(np.sum(by_label * lw), np.sum(lw)))

    def _interpolate_pr_auc(self) -> float:
        tp, fp, _, fn = self._counts()
        n = self.num_thresholds
        dtp = tp[:n - 1] - tp[1:]
        p = tp + fp
        dp = p[:n - 1] - p[1:]
        prec_slope = _divide_no_nan(dtp, np.maximum(dp, 0))
        intercept = tp[1:] - prec_slope * p[1:]
        safe_p_ratio = np.where((p[:n - 1] > 0) & (p[1:] > 0),
                                _divide_no_nan(p[:n - 1], np.maximum(p[1:], 0)), 1.0)
        increment = _divide_no_nan(prec_slope * (dtp + intercept * np.log(safe_p_ratio)),
                                   np.maximum(tp[1:] + fn[1:], 0))
        return self._reduce(increment)

    def result(self) -> float:
        if self._state is None:
            return 0.0
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self._interpolate_pr_auc()
        tp, fp, tn, fn = self._state
        recall = _divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _divide_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, _divide_no_nan(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = np.minimum(y[:-1], y[1:])
        else:
            heights = np.maximum(y[:-1], y[1:])
        return self._reduce((x[:-1] - x[1:]) * heights)

    def get_config(self) -> dict:
        config = super().get_config()
        lw = self.label_weights
        config.update({"num_thresholds": self.num_thresholds, "curve": self.curve,
                       "summation_method": self.summation_method,
                       "thresholds": self._init_thresholds, "multi_label": self.multi_label,
                       "num_labels": self.num_labels,
                       "label_weights": None if lw is None else lw.tolist(),
                       "from_logits": self._from_logits})
        return config
