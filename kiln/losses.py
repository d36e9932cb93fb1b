"""Losses (Keras 3 names, arguments and formulas), built from ``kiln.ops`` graph nodes.

A loss *function* ``fn(y_true, y_pred)`` returns per-sample values (the last axis reduced); a
loss *object* (``MeanSquaredError()``...) applies a sample weight and a reduction
(``"sum_over_batch_size"`` by default) and returns a scalar. Both accept symbolic tensors
(inside a model's training graph) or NumPy arrays (then the result is a NumPy value,
computed by the reference backend).

Where Keras' TensorFlow backend recovers logits from a softmax/sigmoid output (its
``_keras_logits``), kiln does the same on the graph: ``categorical_crossentropy`` of a softmax
node becomes the stable fused ``softmax_cross_entropy`` of the softmax's input.

Example:
    >>> loss = kiln.losses.SparseCategoricalCrossentropy(from_logits=True)
    >>> kiln.losses.get("mse")
    <function mean_squared_error ...>
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln.core.ir import Node
from kiln.core.ops._rules import as_node, fmt

EPSILON = 1e-7
REDUCTIONS = ("sum_over_batch_size", "sum", "none", "mean", "mean_with_sample_weight")


# ---- helpers --------------------------------------------------------------------------------
def _symbolic(*xs: Any) -> bool:
    return any(isinstance(x, Node) or hasattr(x, "__kiln_node__") for x in xs)


def _evaluate(node: Node) -> np.ndarray:
    from kiln.core.backends.reference import evaluate

    return np.asarray(evaluate([node])[0])


def _to_node(x: Any, dtype: str | None = None) -> Node:
    """A node for ``x``; NumPy floats become floatx constants, ints stay ints."""
    if isinstance(x, Node) or hasattr(x, "__kiln_node__"):
        node = as_node(x)
    else:
        arr = np.asarray(x)
        if arr.dtype.kind == "f" or arr.dtype.kind == "b":
            arr = arr.astype(kiln.config.floatx())
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.int64 if arr.dtype.itemsize > 4 else np.int32)
        else:
            raise TypeError(f"expected a numeric array, received dtype {arr.dtype}")
        node = K.constant(arr)
    if dtype is not None and node.dtype != dtype:
        node = K.cast(node, dtype)
    return node


def _float(x: Node) -> Node:
    return x if x.dtype in ("float32", "float64") else K.cast(x, kiln.config.floatx())


def eager(fn: Callable) -> Callable:
    """Lets a graph-building loss/metric function also run on NumPy arrays."""
    @functools.wraps(fn)
    def wrapper(y_true: Any, y_pred: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(y_true, y_pred, *args, **kwargs)
        if _symbolic(y_true, y_pred):
            return out
        return _evaluate(out)
    return wrapper


def squeeze_or_expand_to_same_rank(x1: Node, x2: Node, expand_rank_1: bool = True
                                   ) -> tuple[Node, Node]:
    """Keras' rule: when ranks differ by one and the longer has a last axis of 1, squeeze it
    (or expand a rank-1 partner)."""
    r1, r2 = x1.ndim, x2.ndim
    if r1 == r2:
        return x1, x2
    if r1 == r2 + 1 and x1.shape[-1] == 1:
        if r2 == 1 and expand_rank_1:
            x2 = K.expand_dims(x2, -1)
        else:
            x1 = K.squeeze(x1, -1)
    elif r2 == r1 + 1 and x2.shape[-1] == 1:
        if r1 == 1 and expand_rank_1:
            x1 = K.expand_dims(x1, -1)
        else:
            x2 = K.squeeze(x2, -1)
    return x1, x2


def _align(name: str, y_true: Any, y_pred: Any, cast_true: bool = True) -> tuple[Node, Node]:
    """Converts, casts ``y_true`` to ``y_pred``'s float dtype and matches ranks; raises a
    ValueError naming the loss when the shapes cannot match."""
    y_pred = _float(_to_node(y_pred))
    y_true = _to_node(y_true)
    if cast_true and y_true.dtype != y_pred.dtype:
        y_true = K.cast(y_true, y_pred.dtype)
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    ok = y_true.ndim == y_pred.ndim and all(
        a is None or b is None or a == b or a == 1 or b == 1
        for a, b in zip(y_true.shape, y_pred.shape))
    if not ok:
        raise ValueError(f"{name}: y_true of shape {fmt(y_true.shape)} does not match y_pred "
                         f"of shape {fmt(y_pred.shape)}")
    return y_true, y_pred


def _c(value: float, like: Node) -> Node:
    return K.constant(np.asarray(value, dtype=like.dtype))


def _peel(x: Node) -> Node:
    """Looks through ``identity`` nodes (the functional API tags layer outputs with them)."""
    while x.op == "identity":
        x = x.inputs[0]
    return x


def _softmax_logits(y_pred: Node) -> Node | None:
    """The input of ``y_pred`` when it is a softmax over the last axis, else None."""
    node = _peel(y_pred)
    if node.op == "softmax" and node.attrs.get("axis") == node.ndim - 1:
        return node.inputs[0]
    return None


def _sigmoid_logits(y_pred: Node) -> Node | None:
    node = _peel(y_pred)
    return node.inputs[0] if node.op == "sigmoid" else None


# ---- regression losses ----------------------------------------------------------------------
@eager
def mean_squared_error(y_true: Any, y_pred: Any) -> Node:
    """``mean(square(y_true - y_pred), axis=-1)``."""
    y_true, y_pred = _align("mean_squared_error", y_true, y_pred)
    return K.mean(K.square(y_pred - y_true), axis=-1)


@eager
def mean_absolute_error(y_true: Any, y_pred: Any) -> Node:
    """``mean(abs(y_true - y_pred), axis=-1)``."""
    y_true, y_pred = _align("mean_absolute_error", y_true, y_pred)
    return K.mean(K.abs(y_pred - y_true), axis=-1)


@eager
def mean_absolute_percentage_error(y_true: Any, y_pred: Any) -> Node:
    """``100 * mean(abs((y_true - y_pred) / max(abs(y_true), epsilon)), axis=-1)``."""
    y_true, y_pred = _align("mean_absolute_percentage_error", y_true, y_pred)
    diff = K.abs((y_true - y_pred) / K.maximum(K.abs(y_true), _c(EPSILON, y_true)))
    return _c(100.0, diff) * K.mean(diff, axis=-1)


@eager
def mean_squared_logarithmic_error(y_true: Any, y_pred: Any) -> Node:
    """``mean(square(log(max(y_pred, eps) + 1) - log(max(y_true, eps) + 1)), axis=-1)``."""
    y_true, y_pred = _align("mean_squared_logarithmic_error", y_true, y_pred)
    one, eps = _c(1.0, y_pred), _c(EPSILON, y_pred)
    first = K.log(K.maximum(y_pred, eps) + one)
    second = K.log(K.maximum(y_true, eps) + one)
    return K.mean(K.square(first - second), axis=-1)


@eager
def huber(y_true: Any, y_pred: Any, delta: float = 1.0) -> Node:
    """Quadratic for ``|error| <= delta``, linear beyond: Keras' ``huber``."""
    y_true, y_pred = _align("huber", y_true, y_pred)
    error = y_pred - y_true
    abs_error = K.abs(error)
    half, d = _c(0.5, error), _c(delta, error)
    return K.mean(K.where(abs_error <= d, half * K.square(error),
                          d * abs_error - _c(0.5 * delta * delta, error)), axis=-1)


