"""Regression losses: squared, absolute, percentage and logarithmic errors, Huber, log-cosh and
cosine similarity (Keras 3 names, arguments and formulas)."""

from __future__ import annotations

import math
from typing import Any

import kiln.ops as K
from kiln.config import epsilon
from kiln.core import Node
from kiln.losses.base import _align, _c, eager, wrapper_class


@eager
def mean_squared_error(y_true: Any, y_pred: Any) -> Node:
    """``mean(square(y_true - y_pred), axis=-1)``."""
    y_true, y_pred = _align("mean_squared_error", y_true, y_pred)
    return K.mean(K.square(y_pred - y_true), axis=-1)


@eager
def mean_absolute_error(y_true: Any, y_pred: Any) -> Node:
    """``mean(abs(y_true - y_pred), axis=-1)``."""
    y_true, y_pred = _align("mean_absolute_error", y_true, y_pred)
    return K.mean(K.abs(y_pred - y_true), axis=-1)


@eager
def mean_absolute_percentage_error(y_true: Any, y_pred: Any) -> Node:
    """``100 * mean(abs((y_true - y_pred) / max(abs(y_true), epsilon)), axis=-1)``."""
    y_true, y_pred = _align("mean_absolute_percentage_error", y_true, y_pred)
    diff = K.abs((y_true - y_pred) / K.maximum(K.abs(y_true), _c(epsilon(), y_true)))
    return _c(100.0, diff) * K.mean(diff, axis=-1)


@eager
def mean_squared_logarithmic_error(y_true: Any, y_pred: Any) -> Node:
    """``mean(square(log(max(y_pred, eps) + 1) - log(max(y_true, eps) + 1)), axis=-1)``."""
    y_true, y_pred = _align("mean_squared_logarithmic_error", y_true, y_pred)
    one, eps = _c(1.0, y_pred), _c(epsilon(), y_pred)
    first = K.log(K.maximum(y_pred, eps) + one)
    second = K.log(K.maximum(y_true, eps) + one)
    return K.mean(K.square(first - second), axis=-1)


@eager
def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> Node:
    """Quadratic for ``|error| <= delta``, linear beyond: Keras' ``huber``."""
    y_true, y_pred = _align("huber", y_true, y_pred)
    error = y_pred - y_true
    abs_error = K.abs(error)
    half, d = _c(0.5, error), _c(delta, error)
    return K.mean(K.where(abs_error <= d, half * K.square(error),
                          d * abs_error - _c(0.5 * delta * delta, error)), axis=-1)


@eager
def log_cosh(y_true: Any, y_pred: Any) -> Node:
    """``mean(log(cosh(y_pred - y_true)), axis=-1)`` in the stable form
    ``x + softplus(-2x) - log(2)``."""
    y_true, y_pred = _align("log_cosh", y_true, y_pred)
    x = y_pred - y_true
    return K.mean(x + K.softplus(x * _c(-2.0, x)) - _c(math.log(2.0), x), axis=-1)


@eager
def cosine_similarity(y_true: Any, y_pred: Any, axis: int = -1) -> Node:
    """``-sum(l2_normalize(y_true) * l2_normalize(y_pred), axis)`` (Keras' loss sign)."""
    y_true, y_pred = _align("cosine_similarity", y_true, y_pred)
    return -K.sum(_l2_normalize(y_true, axis) * _l2_normalize(y_pred, axis), axis=axis)


def _l2_normalize(x: Node, axis: int) -> Node:
    sq = K.sum(K.square(x), axis=axis, keepdims=True)
    return x * K.rsqrt(K.maximum(sq, _c(1e-12, x)))


MeanSquaredError = wrapper_class("MeanSquaredError", mean_squared_error,
                                 "mean_squared_error", {})
MeanAbsoluteError = wrapper_class("MeanAbsoluteError", mean_absolute_error,
                                  "mean_absolute_error", {})
MeanAbsolutePercentageError = wrapper_class(
    "MeanAbsolutePercentageError", mean_absolute_percentage_error,
    "mean_absolute_percentage_error", {})
MeanSquaredLogarithmicError = wrapper_class(
    "MeanSquaredLogarithmicError", mean_squared_logarithmic_error,
    "mean_squared_logarithmic_error", {})
Huber = wrapper_class("Huber", huber, "huber_loss", {"delta": 1.0})
LogCosh = wrapper_class("LogCosh", log_cosh, "log_cosh", {})
CosineSimilarity = wrapper_class("CosineSimilarity", cosine_similarity, "cosine_similarity",
                                 {"axis": -1})
