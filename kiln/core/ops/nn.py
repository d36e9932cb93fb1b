"""Neural-network ops: softmax, log_softmax and the stable softmax cross-entropies.

Convolution and pooling live in ``conv.py`` and ``pool.py`` (their window rule in
``window.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, fmt, norm_axis, require_float, require_int
from kiln.core.ops.registry import NN, Example, OpDef, apply, register


def _softmax_ref(x, *, axis):
    x = np.asarray(x)
    if x.size == 0:  # an empty axis or batch: nothing to normalize
        return x.copy()
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype)


def _log_softmax_ref(x, *, axis):
    x = np.asarray(x)
    if x.size == 0:
        return x.copy()
    z = x - np.max(x, axis=axis, keepdims=True)
    return (z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))).astype(x.dtype)


def _axis_infer(name: str):
    def infer(x: TensorType, *, axis: int) -> TensorType:
        require_float(name, x)
        if not 0 <= axis < x.ndim:
            raise ValueError(f"{name}: axis {axis} out of range for shape {fmt(x.shape)}")
        return x
    return infer


def _softmax_vjp(ct, out, x, *, axis):
    return [out * (ct - apply("sum", ct * out, axis=(axis,), keepdims=True))]


def _log_softmax_vjp(ct, out, x, *, axis):
    return [ct - apply("exp", out) * apply("sum", ct, axis=(axis,), keepdims=True)]


def _axis_examples(rng, dt):
    return [Example((rng.normal(size=(3, 5)).astype(dt),), {"axis": 1}),
            Example((rng.normal(size=(2, 3, 4)).astype(dt),), {"axis": 1})]


register(OpDef("softmax", NN, _axis_infer("softmax"), _softmax_ref, _softmax_vjp,
               examples=_axis_examples))
register(OpDef("log_softmax", NN, _axis_infer("log_softmax"), _log_softmax_ref, _log_softmax_vjp,
               examples=_axis_examples))


# ---- cross-entropies on logits over the last axis ----------------------------------------------
def _sparse_infer(logits: TensorType, labels: TensorType) -> TensorType:
    require_float("sparse_softmax_cross_entropy", logits)
    require_int("sparse_softmax_cross_entropy", labels, "labels")
    if logits.ndim < 1 or labels.shape != logits.shape[:-1] and not _compatible(
            labels.shape, logits.shape[:-1]):
        raise ValueError(f"sparse_softmax_cross_entropy: labels of shape {fmt(labels.shape)} do "
                         f"not match logits of shape {fmt(logits.shape)} (expected "
                         f"{fmt(logits.shape[:-1])})")
    if logits.shape[-1] == 0:
        raise ValueError(f"sparse_softmax_cross_entropy: logits of shape {fmt(logits.shape)} "
                         "have no classes")
    return TensorType(logits.shape[:-1], logits.dtype)


def _compatible(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


def _sparse_ref(logits, labels):
    logits = np.asarray(logits)
    lsm = _log_softmax_ref(logits, axis=logits.ndim - 1)
    labels = np.asarray(labels)
    return -np.take_along_axis(lsm, labels[..., None].astype(np.int64), axis=-1)[..., 0]


def _sparse_vjp(ct, out, logits, labels):
    depth = logits.shape[-1]
    if depth is None:
        raise ValueError("sparse_softmax_cross_entropy: the class axis must be static")
    last = logits.ndim - 1
    onehot = apply("one_hot", labels, depth=depth, dtype=logits.dtype)
    ct_e = apply("expand_dims", ct, axis=(last,))
    return [ct_e * (apply("softmax", logits, axis=last) - onehot), None]


def _sparse_examples(rng, dt):
    return [Example((rng.normal(size=(4, 5)).astype(dt), np.array([0, 4, 2, 2], np.int32)),
                    wrt=(0,)),
            Example((rng.normal(size=(2, 3, 4)).astype(dt),
                     rng.integers(0, 4, size=(2, 3)).astype(np.int64)), wrt=(0,))]


register(OpDef("sparse_softmax_cross_entropy", NN, _sparse_infer, _sparse_ref, _sparse_vjp,
               examples=_sparse_examples))


def _dense_infer(logits: TensorType, labels: TensorType) -> TensorType:
    require_float("softmax_cross_entropy", logits, labels)
    if not _compatible(logits.shape, labels.shape) or logits.dtype != labels.dtype:
        raise ValueError(f"softmax_cross_entropy: labels {labels.dtype}{fmt(labels.shape)} must "
                         f"match logits {logits.dtype}{fmt(logits.shape)}")
    return TensorType(logits.shape[:-1], logits.dtype)


def _dense_ref(logits, labels):
    # In float64, where x - max(x) cannot overflow (logits of +-3e38); a class with label 0
    # adds 0, even where its log-probability is -inf: 0 * -inf would make the loss NaN.
    logits = np.asarray(logits)
    labels = np.asarray(labels, np.float64)
    lsm = _log_softmax_ref(logits.astype(np.float64), axis=logits.ndim - 1)
    with np.errstate(over="ignore"):  # a loss beyond float32's range is inf
        return -np.sum(labels * np.where(labels != 0, lsm, 0), axis=-1).astype(logits.dtype)


def _dense_vjp(ct, out, logits, labels):
    last = logits.ndim - 1
    ct_e = apply("expand_dims", ct, axis=(last,))
    total = apply("sum", labels, axis=(last,), keepdims=True)
    g_logits = ct_e * (apply("softmax", logits, axis=last) * total - labels)
    g_labels = -ct_e * apply("log_softmax", logits, axis=last)
    return [g_logits, g_labels]


def _dense_examples(rng, dt):
    y = rng.uniform(size=(4, 5))
    return [Example((rng.normal(size=(4, 5)).astype(dt), (y / y.sum(1, keepdims=True)).astype(dt))),
            Example((rng.normal(size=(2, 3)).astype(dt), np.eye(3)[[0, 2]].astype(dt)))]


register(OpDef("softmax_cross_entropy", NN, _dense_infer, _dense_ref, _dense_vjp,
               examples=_dense_examples))


# ---- builders ------------------------------------------------------------------------------------
def softmax(x: Any, axis: int = -1) -> Node:
    """Softmax along ``axis`` (numerically stable)."""
    x = as_node(x)
    return apply("softmax", x, axis=norm_axis("softmax", axis, x.ndim))


def log_softmax(x: Any, axis: int = -1) -> Node:
    """Log-softmax along ``axis`` (numerically stable)."""
    x = as_node(x)
    return apply("log_softmax", x, axis=norm_axis("log_softmax", axis, x.ndim))


def sparse_softmax_cross_entropy(logits: Any, labels: Any) -> Node:
    """Per-example ``-log softmax(logits)[label]`` over the last axis; integer ``labels``."""
    return apply("sparse_softmax_cross_entropy", as_node(logits), as_node(labels))


def softmax_cross_entropy(logits: Any, labels: Any) -> Node:
    """Per-example ``-sum(labels * log_softmax(logits))`` over the last axis (one-hot or soft);
    a class whose label is 0 adds 0, even where its log-probability underflows to -inf."""
    lg = as_node(logits)
    return apply("softmax_cross_entropy", lg, as_node(labels, lg.dtype))
