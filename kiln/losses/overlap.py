"""Overlap losses for segmentation (Keras 3's ``Dice`` and ``Tversky``).

With ``axis=None`` (the default) the sums run over the whole batch and the loss is one number
for it (Keras' rule); with ``axis`` (e.g. ``(1, 2)`` for images) they run over those axes and
the loss is per sample, so sample weights and the reduction apply as for other losses.
"""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.config import epsilon
from kiln.core import Node
from kiln.losses.base import _align, _c, eager, wrapper_class


def _sum(x: Node, axis: Any) -> Node:
    return K.sum(x) if axis is None else K.sum(x, axis=tuple(axis) if isinstance(
        axis, (list, tuple)) else axis)


@eager
def dice(y_true: Any, y_pred: Any, axis: Any = None) -> Node:
    """``1 - 2 sum(y p) / (sum(y) + sum(p) + eps)`` over ``axis`` (None: everything)."""
    y_true, y_pred = _align("dice", y_true, y_pred)
    inter = _sum(y_true * y_pred, axis)
    denom = _sum(y_true, axis) + _sum(y_pred, axis)
    return _c(1.0, inter) - _c(2.0, inter) * inter / (denom + _c(epsilon(), denom))


@eager
def tversky(y_true: Any, y_pred: Any, alpha: float = 0.5, beta: float = 0.5,
            axis: Any = None) -> Node:
    """``1 - tp / (tp + alpha a + beta b + eps)`` with ``tp = sum(y p)``,
    ``a = sum((1 - p) y)`` and ``b = sum(p (1 - y))`` over ``axis`` (Keras 3's formula and
    argument order: ``alpha`` weighs the missed positives, ``beta`` the false alarms)."""
    y_true, y_pred = _align("tversky", y_true, y_pred)
    one = _c(1.0, y_pred)
    tp = _sum(y_true * y_pred, axis)
    a = _sum((one - y_pred) * y_true, axis)
    b = _sum(y_pred * (one - y_true), axis)
    denom = tp + _c(alpha, tp) * a + _c(beta, tp) * b
    return _c(1.0, tp) - tp / (denom + _c(epsilon(), denom))


Dice = wrapper_class("Dice", dice, "dice", {"axis": None},
                     order=("reduction", "name", "axis", "dtype"))
Tversky = wrapper_class("Tversky", tversky, "tversky", {"alpha": 0.5, "beta": 0.5, "axis": None},
                        order=("alpha", "beta", "reduction", "name", "axis", "dtype"))
