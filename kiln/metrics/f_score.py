"""F-scores and the coefficient of determination (Keras 3's ``FBetaScore``, ``F1Score``,
``R2Score``): per-class sums in the graph, the scores in Python."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.core import format_shape as fmt
from kiln.losses.base import EPSILON, _c, _float, squeeze_or_expand_to_same_rank
from kiln.metrics.base import Metric, weights_like

_AVERAGES = (None, "micro", "macro", "weighted")


def _rank2(who: str, y_true: Node, y_pred: Node) -> None:
    if y_pred.ndim != 2 or y_true.ndim != 2 or y_pred.shape[-1] is None:
        raise ValueError(f"{who} expects 2D inputs with shape (batch_size, output_dim) and a "
                         f"known output_dim. Received input shapes: y_pred.shape="
                         f"{fmt(y_pred.shape)} and y_true.shape={fmt(y_true.shape)}")
    if y_true.shape[-1] is not None and y_true.shape[-1] != y_pred.shape[-1]:
        raise ValueError(f"{who}: y_true of shape {fmt(y_true.shape)} does not match y_pred "
                         f"of shape {fmt(y_pred.shape)}")


class _Summed(Metric):
    """A metric whose state is a list of float64 arrays, each the sum of one statistic."""

    def reset_state(self) -> None:
        self._state: list[np.ndarray] | None = None

    def merge(self, values: list[np.ndarray]) -> None:
        arrays = [np.asarray(v, np.float64) for v in values]
        if self._state is None:
            self._state = [a.copy() for a in arrays]
            return
        if any(a.shape != s.shape for a, s in zip(arrays, self._state)):
            raise ValueError(f"{self.name}: a batch with statistics of shapes "
                             f"{[a.shape for a in arrays]} does not fit the state's "
                             f"{[s.shape for s in self._state]} (the number of classes changed)")
        for s, a in zip(self._state, arrays):
            s += a

    def _state_values(self) -> list[Any]:
        return list(self._state) if self._state is not None else []

    def set_state(self, state: list) -> None:
        self._state = [np.asarray(v, np.float64) for v in state] or None


class FBetaScore(_Summed):
    """The F-beta score, ``(1 + beta**2) * p * r / (beta**2 * p + r)`` per class (Keras 3).

    Predictions above ``threshold`` count as positive; with ``threshold=None`` the largest
    prediction of each sample is the positive one (all tied maxima, but never an all-zero row).
    True positives, false positives, false negatives and the label weights are weighted sums
    per class (``average="micro"``: over all entries), so batches and processes add them.

    Args:
        average: None (one score per class), ``"micro"`` (from the global counts),
            ``"macro"`` (the mean of the class scores) or ``"weighted"`` (weighted by each
            class' weighted label count).
        beta: positive float, the weight of recall.
        threshold: None or a float in (0, 1].
        name, dtype: as for :class:`Metric`.

    Example:
        >>> m = kiln.metrics.FBetaScore(beta=2.0, threshold=0.5)
        >>> m.update_state(np.array([[1, 0], [0, 1]]), np.array([[0.9, 0.7], [0.2, 0.8]]))
        >>> m.result()  # array([1.0, 0.8333...])
    """

    def __init__(self, average: str | None = None, beta: float = 1.0,
                 threshold: float | None = None, name: str = "fbeta_score", dtype: Any = None):
        who = type(self).__name__
        if average not in _AVERAGES:
            raise ValueError(f"{who}: invalid `average` argument value. Expected one of: "
                             f"{_AVERAGES}. Received: average={average!r}")
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0.0:
            raise ValueError(f"{who}: `beta` should be a float greater than 0. Received: "
                             f"beta={beta!r}")
        if threshold is not None:
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
                raise ValueError(f"{who}: `threshold` should be a float. Received: "
                                 f"threshold={threshold!r}")
            if not 0.0 < threshold <= 1.0:
                raise ValueError(f"{who}: `threshold` should be a float in the range (0, 1]. "
                                 f"Received: threshold={threshold!r}")
            threshold = float(threshold)
        self.average = average
        self.beta = float(beta)
        self.threshold = threshold
        super().__init__(name=name, dtype=dtype)

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        y_pred = _float(y_pred)
        y_true = K.cast(y_true, y_pred.dtype) if y_true.dtype != y_pred.dtype else y_true
        _rank2(type(self).__name__, y_true, y_pred)
        if self.threshold is None:
            top = K.max(y_pred, axis=-1, keepdims=True)
            pred = K.logical_and(y_pred >= top, K.abs(y_pred) > _c(1e-9, y_pred))
        else:
            pred = y_pred > _c(self.threshold, y_pred)
        pred = K.cast(pred, y_pred.dtype)
        one = _c(1.0, y_pred)
        sw = weights_like(sample_weight, y_pred)
        axis = None if self.average == "micro" else 0

        def wsum(v: Node) -> Node:
            return K.sum(v if sw is None else v * sw, axis=axis)

        y_true = K.broadcast_like(y_true, y_pred)
        return [wsum(pred * y_true), wsum(pred * (one - y_true)), wsum((one - pred) * y_true),
                wsum(y_true)]

    def result(self) -> Any:
        if self._state is None:
            return 0.0 if self.average is not None else np.zeros(0)
        tp, fp, fn, weights = self._state
        precision = tp / (tp + fp + EPSILON)
        recall = tp / (tp + fn + EPSILON)
        b2 = self.beta ** 2
        score = precision * recall / (b2 * precision + recall + EPSILON) * (1.0 + b2)
        if self.average == "weighted":
            return float(np.sum(score * weights / (np.sum(weights) + EPSILON)))
        if self.average is not None:
            return float(np.mean(score))
        return score

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "beta": self.beta,
                "average": self.average, "threshold": self.threshold}


class F1Score(FBetaScore):
    """The F1 score: :class:`FBetaScore` with ``beta=1`` (same ``average`` and
    ``threshold``)."""

    def __init__(self, average: str | None = None, threshold: float | None = None,
                 name: str = "f1_score", dtype: Any = None):
        super().__init__(average=average, beta=1.0, threshold=threshold, name=name, dtype=dtype)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["beta"]
        return config


class R2Score(_Summed):
    """The coefficient of determination, ``1 - SS_res / SS_tot`` per output (Keras 3).

    The state is additive: per output the weighted sums of ``y``, ``y**2``, the squared errors
    and the weights, and the number of samples; ``SS_tot = sum(w y**2) - sum(w y)**2 / sum(w)``.

    Args:
        class_aggregation: ``"uniform_average"`` (default: the mean over outputs),
            ``"variance_weighted_average"`` (weighted by each output's ``SS_tot``) or None
            (one score per output).
        num_regressors: the number of independent regressors (> 0: the adjusted R2,
            ``1 - (1 - R2) (n - 1) / (n - p - 1)``; with ``p >= n - 1`` it warns and returns
            the plain R2, like Keras).

    Example:
        >>> m = kiln.metrics.R2Score()
        >>> m.update_state(np.array([[1.], [4.], [3.]]), np.array([[2.], [4.], [4.]]))
        >>> m.result()  # 0.5714...
    """

    def __init__(self, class_aggregation: str | None = "uniform_average",
                 num_regressors: int = 0, name: str = "r2_score", dtype: Any = None):
        valid = ("uniform_average", "variance_weighted_average", None)
        if class_aggregation not in valid:
            raise ValueError(f"R2Score: invalid value for argument `class_aggregation`. "
                             f"Expected one of {valid}. Received: "
                             f"class_aggregation={class_aggregation!r}")
        if (isinstance(num_regressors, bool) or not isinstance(num_regressors, (int, np.integer))
                or num_regressors < 0):
            raise ValueError("R2Score: invalid value for argument `num_regressors`. Expected "
                             f"a value >= 0. Received: num_regressors={num_regressors!r}")
        self.class_aggregation = class_aggregation
        self.num_regressors = int(num_regressors)
        super().__init__(name=name, dtype=dtype)

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        y_pred = _float(y_pred)
        y_true = K.cast(y_true, y_pred.dtype) if y_true.dtype != y_pred.dtype else y_true
        y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
        if y_true.ndim == 1:
            y_true, y_pred = K.expand_dims(y_true, -1), K.expand_dims(y_pred, -1)
        _rank2("R2Score", y_true, y_pred)
        y_true = K.broadcast_like(y_true, y_pred)
        sw = weights_like(sample_weight, y_pred)
        if sw is None:
            sw = K.ones_like(y_pred)
        wy = y_true * sw
        return [K.sum(wy, axis=0), K.sum(y_true * wy, axis=0),
                K.sum(K.square(y_true - y_pred) * sw, axis=0), K.sum(sw, axis=0),
                K.cast(K.size_of(y_pred[:, 0]), y_pred.dtype)]

    def result(self) -> Any:
        if self._state is None:
            return 0.0
        total_y, total_y2, sse, count, n = self._state
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = total_y / count
            ss_tot = total_y2 - total_y * mean
            raw = 1.0 - sse / ss_tot
        raw = np.where(np.isinf(raw), 0.0, raw)
        if self.class_aggregation == "uniform_average":
            score: Any = float(np.mean(raw))
        elif self.class_aggregation == "variance_weighted_average":
            score = float(np.sum(ss_tot * raw) / np.sum(ss_tot))
        else:
            score = raw
        p, samples = self.num_regressors, float(n)
        if p:
            if p > samples - 1:
                warnings.warn("More independent predictors than datapoints in adjusted R2 "
                              "score. Falling back to standard R2 score.", stacklevel=2)
            elif p == samples - 1:
                warnings.warn("Division by zero in Adjusted R2 score. Falling back to "
                              "standard R2 score.", stacklevel=2)
            else:
                score = 1.0 - (1.0 - score) * (samples - 1.0) / (samples - p - 1.0)
        return score

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype,
                "class_aggregation": self.class_aggregation,
                "num_regressors": self.num_regressors}
