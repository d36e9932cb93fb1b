"""Metrics at a constraint on another (Keras 3): ``SensitivityAtSpecificity``,
``SpecificityAtSensitivity``, ``PrecisionAtRecall``, ``RecallAtPrecision``, from confusion
counts at ``num_thresholds`` thresholds (sums over batches)."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import Node
from kiln.losses.base import EPSILON
from kiln.metrics.base import Metric
from kiln.metrics.confusion import _confusion_stats, _divide_no_nan


class _AtConstraint(Metric):
    _arg = "value"

    def __init__(self, value: float, num_thresholds: int = 200, class_id: int | None = None,
                 name: str | None = None, dtype: Any = None):
        who = type(self).__name__
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0.0 <= value <= 1.0:
            raise ValueError(f"{who}: argument `{self._arg}` must be in the range [0, 1]. "
                             f"Received: {self._arg}={value!r}")
        if isinstance(num_thresholds, bool) or not isinstance(num_thresholds, (int, np.integer)) \
                or num_thresholds <= 0:
            raise ValueError(f"{who}: argument `num_thresholds` must be an integer > 0. "
                             f"Received: num_thresholds={num_thresholds!r}")
        self.value = float(value)
        self.num_thresholds = int(num_thresholds)
        self.class_id = class_id
        if self.num_thresholds == 1:
            thr = [0.5]
        else:
            inner = [(i + 1) / (self.num_thresholds - 1) for i in range(self.num_thresholds - 2)]
            thr = [0.0 - EPSILON] + inner + [1.0 + EPSILON]
        self.thresholds = np.asarray(thr, np.float64)
        super().__init__(name=name, dtype=dtype)

    def reset_state(self) -> None:
        self._state = [np.zeros(len(self.thresholds)) for _ in range(4)]

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        return _confusion_stats(y_true, y_pred, sample_weight, self.thresholds, self.class_id,
                                ("tp", "fp", "tn", "fn"), who=type(self).__name__)

    def merge(self, values: list[np.ndarray]) -> None:
        for s, v in zip(self._state, values):
            s += v

    def _state_values(self) -> list[Any]:
        return list(self._state)

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        if any(v.shape != s.shape for v, s in zip(values, self._state)):
            raise ValueError(f"{self.name}: state shapes {[v.shape for v in values]} do not "
                             f"fit {len(self.thresholds)} thresholds")
        self._state = [v.copy() for v in values]

    def _curves(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def result(self) -> float:
        """The largest dependent value among the thresholds where the constrained one is
        ``>= value`` (0 when there is none), Keras' ``_find_max_under_constraint``."""
        constrained, dependent = self._curves()
        feasible = constrained >= self.value
        return float(np.max(dependent[feasible])) if feasible.any() else 0.0

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, self._arg: self.value,
                "num_thresholds": self.num_thresholds, "class_id": self.class_id}

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        config = dict(config)
        return cls(config.pop(cls._arg), **config)


def _rates(state: list[np.ndarray]) -> dict[str, np.ndarray]:
    tp, fp, tn, fn = state
    return {"sensitivity": _divide_no_nan(tp, tp + fn),
            "specificity": _divide_no_nan(tn, tn + fp),
            "precision": _divide_no_nan(tp, tp + fp)}


class SensitivityAtSpecificity(_AtConstraint):
    """The best sensitivity (recall) among the thresholds where specificity >= ``specificity``.

    Args:
        specificity: in [0, 1].
        num_thresholds: thresholds evenly spaced in [0, 1] (plus ``-eps`` and ``1 + eps``).
        class_id: optional class index to compute the metric for.
    """

    _arg = "specificity"

    def __init__(self, specificity: float, num_thresholds: int = 200,
                 class_id: int | None = None, name: str | None = None, dtype: Any = None):
        super().__init__(specificity, num_thresholds, class_id, name, dtype)

    def _curves(self) -> tuple[np.ndarray, np.ndarray]:
        r = _rates(self._state)
        return r["specificity"], r["sensitivity"]


class SpecificityAtSensitivity(_AtConstraint):
    """The best specificity among the thresholds where sensitivity >= ``sensitivity``."""

    _arg = "sensitivity"

    def __init__(self, sensitivity: float, num_thresholds: int = 200,
                 class_id: int | None = None, name: str | None = None, dtype: Any = None):
        super().__init__(sensitivity, num_thresholds, class_id, name, dtype)

    def _curves(self) -> tuple[np.ndarray, np.ndarray]:
        r = _rates(self._state)
        return r["sensitivity"], r["specificity"]


class PrecisionAtRecall(_AtConstraint):
    """The best precision among the thresholds where recall >= ``recall``."""

    _arg = "recall"

    def __init__(self, recall: float, num_thresholds: int = 200, class_id: int | None = None,
                 name: str | None = None, dtype: Any = None):
        super().__init__(recall, num_thresholds, class_id, name, dtype)

    def _curves(self) -> tuple[np.ndarray, np.ndarray]:
        r = _rates(self._state)
        return r["sensitivity"], r["precision"]


class RecallAtPrecision(_AtConstraint):
    """The best recall among the thresholds where precision >= ``precision``."""

    _arg = "precision"

    def __init__(self, precision: float, num_thresholds: int = 200,
                 class_id: int | None = None, name: str | None = None, dtype: Any = None):
        super().__init__(precision, num_thresholds, class_id, name, dtype)

    def _curves(self) -> tuple[np.ndarray, np.ndarray]:
        r = _rates(self._state)
        return r["precision"], r["sensitivity"]
