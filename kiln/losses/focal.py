"""Focal cross-entropies (Keras 3's ``BinaryFocalCrossentropy`` and
``CategoricalFocalCrossentropy``): the cross-entropy scaled by ``(1 - p_t) ** gamma``.

With ``from_logits`` kiln computes the cross-entropy from the logits in the stable form
(``softplus(x) - x * y``; the clipped log-softmax), where Keras applies the sigmoid/softmax and
clips the probabilities to ``[eps, 1 - eps]``: the two agree wherever that clip is inactive
(``|logit| < ~16``), and kiln's stays exact beyond.
"""

from __future__ import annotations

import math
from typing import Any

import kiln.ops as K
from kiln.config import epsilon
from kiln.core import Node, format_shape
from kiln.losses.base import _align, _c, _float, _to_node, eager, wrapper_class


def _check_focal(who: str, gamma: float, alpha: float | None = None) -> None:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma < 0:
        raise ValueError(f"{who}: gamma must be a non-negative float, received {gamma!r}")
    if alpha is not None and (isinstance(alpha, bool) or not isinstance(alpha, (int, float))):
        raise ValueError(f"{who}: alpha must be a float, received {alpha!r}")


@eager
def binary_focal_crossentropy(y_true: Any, y_pred: Any, apply_class_balancing: bool = False,
                              alpha: float = 0.25, gamma: float = 2.0,
                              from_logits: bool = False, label_smoothing: float = 0.0,
                              axis: int = -1) -> Node:
    """``mean(w * (1 - p_t) ** gamma * bce, axis)`` with ``p_t = y p + (1 - y)(1 - p)`` and,
    with ``apply_class_balancing``, ``w = y alpha + (1 - y)(1 - alpha)`` (Keras 3)."""
    _check_focal("binary_focal_crossentropy", gamma, alpha)
    y_true, y_pred = _align("binary_focal_crossentropy", y_true, y_pred)
    one = _c(1.0, y_pred)
    if label_smoothing:
        y_true = y_true * _c(1.0 - label_smoothing, y_true) + _c(0.5 * label_smoothing, y_true)
    if from_logits:
        bce = K.softplus(y_pred) - y_pred * y_true
        p = K.sigmoid(y_pred)
    else:
        p = y_pred
        pc = K.clip(p, _c(epsilon(), p), _c(1.0 - epsilon(), p))
        bce = -(y_true * K.log(pc) + (one - y_true) * K.log(one - pc))
    p_t = y_true * p + (one - y_true) * (one - p)
    focal = K.power(one - p_t, _c(float(gamma), p)) * bce
    if apply_class_balancing:
        focal = (y_true * _c(alpha, p) + (one - y_true) * _c(1.0 - alpha, p)) * focal
    return K.mean(focal, axis=axis)


@eager
def categorical_focal_crossentropy(y_true: Any, y_pred: Any, alpha: float = 0.25,
                                   gamma: float = 2.0, from_logits: bool = False,
                                   label_smoothing: float = 0.0, axis: int = -1) -> Node:
    """``sum(alpha * (1 - p) ** gamma * -y log p, axis)``, ``p`` the normalized predictions
    clipped to ``[eps, 1 - eps]`` (Keras 3)."""
    _check_focal("categorical_focal_crossentropy", gamma, alpha)
    y_pred = _float(_to_node(y_pred))
    y_true = _to_node(y_true, y_pred.dtype)
    if y_true.ndim != y_pred.ndim or not all(
            a is None or b is None or a == b for a, b in zip(y_true.shape, y_pred.shape)):
        raise ValueError("categorical_focal_crossentropy: y_true of shape "
                         f"{format_shape(y_true.shape)} does not match y_pred of shape "
                         f"{format_shape(y_pred.shape)} (one-hot labels)")
    axis = axis % y_pred.ndim
    if label_smoothing:
        n = y_pred.shape[axis]
        y_true = y_true * _c(1.0 - label_smoothing, y_true) + _c(label_smoothing / n, y_true)
    if from_logits:
        if axis != y_pred.ndim - 1:
            perm = [d for d in range(y_pred.ndim) if d != axis] + [axis]
            y_pred, y_true = K.transpose(y_pred, perm), K.transpose(y_true, perm)
            axis = y_pred.ndim - 1
        log_p = K.clip(K.log_softmax(y_pred), _c(math.log(epsilon()), y_pred),
                       _c(math.log1p(-epsilon()), y_pred))
        p = K.exp(log_p)
    else:
        p = y_pred / K.sum(y_pred, axis=axis, keepdims=True)
        p = K.clip(p, _c(epsilon(), p), _c(1.0 - epsilon(), p))
        log_p = K.log(p)
    one = _c(1.0, p)
    weight = _c(alpha, p) * K.power(one - p, _c(float(gamma), p))
    return K.sum(weight * -(y_true * log_p), axis=axis)


BinaryFocalCrossentropy = wrapper_class(
    "BinaryFocalCrossentropy", binary_focal_crossentropy, "binary_focal_crossentropy",
    {"apply_class_balancing": False, "alpha": 0.25, "gamma": 2.0, "from_logits": False,
     "label_smoothing": 0.0, "axis": -1})
CategoricalFocalCrossentropy = wrapper_class(
    "CategoricalFocalCrossentropy", categorical_focal_crossentropy,
    "categorical_focal_crossentropy",
    {"alpha": 0.25, "gamma": 2.0, "from_logits": False, "label_smoothing": 0.0, "axis": -1})