@eager
def log_cosh(y_true: Any, y_pred: Any) -> Node:
    """``mean(log(cosh(y_pred - y_true)), axis=-1)`` in the stable form
    ``x + softplus(-2x) - log(2)``."""
    y_true, y_pred = _align("log_cosh", y_true, y_pred)
    x = y_pred - y_true
    return K.mean(x + K.softplus(x * _c(-2.0, x)) - _c(math.log(2.0), x), axis=-1)


@eager
def kl_divergence(y_true: Any, y_pred: Any) -> Node:
    """``sum(y_true * log(y_true / y_pred), axis=-1)`` with both clipped to ``[eps, 1]``."""
    y_true, y_pred = _align("kl_divergence", y_true, y_pred)
    eps, one = _c(EPSILON, y_pred), _c(1.0, y_pred)
    y_true = K.clip(y_true, eps, one)
    y_pred = K.clip(y_pred, eps, one)
    return K.sum(y_true * K.log(y_true / y_pred), axis=-1)


@eager
def poisson(y_true: Any, y_pred: Any) -> Node:
    """``mean(y_pred - y_true * log(y_pred + eps), axis=-1)``."""
    y_true, y_pred = _align("poisson", y_true, y_pred)
    return K.mean(y_pred - y_true * K.log(y_pred + _c(EPSILON, y_pred)), axis=-1)


