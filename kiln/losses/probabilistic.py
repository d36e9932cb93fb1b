"""Probabilistic losses: cross-entropies, Kullback-Leibler divergence, Poisson.

Where Keras' TensorFlow backend recovers logits from a softmax/sigmoid output (its
``_keras_logits``), kiln does the same on the graph: ``categorical_crossentropy`` of a softmax
node becomes the stable fused ``softmax_cross_entropy`` of the softmax's input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.config import epsilon
from kiln.core import Node, format_shape
from kiln.layers.base import set_mask
from kiln.losses.base import (
    _align,
    _c,
    _float,
    _sigmoid_logits,
    _softmax_logits,
    _to_node,
    eager,
    wrapper_class,
)


@eager
def kl_divergence(y_true: Any, y_pred: Any) -> Node:
    """``sum(y_true * log(y_true / y_pred), axis=-1)`` with both clipped to ``[eps, 1]``."""
    y_true, y_pred = _align("kl_divergence", y_true, y_pred)
    eps, one = _c(epsilon(), y_pred), _c(1.0, y_pred)
    y_true = K.clip(y_true, eps, one)
    y_pred = K.clip(y_pred, eps, one)
    return K.sum(y_true * K.log(y_true / y_pred), axis=-1)


@eager
def poisson(y_true: Any, y_pred: Any) -> Node:
    """``mean(y_pred - y_true * log(y_pred + eps), axis=-1)``."""
    y_true, y_pred = _align("poisson", y_true, y_pred)
    return K.mean(y_pred - y_true * K.log(y_pred + _c(epsilon(), y_pred)), axis=-1)


@eager
def binary_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                        label_smoothing: float = 0.0, axis: int = -1) -> Node:
    """Binary cross-entropy, averaged over ``axis``.

    With ``from_logits`` (or when ``y_pred`` is a sigmoid node) it uses the stable
    ``softplus(x) - x * y``; otherwise probabilities are clipped to ``[eps, 1 - eps]``
    (eps = 1e-7) like Keras.
    """
    y_true, y_pred = _align("binary_crossentropy", y_true, y_pred)
    if label_smoothing:
        y_true = y_true * _c(1.0 - label_smoothing, y_true) + _c(0.5 * label_smoothing, y_true)
    logits = y_pred if from_logits else _sigmoid_logits(y_pred)
    if logits is not None:
        bce = K.softplus(logits) - logits * y_true
    else:
        p = K.clip(y_pred, _c(epsilon(), y_pred), _c(1.0 - epsilon(), y_pred))
        one = _c(1.0, p)
        bce = -(y_true * K.log(p) + (one - y_true) * K.log(one - p))
    return K.mean(bce, axis=axis)


@eager
def categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                             label_smoothing: float = 0.0, axis: int = -1) -> Node:
    """Cross-entropy between one-hot (or soft) labels and predicted probabilities.

    ``from_logits=True``, or a ``y_pred`` computed by a softmax over the last axis, uses the
    fused stable ``softmax_cross_entropy`` on the logits; otherwise predictions are
    normalized to sum to 1 and clipped to ``[eps, 1 - eps]``, like Keras.
    """
    y_pred = _float(_to_node(y_pred))
    y_true = _to_node(y_true, y_pred.dtype)
    if y_true.ndim != y_pred.ndim or not all(
            a is None or b is None or a == b for a, b in zip(y_true.shape, y_pred.shape)):
        raise ValueError("categorical_crossentropy: arguments `target` and `output` must have "
                         f"the same shape; received y_true {format_shape(y_true.shape)} and "
                         f"y_pred {format_shape(y_pred.shape)} (for integer labels use "
                         "sparse_categorical_crossentropy)")
    axis = axis % y_pred.ndim
    if label_smoothing:
        n = y_pred.shape[axis]
        y_true = y_true * _c(1.0 - label_smoothing, y_true) + _c(label_smoothing / n, y_true)
    last = axis == y_pred.ndim - 1
    logits = y_pred if from_logits else (_softmax_logits(y_pred) if last else None)
    if logits is not None:
        if not last:  # the class axis moved last: the fused stable form (a label of 0 adds
            # 0 even where its log-probability is -inf, which y * log_softmax makes NaN)
            perm = [d for d in range(y_pred.ndim) if d != axis] + [axis]
            logits, y_true = K.transpose(logits, perm), K.transpose(y_true, perm)
        return K.softmax_cross_entropy(logits, y_true)
    p = y_pred / K.sum(y_pred, axis=axis, keepdims=True)
    log_prob = K.log(K.clip(p, _c(epsilon(), p), _c(1.0 - epsilon(), p)))
    return -K.sum(y_true * log_prob, axis=axis)


@eager
def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                                    ignore_class: int | None = None, axis: int = -1) -> Node:
    """Cross-entropy between integer labels and predicted probabilities over the last axis.

    Labels of shape ``(batch,)`` or ``(batch, 1)``. ``from_logits=True``, or a ``y_pred``
    computed by a softmax, uses the fused stable ``sparse_softmax_cross_entropy``.
    ``ignore_class``: entries with this label contribute a loss of 0, and the result carries
    the kept entries as its Keras mask, so a ``Loss`` object (``reduction="sum_over_batch_size"``)
    averages over the kept entries only, as Keras does; the metric averages over all.
    """
    y_pred = _float(_to_node(y_pred))
    y_true = _to_node(y_true)
    if axis % y_pred.ndim != y_pred.ndim - 1:
        raise ValueError("sparse_categorical_crossentropy: only axis=-1 is supported, "
                         f"received axis={axis}")
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = K.squeeze(y_true, -1)
    if y_true.dtype not in ("int32", "int64"):
        y_true = K.cast(y_true, "int32")
    want = y_pred.shape[:-1]
    if y_true.ndim != len(want) or not all(a is None or b is None or a == b
                                           for a, b in zip(y_true.shape, want)):
        raise ValueError("sparse_categorical_crossentropy: labels of shape "
                         f"{format_shape(y_true.shape)} do not match predictions of shape "
                         f"{format_shape(y_pred.shape)} (expected labels of shape "
                         f"{format_shape(want)}; for one-hot labels use "
                         "categorical_crossentropy)")
    labels = y_true
    if ignore_class is not None:
        valid = K.not_equal(y_true, K.constant(np.asarray(ignore_class, y_true.dtype)))
        labels = K.where(valid, y_true, K.constant(np.asarray(0, y_true.dtype)))
    logits = y_pred if from_logits else _softmax_logits(y_pred)
    if logits is not None:
        res = K.sparse_softmax_cross_entropy(logits, labels)
    else:
        n = y_pred.shape[-1]
        p = y_pred / K.sum(y_pred, axis=-1, keepdims=True)
        log_prob = K.log(K.clip(p, _c(epsilon(), p), _c(1.0 - epsilon(), p)))
        res = -K.sum(K.one_hot(labels, n, dtype=y_pred.dtype) * log_prob, axis=-1)
    if ignore_class is not None:
        res = K.where(valid, res, _c(0.0, res))
        # Keras sets the kept entries as the result's mask: a Loss then averages over them.
        set_mask(res, valid)
    return res


KLDivergence = wrapper_class("KLDivergence", kl_divergence, "kl_divergence", {})
Poisson = wrapper_class("Poisson", poisson, "poisson", {})
BinaryCrossentropy = wrapper_class(
    "BinaryCrossentropy", binary_crossentropy, "binary_crossentropy",
    {"from_logits": False, "label_smoothing": 0.0, "axis": -1})
CategoricalCrossentropy = wrapper_class(
    "CategoricalCrossentropy", categorical_crossentropy, "categorical_crossentropy",
    {"from_logits": False, "label_smoothing": 0.0, "axis": -1})
SparseCategoricalCrossentropy = wrapper_class(
    "SparseCategoricalCrossentropy", sparse_categorical_crossentropy,
    "sparse_categorical_crossentropy", {"from_logits": False, "ignore_class": None, "axis": -1},
    order=("from_logits", "ignore_class", "reduction", "axis", "name", "dtype"))
