"""Keras 3's Circle loss (Sun et al., 2020) for metric learning on L2-normalized embeddings:
``circle`` and ``Circle``. Keras' formula; the log-sum-exps run over the positive and the
negative pairs only and give ``-inf`` (a zero loss term, a zero gradient) for a sample with
none, and the result's mask is ``loss > 0``, as Keras sets it, so a Loss averages over the
samples with a positive loss."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln
import kiln.ops as K
from kiln import eager as eager_path
from kiln.core import Node, format_shape
from kiln.layers.base import set_mask
from kiln.losses.base import _c, _float, _symbolic, _to_node, wrapper_class


def _index(labels: Node) -> Node:
    """0, 1, ... along a 1-D tensor of run-time length (the rows of the batch): the stable
    argsort of zeros."""
    return K.argsort(K.zeros_like(labels))


def _masked_logsumexp(x: Node, mask: Node) -> Node:
    """``logsumexp`` over the entries of each row where ``mask`` is true; ``-inf`` for a row
    with none, with a finite (zero) gradient there."""
    low = _c(-1e30, x)
    m = K.stop_gradient(K.max(K.where(mask, x, low), axis=1, keepdims=True))
    s = K.sum(K.where(mask, K.exp(K.where(mask, x, m) - m), K.zeros_like(x)), axis=1)
    has = K.greater(s, K.zeros_like(s))
    lse = K.log(K.where(has, s, K.ones_like(s))) + K.squeeze(m, 1)
    return K.where(has, lse, K.full_like(s, -np.inf))


def _circle(y_true: Node, y_pred: Node, ref_labels: Node | None, ref_embeddings: Node | None,
            remove_diagonal: bool, gamma: float, margin: float) -> Node:
    y_pred = _float(y_pred)
    labels = K.cast(y_true, "int32")
    labels = K.reshape(labels, (-1,)) if labels.ndim == 2 and labels.shape[-1] == 1 else labels
    ref_e = y_pred if ref_embeddings is None else K.cast(_float(ref_embeddings), y_pred.dtype)
    ref_l = labels if ref_labels is None else K.cast(ref_labels, "int32")
    ref_l = K.reshape(ref_l, (-1,)) if ref_l.ndim == 2 and ref_l.shape[-1] == 1 else ref_l
    if labels.ndim != 1 or ref_l.ndim != 1 or y_pred.ndim != 2 or ref_e.ndim != 2:
        raise ValueError("circle: expected 1-D integer labels and 2-D embeddings (batch, dim); "
                         f"received labels {format_shape(labels.shape)}, embeddings "
                         f"{format_shape(y_pred.shape)}, reference labels "
                         f"{format_shape(ref_l.shape)}, reference embeddings "
                         f"{format_shape(ref_e.shape)}")
    dist = K.maximum(_c(1.0, y_pred) - K.matmul(y_pred, K.transpose(ref_e)),
                     _c(0.0, y_pred))
    pos = K.equal(K.expand_dims(labels, 1), K.expand_dims(ref_l, 0))
    neg = K.logical_not(pos)
    if remove_diagonal:
        diag = K.equal(K.expand_dims(_index(labels), 1), K.expand_dims(_index(ref_l), 0))
        pos = K.logical_and(pos, K.logical_not(diag))
    posf, negf = K.cast(pos, dist.dtype), K.cast(neg, dist.dtype)
    zero = _c(0.0, dist)
    pos_w = K.maximum((_c(margin, dist) + dist) * posf, zero)
    neg_w = K.maximum((_c(1.0 + margin, dist) - dist) * negf, zero)
    pos_wd = _c(-gamma, dist) * pos_w * (_c(margin, dist) - dist)
    neg_wd = _c(gamma, dist) * neg_w * (_c(1.0 - margin, dist) - dist)
    res = K.softplus(_masked_logsumexp(pos_wd, pos) + _masked_logsumexp(neg_wd, neg))
    set_mask(res, K.greater(res, K.zeros_like(res)))
    return res


def circle(y_true: Any, y_pred: Any, ref_labels: Any = None, ref_embeddings: Any = None,
           remove_diagonal: bool = True, gamma: float = 80, margin: float = 0.4) -> Any:
    """Circle loss per sample: ``y_true`` integer labels (batch,), ``y_pred`` L2-normalized
    embeddings (batch, dim); ``ref_labels``/``ref_embeddings`` the reference set (default: the
    batch itself, without each sample's pair with itself when ``remove_diagonal``).
    ``softplus(logsumexp_pos(-gamma a_p (margin - d)) + logsumexp_neg(gamma a_n (1 - margin
    - d)))`` with ``d`` the cosine distances, ``a_p = relu(margin + d)`` and
    ``a_n = relu(1 + margin - d)``."""
    extra = [a for a in (ref_labels, ref_embeddings) if a is not None]
    args = (remove_diagonal, float(gamma), float(margin))
    if _symbolic(y_true, y_pred, *extra):
        return _circle(_to_node(y_true), _to_node(y_pred),
                       None if ref_labels is None else _to_node(ref_labels),
                       None if ref_embeddings is None else _to_node(ref_embeddings), *args)
    has = (ref_labels is not None, ref_embeddings is not None)

    def graph(t: Node, p: Node, *rest: Node) -> Node:
        it = iter(rest)
        rl = next(it) if has[0] else None
        re_ = next(it) if has[1] else None
        return _circle(t, p, rl, re_, *args)
    return eager_path.run((circle, has, args), graph, [y_true, y_pred, *extra],
                          kiln.config.floatx(), batch=None, name="circle", who="circle")


Circle = wrapper_class("Circle", circle, "circle",
                       {"gamma": 80.0, "margin": 0.4, "remove_diagonal": True})