@eager
def cosine_similarity(y_true: Any, y_pred: Any, axis: int = -1) -> Node:
    """``-sum(l2_normalize(y_true) * l2_normalize(y_pred), axis)`` (Keras' loss sign)."""
    y_true, y_pred = _align("cosine_similarity", y_true, y_pred)
    return -K.sum(_l2_normalize(y_true, axis) * _l2_normalize(y_pred, axis), axis=axis)


def _l2_normalize(x: Node, axis: int) -> Node:
    sq = K.sum(K.square(x), axis=axis, keepdims=True)
    return x * K.rsqrt(K.maximum(sq, _c(1e-12, x)))


# ---- hinge losses ---------------------------------------------------------------------------
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


# ---- cross-entropies ------------------------------------------------------------------------
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
        p = K.clip(y_pred, _c(EPSILON, y_pred), _c(1.0 - EPSILON, y_pred))
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
                         f"the same shape; received y_true {fmt(y_true.shape)} and y_pred "
                         f"{fmt(y_pred.shape)} (for integer labels use "
                         "sparse_categorical_crossentropy)")
    axis = axis % y_pred.ndim
    if label_smoothing:
        n = y_pred.shape[axis]
        y_true = y_true * _c(1.0 - label_smoothing, y_true) + _c(label_smoothing / n, y_true)
    last = axis == y_pred.ndim - 1
    logits = y_pred if from_logits else (_softmax_logits(y_pred) if last else None)
    if logits is not None and last:
        return K.softmax_cross_entropy(logits, y_true)
    if logits is not None:
        log_prob = K.log_softmax(logits, axis=axis)
    else:
        p = y_pred / K.sum(y_pred, axis=axis, keepdims=True)
        log_prob = K.log(K.clip(p, _c(EPSILON, p), _c(1.0 - EPSILON, p)))
    return -K.sum(y_true * log_prob, axis=axis)


