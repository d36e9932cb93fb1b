"""Accuracy metrics: binary, categorical, sparse categorical and top-k."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.config import floatx as kiln_floatx
from kiln.core import Node, format_shape
from kiln.losses.base import _c, _float, _to_node, eager, squeeze_or_expand_to_same_rank
from kiln.metrics.base import wrapper_class


def _pred_true(y_true: Any, y_pred: Any) -> tuple[Node, Node]:
    y_pred = _float(_to_node(y_pred))
    return _to_node(y_true), y_pred


@eager
def binary_accuracy(y_true: Any, y_pred: Any, threshold: float = 0.5) -> Node:
    """``mean(y_true == (y_pred > threshold), axis=-1)``."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    y_true = _float(y_true) if y_true.dtype != y_pred.dtype else y_true
    y_true = K.cast(y_true, y_pred.dtype)
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    pred = K.cast(y_pred > _c(threshold, y_pred), y_pred.dtype)
    return K.mean(K.cast(K.equal(y_true, pred), y_pred.dtype), axis=-1)


def _sparse_labels(y_true: Node, y_pred: Node) -> Node:
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = K.squeeze(y_true, -1)
    if y_true.dtype not in ("int32", "int64"):
        y_true = K.cast(y_true, "int64")
    if y_true.ndim != y_pred.ndim - 1:
        raise ValueError(f"sparse accuracy: labels of shape {format_shape(y_true.shape)} do "
                         f"not match predictions of shape {format_shape(y_pred.shape)}")
    return y_true


@eager
def sparse_categorical_accuracy(y_true: Any, y_pred: Any) -> Node:
    """``y_true == argmax(y_pred, axis=-1)`` as floats (integer labels)."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    labels = _sparse_labels(y_true, y_pred)
    pred = K.argmax(y_pred, axis=-1)
    return K.cast(K.equal(K.cast(labels, "int64"), pred), y_pred.dtype)


@eager
def categorical_accuracy(y_true: Any, y_pred: Any) -> Node:
    """``argmax(y_true) == argmax(y_pred)`` as floats (one-hot labels)."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    if y_true.ndim != y_pred.ndim:
        raise ValueError("categorical_accuracy: y_true of shape "
                         f"{format_shape(y_true.shape)} must have the rank of y_pred "
                         f"{format_shape(y_pred.shape)} (one-hot labels); use "
                         "sparse_categorical_accuracy for integer labels")
    return K.cast(K.equal(K.argmax(y_true, axis=-1), K.argmax(y_pred, axis=-1)), y_pred.dtype)


def _in_top_k(labels: Node, y_pred: Node, k: int) -> Node:
    """Whether the label's score is among the top ``k`` (ties at the border count as in, like
    TensorFlow's ``in_top_k``): fewer than ``k`` scores are strictly greater."""
    n = y_pred.shape[-1]
    onehot = K.one_hot(labels, n, dtype=y_pred.dtype)
    target = K.sum(y_pred * onehot, axis=-1, keepdims=True)
    greater = K.sum(K.cast(y_pred > target, y_pred.dtype), axis=-1)
    return K.cast(greater < _c(float(k), greater), y_pred.dtype)


@eager
def sparse_top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5,
                                      from_sorted_ids: bool = False) -> Node:
    """Whether the integer label is among the ``k`` highest predictions; with
    ``from_sorted_ids=True``, ``y_pred`` holds class ids sorted by score (best first) and the
    label must be among its first ``k``."""
    if from_sorted_ids:
        ids = _to_node(y_pred)
        labels = _sparse_labels(_to_node(y_true), ids)
        top = K.slice(ids, [0] * ids.ndim, [-1] * (ids.ndim - 1) + [min(k, ids.shape[-1])])
        hit = K.equal(K.expand_dims(K.cast(labels, ids.dtype), -1), top)
        return K.cast(K.any(hit, axis=-1), kiln_floatx())
    y_true, y_pred = _pred_true(y_true, y_pred)
    return _in_top_k(_sparse_labels(y_true, y_pred), y_pred, k)


@eager
def top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> Node:
    """Whether the one-hot label is among the ``k`` highest predictions."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    return _in_top_k(K.argmax(y_true, axis=-1), y_pred, k)


BinaryAccuracy = wrapper_class("BinaryAccuracy", binary_accuracy, "binary_accuracy",
                               {"threshold": 0.5},
                               "How often ``y_pred > threshold`` equals the binary label.")
CategoricalAccuracy = wrapper_class("CategoricalAccuracy", categorical_accuracy,
                                    "categorical_accuracy", {},
                                    "How often ``argmax(y_pred)`` equals ``argmax(y_true)``.")
SparseCategoricalAccuracy = wrapper_class(
    "SparseCategoricalAccuracy", sparse_categorical_accuracy, "sparse_categorical_accuracy", {},
    "How often ``argmax(y_pred)`` equals the integer label.")
TopKCategoricalAccuracy = wrapper_class("TopKCategoricalAccuracy", top_k_categorical_accuracy,
                                        "top_k_categorical_accuracy", {"k": 5},
                                        "How often the one-hot label is in the top ``k``.",
                                        order=("k", "name", "dtype"))
SparseTopKCategoricalAccuracy = wrapper_class(
    "SparseTopKCategoricalAccuracy", sparse_top_k_categorical_accuracy,
    "sparse_top_k_categorical_accuracy", {"k": 5, "from_sorted_ids": False},
    "How often the integer label is in the top ``k``.",
    order=("k", "name", "dtype", "from_sorted_ids"))


@eager
def accuracy(y_true: Any, y_pred: Any) -> Node:
    """``y_true == y_pred`` elementwise as floats (exact match; Keras' ``Accuracy``)."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    y_true = K.cast(y_true, y_pred.dtype) if y_true.dtype != y_pred.dtype else y_true
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    return K.cast(K.equal(y_true, y_pred), y_pred.dtype)


Accuracy = wrapper_class("Accuracy", accuracy, "accuracy", {},
                         "How often predictions equal labels exactly (the mean over all "
                         "entries). The string ``\"accuracy\"`` in ``compile`` instead picks "
                         "binary/categorical/sparse accuracy by the loss and shapes.")
