"""The generalized cross-entropy for noisy labels (Keras 3's
``CategoricalGeneralizedCrossEntropy``, Zhang & Sabuncu 2018): ``(1 - p_y ** q) / q``."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.losses.base import _c, _float, _to_node, eager, wrapper_class


@eager
def categorical_generalized_cross_entropy(y_true: Any, y_pred: Any, q: float) -> Node:
    """``(1 - p_y ** q) / q`` with ``p_y`` the predicted probability of the integer label
    ``y_true`` (shape ``(batch,)`` or ``(batch, 1)``; a label out of range raises IndexError
    when the batch runs). ``q`` in (0, 1): towards 0 the cross-entropy, at 1 the MAE."""
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 < q < 1.0:
        raise ValueError("categorical_generalized_cross_entropy: q must be in the interval "
                         f"(0, 1), received q={q!r}")
    y_pred = _float(_to_node(y_pred))
    y_true = _to_node(y_true)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = K.squeeze(y_true, -1)
    n = y_pred.shape[-1]
    if y_true.ndim != y_pred.ndim - 1 or n is None:
        raise ValueError("categorical_generalized_cross_entropy: labels of shape "
                         f"{format_shape(y_true.shape)} do not match predictions of shape "
                         f"{format_shape(y_pred.shape)} (integer labels, one per sample)")
    labels = K.cast(y_true, "int64") if y_true.dtype != "int64" else y_true
    onehot = K.take(K.constant(np.eye(n, dtype=y_pred.dtype)), labels, axis=0)
    p = K.sum(y_pred * onehot, axis=-1)
    return (_c(1.0, p) - K.power(p, _c(float(q), p))) / _c(float(q), p)


CategoricalGeneralizedCrossEntropy = wrapper_class(
    "CategoricalGeneralizedCrossEntropy", categorical_generalized_cross_entropy,
    "categorical_generalized_cross_entropy", {"q": 0.5})
