"""Regression metrics: the means of the regression losses, and the root mean squared error."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.losses import regression as _losses
from kiln.metrics.base import wrapper_class

MeanSquaredError = wrapper_class("MeanSquaredError", _losses.mean_squared_error,
                                 "mean_squared_error", {}, "Mean of ``(y_true - y_pred)**2``.")
MeanAbsoluteError = wrapper_class("MeanAbsoluteError", _losses.mean_absolute_error,
                                  "mean_absolute_error", {}, "Mean of ``|y_true - y_pred|``.")
MeanAbsolutePercentageError = wrapper_class(
    "MeanAbsolutePercentageError", _losses.mean_absolute_percentage_error,
    "mean_absolute_percentage_error", {}, "Mean absolute percentage error.")
MeanSquaredLogarithmicError = wrapper_class(
    "MeanSquaredLogarithmicError", _losses.mean_squared_logarithmic_error,
    "mean_squared_logarithmic_error", {}, "Mean squared logarithmic error.")
LogCoshError = wrapper_class("LogCoshError", _losses.log_cosh, "logcosh", {},
                             "Mean of ``log(cosh(y_pred - y_true))``.")


class RootMeanSquaredError(MeanSquaredError):  # type: ignore[misc, valid-type]
    """``sqrt(mean((y_true - y_pred)**2))`` over all samples seen."""

    def __init__(self, name: str = "root_mean_squared_error", dtype: Any = None):
        super().__init__(name=name, dtype=dtype)

    def result(self) -> float:
        return float(np.sqrt(super().result()))
