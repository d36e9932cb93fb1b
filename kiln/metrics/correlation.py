"""Similarity and correlation metrics (Keras 3): ``CosineSimilarity``, ``PearsonCorrelation``,
``ConcordanceCorrelation``, each the (weighted) mean of a per-sample value over ``axis``."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.losses.base import EPSILON, _align, _c, eager
from kiln.metrics.base import wrapper_class


def _moments(x: Node, axis: int) -> tuple[Node, Node]:
    mean = K.mean(x, axis=axis, keepdims=True)
    return mean, K.mean(K.square(x - mean), axis=axis, keepdims=True)


@eager
def cosine_similarity(y_true: Any, y_pred: Any, axis: int = -1) -> Node:
    """``sum(l2_normalize(y_true) * l2_normalize(y_pred), axis)`` (the metric's sign: 1 for
    the same direction)."""
    y_true, y_pred = _align("cosine_similarity", y_true, y_pred)

    def unit(x: Node) -> Node:
        sq = K.sum(K.square(x), axis=axis, keepdims=True)
        return x * K.rsqrt(K.maximum(sq, _c(1e-12, x)))

    return K.sum(unit(y_true) * unit(y_pred), axis=axis)


@eager
def pearson_correlation(y_true: Any, y_pred: Any, axis: int = -1) -> Node:
    """Pearson's coefficient along ``axis``: ``mean(zscore(y_true) * zscore(y_pred))``
    (population standard deviations)."""
    y_true, y_pred = _align("pearson_correlation", y_true, y_pred)
    mt, vt = _moments(y_true, axis)
    mp, vp = _moments(y_pred, axis)
    return K.mean((y_true - mt) * K.rsqrt(vt) * (y_pred - mp) * K.rsqrt(vp), axis=axis)


@eager
def concordance_correlation(y_true: Any, y_pred: Any, axis: int = -1) -> Node:
    """Lin's concordance coefficient along ``axis``:
    ``2 cov / (var_true + var_pred + (mean_true - mean_pred)**2 + eps)``."""
    y_true, y_pred = _align("concordance_correlation", y_true, y_pred)
    mt, vt = _moments(y_true, axis)
    mp, vp = _moments(y_pred, axis)
    cov = K.mean((y_true - mt) * (y_pred - mp), axis=axis, keepdims=True)
    norm = vt + vp + K.square(mt - mp)
    return K.squeeze(_c(2.0, cov) * cov / (norm + _c(EPSILON, norm)), axis)


CosineSimilarity = wrapper_class("CosineSimilarity", cosine_similarity, "cosine_similarity",
                                 {"axis": -1}, "Mean cosine similarity of ``y_true`` and "
                                 "``y_pred`` along ``axis``.")
PearsonCorrelation = wrapper_class("PearsonCorrelation", pearson_correlation,
                                   "pearson_correlation", {"axis": -1},
                                   "Mean Pearson correlation along ``axis``.")
ConcordanceCorrelation = wrapper_class("ConcordanceCorrelation", concordance_correlation,
                                       "concordance_correlation", {"axis": -1},
                                       "Mean concordance correlation along ``axis``.")