@eager
def sparse_categorical_crossentropy(y_true: Any, y_pred: Any, from_logits: bool = False,
                                    ignore_class: int | None = None, axis: int = -1) -> Node:
    """Cross-entropy between integer labels and predicted probabilities over the last axis.

    Labels of shape ``(batch,)`` or ``(batch, 1)``. ``from_logits=True``, or a ``y_pred``
    computed by a softmax, uses the fused stable ``sparse_softmax_cross_entropy``.
    ``ignore_class``: entries with this label contribute a loss of 0.
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
                         f"{fmt(y_true.shape)} do not match predictions of shape "
                         f"{fmt(y_pred.shape)} (expected labels of shape {fmt(want)}; for "
                         "one-hot labels use categorical_crossentropy)")
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
        log_prob = K.log(K.clip(p, _c(EPSILON, p), _c(1.0 - EPSILON, p)))
        res = -K.sum(K.one_hot(labels, n, dtype=y_pred.dtype) * log_prob, axis=-1)
    if ignore_class is not None:
        res = K.where(valid, res, _c(0.0, res))
    return res


# ---- reduction ------------------------------------------------------------------------------
def standardize_reduction(reduction: Any) -> str:
    if reduction is None:
        return "none"
    if reduction == "auto":
        return "sum_over_batch_size"
    if reduction not in REDUCTIONS:
        raise ValueError(f"Invalid value for argument `reduction`: {reduction!r}; expected "
                         f"one of {', '.join(map(repr, REDUCTIONS))} or None")
    return reduction


def reduce_weighted_values(values: Node, sample_weight: Any = None,
                           reduction: str = "sum_over_batch_size") -> Node:
    """Weights per-sample values and reduces them, like Keras' ``reduce_weighted_values``:
    ``"sum_over_batch_size"`` divides the weighted sum by the number of values."""
    reduction = standardize_reduction(reduction)
    values = _float(values)
    if sample_weight is not None:
        sw = _to_node(sample_weight, values.dtype)
        values, sw = squeeze_or_expand_to_same_rank(values, sw)
        while sw.ndim < values.ndim:
            sw = K.expand_dims(sw, -1)
        values = values * sw
    else:
        sw = None
    if reduction == "none" or values.ndim == 0:
        return values
    total = K.sum(values)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and sw is not None:
        divisor = K.sum(K.broadcast_like(sw, values))
        return total / K.maximum(divisor, _c(1e-12, divisor))
    return total / K.size_of(values)


# ---- loss objects ---------------------------------------------------------------------------
class Loss:
    """Base class of loss objects: ``loss(y_true, y_pred, sample_weight=None)`` -> scalar.

    Args:
        name: the loss' name.
        reduction: ``"sum_over_batch_size"`` (default), ``"sum"``, ``"mean"``,
            ``"mean_with_sample_weight"`` or ``"none"``/None (per-sample values).
        dtype: accepted for Keras compatibility (losses compute in the prediction's dtype).

    Subclasses implement ``call(y_true, y_pred)`` returning per-sample values as nodes.

    Example:
        >>> class MyLoss(kiln.losses.Loss):
        ...     def call(self, y_true, y_pred):
        ...         return kiln.ops.mean(kiln.ops.abs(y_true - y_pred) ** 3, axis=-1)
    """

    def __init__(self, name: str | None = None, reduction: Any = "sum_over_batch_size",
                 dtype: Any = None):
        from kiln.layers.base import snake_case

        self.name = name or snake_case(type(self).__name__)
        self.reduction = standardize_reduction(reduction)
        self.dtype = dtype

    def call(self, y_true: Node, y_pred: Node) -> Node:
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        symbolic = _symbolic(y_true, y_pred, sample_weight)
        values = self.call(_to_node(y_true), _to_node(y_pred))
        values = as_node(values)
        out = reduce_weighted_values(values, sample_weight, self.reduction)
        return out if symbolic else _evaluate(out)

    def get_config(self) -> dict:
        return {"name": self.name, "reduction": self.reduction}

    @classmethod
    def from_config(cls, config: dict) -> Loss:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


class LossFunctionWrapper(Loss):
    """Turns ``fn(y_true, y_pred, **kwargs)`` into a loss object."""

    def __init__(self, fn: Callable, reduction: Any = "sum_over_batch_size",
                 name: str | None = None, dtype: Any = None, **kwargs: Any):
        super().__init__(name=name or getattr(fn, "__name__", None), reduction=reduction,
                         dtype=dtype)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true: Node, y_pred: Node) -> Node:
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(self._fn_kwargs)
        if type(self) is LossFunctionWrapper:
            config["fn"] = getattr(self.fn, "__name__", repr(self.fn))
        return config

    @classmethod
    def from_config(cls, config: dict) -> Loss:
        config = dict(config)
        if cls is LossFunctionWrapper:
            fn = config.pop("fn")
            return cls(get(fn) if isinstance(fn, str) else fn, **config)
        return cls(**config)


def _wrapper_class(class_name: str, fn: Callable, default_name: str,
                   params: dict[str, Any]) -> type[LossFunctionWrapper]:
    """Builds a Keras loss class (``MeanSquaredError`` ...) around a loss function."""
    def __init__(self, *args: Any, reduction: Any = "sum_over_batch_size",
                 name: str | None = default_name, dtype: Any = None, **kwargs: Any):
        names = list(params)
        if len(args) > len(names):
            raise TypeError(f"{class_name}: too many positional arguments")
        values = dict(params)
        values.update(zip(names, args))
        for key in kwargs:
            if key not in params:
                raise TypeError(f"{class_name}: unexpected keyword argument {key!r}")
        values.update(kwargs)
        LossFunctionWrapper.__init__(self, fn, reduction=reduction, name=name, dtype=dtype,
                                     **values)

    doc = (f"Loss object for :func:`{fn.__name__}` (arguments: "
           f"{', '.join(f'{k}={v!r}' for k, v in params.items()) or 'none'}; plus "
           "``reduction`` and ``name``).")
    return type(class_name, (LossFunctionWrapper,), {"__init__": __init__, "__doc__": doc,
                                                     "__module__": __name__})


MeanSquaredError = _wrapper_class("MeanSquaredError", mean_squared_error,
                                  "mean_squared_error", {})
MeanAbsoluteError = _wrapper_class("MeanAbsoluteError", mean_absolute_error,
                                   "mean_absolute_error", {})
MeanAbsolutePercentageError = _wrapper_class(
    "MeanAbsolutePercentageError", mean_absolute_percentage_error,
    "mean_absolute_percentage_error", {})
MeanSquaredLogarithmicError = _wrapper_class(
    "MeanSquaredLogarithmicError", mean_squared_logarithmic_error,
    "mean_squared_logarithmic_error", {})
Huber = _wrapper_class("Huber", huber, "huber_loss", {"delta": 1.0})
LogCosh = _wrapper_class("LogCosh", log_cosh, "log_cosh", {})
KLDivergence = _wrapper_class("KLDivergence", kl_divergence, "kl_divergence", {})
Poisson = _wrapper_class("Poisson", poisson, "poisson", {})
CosineSimilarity = _wrapper_class("CosineSimilarity", cosine_similarity, "cosine_similarity",
                                  {"axis": -1})
Hinge = _wrapper_class("Hinge", hinge, "hinge", {})
SquaredHinge = _wrapper_class("SquaredHinge", squared_hinge, "squared_hinge", {})
CategoricalHinge = _wrapper_class("CategoricalHinge", categorical_hinge, "categorical_hinge", {})
BinaryCrossentropy = _wrapper_class(
    "BinaryCrossentropy", binary_crossentropy, "binary_crossentropy",
    {"from_logits": False, "label_smoothing": 0.0, "axis": -1})
CategoricalCrossentropy = _wrapper_class(
    "CategoricalCrossentropy", categorical_crossentropy, "categorical_crossentropy",
    {"from_logits": False, "label_smoothing": 0.0, "axis": -1})
SparseCategoricalCrossentropy = _wrapper_class(
    "SparseCategoricalCrossentropy", sparse_categorical_crossentropy,
    "sparse_categorical_crossentropy", {"from_logits": False, "ignore_class": None, "axis": -1})

# ---- lookup ---------------------------------------------------------------------------------
_FUNCTIONS: dict[str, Callable] = {f.__name__: f for f in (
    mean_squared_error, mean_absolute_error, mean_absolute_percentage_error,
    mean_squared_logarithmic_error, huber, log_cosh, kl_divergence, poisson, cosine_similarity,
    hinge, squared_hinge, categorical_hinge, binary_crossentropy, categorical_crossentropy,
    sparse_categorical_crossentropy)}
_ALIASES: dict[str, Callable] = {
    "mse": mean_squared_error, "MSE": mean_squared_error,
    "mae": mean_absolute_error, "MAE": mean_absolute_error,
    "mape": mean_absolute_percentage_error, "MAPE": mean_absolute_percentage_error,
    "msle": mean_squared_logarithmic_error, "MSLE": mean_squared_logarithmic_error,
    "kld": kl_divergence, "KLD": kl_divergence, "kullback_leibler_divergence": kl_divergence,
    "logcosh": log_cosh, "huber_loss": huber,
}
_CLASSES: dict[str, type[Loss]] = {c.__name__: c for c in (
    MeanSquaredError, MeanAbsoluteError, MeanAbsolutePercentageError,
    MeanSquaredLogarithmicError, Huber, LogCosh, KLDivergence, Poisson, CosineSimilarity, Hinge,
    SquaredHinge, CategoricalHinge, BinaryCrossentropy, CategoricalCrossentropy,
    SparseCategoricalCrossentropy, LossFunctionWrapper)}


def _valid_names() -> list[str]:
    return sorted(_FUNCTIONS) + sorted(_ALIASES) + sorted(_CLASSES)


def serialize(loss: Any) -> Any:
    """A JSON-able form: a name for built-in functions, ``{"class_name", "config"}`` for loss
    objects."""
    if loss is None:
        return None
    if isinstance(loss, str):
        return loss
    if isinstance(loss, Loss):
        return {"module": "kiln.losses" if type(loss).__name__ in _CLASSES else
                type(loss).__module__, "class_name": type(loss).__name__,
                "config": loss.get_config(), "registered_name": None}
    name = getattr(loss, "__name__", None)
    if name in _FUNCTIONS and _FUNCTIONS[name] is loss:
        return name
    return name or repr(loss)


def deserialize(config: Any, custom_objects: dict | None = None) -> Any:
    """Inverse of :func:`serialize`."""
    if isinstance(config, str):
        if custom_objects and config in custom_objects:
            return custom_objects[config]
        return get(config)
    from kiln.models.model import instantiate

    return instantiate(config, _CLASSES, custom_objects, "losses")


def get(identifier: Any) -> Any:
    """Resolves a loss.

    Args:
        identifier: None, a name (``"mse"``, ``"categorical_crossentropy"``,
            ``"MeanSquaredError"`` ...), a config dict, a :class:`Loss` or any callable
            ``fn(y_true, y_pred)`` built with ``kiln.ops``.

    Returns:
        A function, a Loss object, or None.

    Raises:
        ValueError: for an unknown name (listing the valid ones); TypeError for other types.
    """
    if identifier is None:
        return None
    if isinstance(identifier, str):
        if identifier in _FUNCTIONS:
            return _FUNCTIONS[identifier]
        if identifier in _ALIASES:
            return _ALIASES[identifier]
        if identifier in _CLASSES and identifier != "LossFunctionWrapper":
            return _CLASSES[identifier]()
        raise ValueError(f"Unknown loss {identifier!r}. Valid names: "
                         f"{', '.join(n for n in _valid_names() if n != 'LossFunctionWrapper')}")
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, Loss) or callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret loss identifier {identifier!r} "
                    f"({type(identifier).__name__}); pass a name, a Loss or a callable "
                    "fn(y_true, y_pred)")


def as_loss_object(identifier: Any) -> Loss | None:
    """Like :func:`get`, but functions are wrapped into a :class:`LossFunctionWrapper` (so they
    apply sample weights and the default reduction)."""
    obj = get(identifier)
    if obj is None or isinstance(obj, Loss):
        return obj
    if isinstance(obj, type) and issubclass(obj, Loss):
        return obj()
    return LossFunctionWrapper(obj, name=identifier if isinstance(identifier, str) else None)


def is_sparse_categorical(loss: Any) -> bool:
    """Whether ``loss`` (a function or a Loss object) takes integer class labels."""
    fn = getattr(loss, "fn", loss)
    return fn is sparse_categorical_crossentropy


def is_binary_crossentropy(loss: Any) -> bool:
    return getattr(loss, "fn", loss) is binary_crossentropy


def is_categorical_crossentropy(loss: Any) -> bool:
    return getattr(loss, "fn", loss) is categorical_crossentropy


__all__ = ["Loss", "LossFunctionWrapper", *sorted(_FUNCTIONS), *sorted(
    c for c in _CLASSES if c != "LossFunctionWrapper"), "get", "serialize", "deserialize",
    "reduce_weighted_values", "squeeze_or_expand_to_same_rank"]
