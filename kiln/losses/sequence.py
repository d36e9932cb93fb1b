"""Keras 3's CTC loss (``ctc`` and ``CTC``): ``kiln.ops.ctc_loss`` with every time step of the
prediction counted and the label lengths read from ``y_true`` (0 is the blank, and pads)."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.losses.base import _float, _to_node, eager, wrapper_class


@eager
def ctc(y_true: Any, y_pred: Any) -> Node:
    """CTC loss per sample: ``y_true`` (batch, max_label_length) integer labels, 0 the blank
    and padding; ``y_pred`` (batch, time, classes) logits (not softmaxed). All ``time`` steps
    count; a label's length is its number of non-zero entries."""
    y_true, y_pred = _to_node(y_true), _float(_to_node(y_pred))
    if y_true.ndim != 2:
        raise ValueError("ctc: targets y_true are expected to be a tensor of shape "
                         f"(batch_size, max_length) in integer format; received "
                         f"y_true.shape={format_shape(y_true.shape)}")
    if y_pred.ndim != 3:
        raise ValueError("ctc: logits y_pred are expected to be a tensor of shape "
                         "(batch_size, max_length, num_classes); received "
                         f"y_pred.shape={format_shape(y_pred.shape)}")
    labels = K.cast(y_true, "int32")
    input_length = K.cast(K.sum(K.ones_like(y_pred[:, :, 0]), axis=1), "int32")
    label_length = K.sum(K.cast(K.not_equal(labels, K.zeros_like(labels)), "int32"), axis=-1)
    return K.ctc_loss(labels, y_pred, label_length, input_length, mask_index=0)


CTC = wrapper_class("CTC", ctc, "ctc", {})
