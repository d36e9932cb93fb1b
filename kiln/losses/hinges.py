"""Hinge losses (labels -1/1; a batch of 0/1 labels is converted, like Keras)."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.losses.base import _align, _c, eager, wrapper_class


def _hinge_labels(y_true: Node) -> Node:
    """Keras converts labels in {0, 1} to {-1, 1} (when the whole batch is binary)."""
    zero, one = _c(0.0, y_true), _c(1.0, y_true)
    binary = K.logical_or(K.equal(y_true, zero), K.equal(y_true, one))
    all_binary = K.min(K.cast(binary, y_true.dtype)) > _c(0.5, y_true)
    return K.where(all_binary, _c(2.0, y_true) * y_true - one, y_true)


@eager
def hinge(y_true: Any, y_pred: Any) -> Node:
    """``mean(maximum(1 - y_true * y_pred, 0), axis=-1)`` (labels -1/1, or 0/1 converted)."""
    y_true, y_pred = _align("hinge", y_true, y_pred)
    y_true = _hinge_labels(y_true)
    return K.mean(K.maximum(_c(1.0, y_pred) - y_true * y_pred, _c(0.0, y_pred)), axis=-1)


@eager
def squared_hinge(y_true: Any, y_pred: Any) -> Node:
    """``mean(square(maximum(1 - y_true * y_pred, 0)), axis=-1)``."""
    y_true, y_pred = _align("squared_hinge", y_true, y_pred)
    y_true = _hinge_labels(y_true)
    return K.mean(K.square(K.maximum(_c(1.0, y_pred) - y_true * y_pred, _c(0.0, y_pred))),
                  axis=-1)


@eager
def categorical_hinge(y_true: Any, y_pred: Any) -> Node:
    """``maximum(max((1 - y_true) * y_pred) - sum(y_true * y_pred) + 1, 0)``."""
    y_true, y_pred = _align("categorical_hinge", y_true, y_pred)
    one = _c(1.0, y_pred)
    pos = K.sum(y_true * y_pred, axis=-1)
    neg = K.max((one - y_true) * y_pred, axis=-1)
    return K.maximum(neg - pos + one, _c(0.0, y_pred))


Hinge = wrapper_class("Hinge", hinge, "hinge", {})
SquaredHinge = wrapper_class("SquaredHinge", squared_hinge, "squared_hinge", {})
CategoricalHinge = wrapper_class("CategoricalHinge", categorical_hinge, "categorical_hinge", {})
