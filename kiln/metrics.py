"""Metrics (Keras 3 names and semantics) computed as graph statistics.

A metric splits into two halves:

* ``stats(y_true, y_pred, sample_weight)`` builds graph nodes for one batch's sufficient
  statistics (``[sum of weighted values, sum of weights]``, confusion counts per threshold
  ...). The trainer adds them to the training/test graph, so metrics cost no extra pass over
  the data;
* ``merge(values)`` adds a batch's statistics (NumPy) into the metric's state, and
  ``result()`` turns the state into the metric's value, in Python.

``update_state(y_true, y_pred, sample_weight=None)`` on NumPy arrays compiles the statistics
once per input signature and merges them, so a metric also works on its own.

Example:
    >>> m = kiln.metrics.SparseCategoricalAccuracy()
    >>> m.update_state([1, 2], [[0.1, 0.9, 0.0], [0.8, 0.1, 0.1]])
    >>> m.result()
    0.5
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln import losses as _losses
from kiln.core.ir import Node
from kiln.core.ops._rules import fmt
from kiln.losses import (
    EPSILON,
    _c,
    _float,
    _symbolic,
    _to_node,
    eager,
    squeeze_or_expand_to_same_rank,
)


# ---- per-sample metric functions -----------------------------------------------------------
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
        raise ValueError(f"sparse accuracy: labels of shape {fmt(y_true.shape)} do not match "
                         f"predictions of shape {fmt(y_pred.shape)}")
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
        raise ValueError(f"categorical_accuracy: y_true of shape {fmt(y_true.shape)} must have "
                         f"the rank of y_pred {fmt(y_pred.shape)} (one-hot labels); use "
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
def sparse_top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> Node:
    """Whether the integer label is among the ``k`` highest predictions."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    return _in_top_k(_sparse_labels(y_true, y_pred), y_pred, k)


@eager
def top_k_categorical_accuracy(y_true: Any, y_pred: Any, k: int = 5) -> Node:
    """Whether the one-hot label is among the ``k`` highest predictions."""
    y_true, y_pred = _pred_true(y_true, y_pred)
    return _in_top_k(K.argmax(y_true, axis=-1), y_pred, k)


# ---- the Metric base ------------------------------------------------------------------------
_COMPILED: dict[tuple, Any] = {}


def _placeholder_for(a: np.ndarray, float_dtype: str) -> Node:
    if a.dtype.kind in "iu":
        dtype = "int64" if a.dtype.itemsize > 4 else "int32"
    elif a.dtype.kind in "fb":
        dtype = float_dtype
    else:
        raise TypeError(f"metrics: expected numeric arrays, received dtype {a.dtype}")
    shape = (None,) + a.shape[1:] if a.ndim else ()
    return K.placeholder(shape, dtype)


class Metric:
    """Base class of stateful metrics.

    Args:
        name: the metric's name (its key in the logs).
        dtype: the float dtype of the statistics (default floatx).

    Subclasses implement :meth:`stats` (graph nodes for one batch), :meth:`merge` (add a
    batch's NumPy statistics to the state), :meth:`result` and :meth:`reset_state`.
    """

    #: number of tensor arguments of ``update_state`` before ``sample_weight``
    n_inputs = 2

    def __init__(self, name: str | None = None, dtype: Any = None):
        from kiln.layers.base import snake_case

        self.name = name or snake_case(type(self).__name__)
        self.dtype = dtype or kiln.config.floatx()
        self.reset_state()

    # -- graph half
    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        raise NotImplementedError(f"{type(self).__name__} must implement stats()")

    # -- Python half
    def merge(self, values: list[np.ndarray]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement merge()")

    def result(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement result()")

    def reset_state(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement reset_state()")

    def _graph_key(self) -> str:
        config = {k: v for k, v in self.get_config().items() if k != "name"}
        return json.dumps(config, sort_keys=True, default=repr)

    def update_state(self, *args: Any, sample_weight: Any = None) -> None:
        """Accumulates one batch given as NumPy arrays (compiled once per signature)."""
        if len(args) != self.n_inputs:
            raise TypeError(f"{self.name}: update_state expects {self.n_inputs} arrays (and "
                            f"sample_weight=), received {len(args)}")
        if _symbolic(*args, sample_weight):
            raise TypeError(f"{self.name}: update_state takes NumPy arrays; inside a graph use "
                            "metric.stats(...) (models do this for compiled metrics)")
        arrays = [np.asarray(a) for a in args]
        if sample_weight is not None:
            arrays.append(np.asarray(sample_weight))
        sig = tuple((a.shape[1:] if a.ndim else None, a.dtype.kind, a.dtype.itemsize > 4)
                    for a in arrays)
        key = (type(self), self._graph_key(), sig)
        fn = _COMPILED.get(key)
        if fn is None:
            from kiln.core import executor

            phs = [_placeholder_for(a, self.dtype) for a in arrays]
            sw = phs[self.n_inputs] if sample_weight is not None else None
            nodes = self.stats(*phs[:self.n_inputs], sample_weight=sw)
            fn = executor.function(phs, list(nodes), name=f"{self.name}_update_state")
            _COMPILED[key] = fn
        self.merge(fn(*arrays))

    def __call__(self, *args: Any, sample_weight: Any = None) -> Any:
        """Updates the state with one batch and returns the result."""
        self.update_state(*args, sample_weight=sample_weight)
        return self.result()

    @property
    def variables(self) -> list[np.ndarray]:
        return [np.asarray(v) for v in self._state_values()]

    def _state_values(self) -> list[Any]:
        return []

    def get_state(self) -> list:
        """The accumulated state as JSON-able lists (checkpoints store it mid-epoch, so that
        a resumed epoch logs the same values as an uninterrupted one)."""
        return [np.asarray(v, np.float64).tolist() for v in self._state_values()]

    def set_state(self, state: list) -> None:
        """Restores a state returned by :meth:`get_state`."""
        values = [np.asarray(v, np.float64) for v in state]
        if len(values) != len(self._state_values()):
            raise ValueError(f"{self.name}: a state of {len(values)} values does not fit this "
                             f"metric ({len(self._state_values())} values)")
        self._set_state_values(values)

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        """Inverse of ``_state_values`` (stateless metrics have nothing to set)."""

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype}

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"


def _weights_like(sample_weight: Node | None, values: Node) -> Node | None:
    if sample_weight is None:
        return None
    sw = K.cast(sample_weight, values.dtype) if sample_weight.dtype != values.dtype else \
        sample_weight
    values, sw = squeeze_or_expand_to_same_rank(values, sw)
    while sw.ndim < values.ndim:
        sw = K.expand_dims(sw, -1)
    return K.broadcast_like(sw, values)


def mean_stats(values: Node, sample_weight: Node | None = None) -> list[Node]:
    """``[sum(values * w), sum(w)]`` (``w`` = 1 without sample weights)."""
    values = _float(values)
    sw = _weights_like(sample_weight, values)
    if sw is None:
        return [K.sum(values), K.size_of(values)]
    return [K.sum(values * sw), K.sum(sw)]


class Mean(Metric):
    """The (weighted) mean of the values seen: ``update_state(values, sample_weight=None)``.

    Example:
        >>> m = kiln.metrics.Mean(); m.update_state(np.array([1., 3.])); m.result()
        2.0
    """

    n_inputs = 1

    def reset_state(self) -> None:
        self.total = 0.0
        self.count = 0.0

    def stats(self, values: Node, sample_weight: Node | None = None) -> list[Node]:  # type: ignore[override]
        return mean_stats(values, sample_weight)

    def merge(self, values: list[Any]) -> None:
        self.total += float(values[0])
        self.count += float(values[1])

    def result(self) -> float:
        return self.total / self.count if self.count else 0.0

    def _state_values(self) -> list[Any]:
        return [self.total, self.count]

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        self.total, self.count = float(values[0]), float(values[1])


class Sum(Mean):
    """The (weighted) sum of the values seen."""

    def result(self) -> float:
        return self.total


class MeanMetricWrapper(Mean):
    """The mean of a per-sample function ``fn(y_true, y_pred, **kwargs)`` over all samples.

    Args:
        fn: per-sample metric function built with ``kiln.ops``.
        name: the metric's name.
        **kwargs: extra arguments of ``fn``.
    """

    n_inputs = 2

    def __init__(self, fn: Callable, name: str | None = None, dtype: Any = None,
                 **kwargs: Any):
        self._fn = fn
        self._fn_kwargs = kwargs
        super().__init__(name=name or getattr(fn, "__name__", None), dtype=dtype)

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None  # type: ignore[override]
              ) -> list[Node]:
        return mean_stats(self._fn(y_true, y_pred, **self._fn_kwargs), sample_weight)

    def _graph_key(self) -> str:
        return super()._graph_key() + repr(id(self._fn))

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(self._fn_kwargs)
        if type(self) is MeanMetricWrapper:
            config["fn"] = getattr(self._fn, "__name__", repr(self._fn))
        return config

    @classmethod
    def from_config(cls, config: dict) -> Metric:
        config = dict(config)
        if cls is MeanMetricWrapper:
            fn = config.pop("fn")
            return cls(get(fn)._fn if isinstance(fn, str) else fn, **config)
        return cls(**config)


def _wrapper(class_name: str, fn: Callable, default_name: str, params: dict[str, Any],
             doc: str) -> type[MeanMetricWrapper]:
    def __init__(self, *args: Any, name: str | None = default_name, dtype: Any = None,
                 **kwargs: Any):
        names = list(params)
        if len(args) > len(names):
            raise TypeError(f"{class_name}: too many positional arguments")
        values = dict(params)
        values.update(zip(names, args))
        for key in kwargs:
            if key not in params:
                raise TypeError(f"{class_name}: unexpected keyword argument {key!r}")
        values.update(kwargs)
        MeanMetricWrapper.__init__(self, fn, name=name, dtype=dtype, **values)

    return type(class_name, (MeanMetricWrapper,), {"__init__": __init__, "__doc__": doc,
                                                   "__module__": __name__})


BinaryAccuracy = _wrapper("BinaryAccuracy", binary_accuracy, "binary_accuracy",
                          {"threshold": 0.5},
                          "How often ``y_pred > threshold`` equals the binary label.")
CategoricalAccuracy = _wrapper("CategoricalAccuracy", categorical_accuracy,
                               "categorical_accuracy", {},
                               "How often ``argmax(y_pred)`` equals ``argmax(y_true)``.")
SparseCategoricalAccuracy = _wrapper("SparseCategoricalAccuracy", sparse_categorical_accuracy,
                                     "sparse_categorical_accuracy", {},
                                     "How often ``argmax(y_pred)`` equals the integer label.")
TopKCategoricalAccuracy = _wrapper("TopKCategoricalAccuracy", top_k_categorical_accuracy,
                                   "top_k_categorical_accuracy", {"k": 5},
                                   "How often the one-hot label is in the top ``k``.")
SparseTopKCategoricalAccuracy = _wrapper(
    "SparseTopKCategoricalAccuracy", sparse_top_k_categorical_accuracy,
    "sparse_top_k_categorical_accuracy", {"k": 5},
    "How often the integer label is in the top ``k``.")
MeanSquaredError = _wrapper("MeanSquaredError", _losses.mean_squared_error,
                            "mean_squared_error", {}, "Mean of ``(y_true - y_pred)**2``.")
MeanAbsoluteError = _wrapper("MeanAbsoluteError", _losses.mean_absolute_error,
                             "mean_absolute_error", {}, "Mean of ``|y_true - y_pred|``.")
MeanAbsolutePercentageError = _wrapper(
    "MeanAbsolutePercentageError", _losses.mean_absolute_percentage_error,
    "mean_absolute_percentage_error", {}, "Mean absolute percentage error.")
MeanSquaredLogarithmicError = _wrapper(
    "MeanSquaredLogarithmicError", _losses.mean_squared_logarithmic_error,
    "mean_squared_logarithmic_error", {}, "Mean squared logarithmic error.")
LogCoshError = _wrapper("LogCoshError", _losses.log_cosh, "logcosh", {},
                        "Mean of ``log(cosh(y_pred - y_true))``.")
KLDivergence = _wrapper("KLDivergence", _losses.kl_divergence, "kl_divergence", {},
                        "Kullback-Leibler divergence.")
Poisson = _wrapper("Poisson", _losses.poisson, "poisson", {}, "Poisson deviance term.")
Hinge = _wrapper("Hinge", _losses.hinge, "hinge", {}, "Hinge loss as a metric.")
SquaredHinge = _wrapper("SquaredHinge", _losses.squared_hinge, "squared_hinge", {},
                        "Squared hinge loss as a metric.")
CategoricalHinge = _wrapper("CategoricalHinge", _losses.categorical_hinge,
                            "categorical_hinge", {}, "Categorical hinge loss as a metric.")
BinaryCrossentropy = _wrapper("BinaryCrossentropy", _losses.binary_crossentropy,
                              "binary_crossentropy",
                              {"from_logits": False, "label_smoothing": 0.0},
                              "Binary cross-entropy as a metric.")
CategoricalCrossentropy = _wrapper("CategoricalCrossentropy", _losses.categorical_crossentropy,
                                   "categorical_crossentropy",
                                   {"from_logits": False, "label_smoothing": 0.0},
                                   "Categorical cross-entropy as a metric.")
SparseCategoricalCrossentropy = _wrapper(
    "SparseCategoricalCrossentropy", _losses.sparse_categorical_crossentropy,
    "sparse_categorical_crossentropy", {"from_logits": False},
    "Sparse categorical cross-entropy as a metric.")


class RootMeanSquaredError(MeanSquaredError):  # type: ignore[misc, valid-type]
    """``sqrt(mean((y_true - y_pred)**2))`` over all samples seen."""

    def __init__(self, name: str = "root_mean_squared_error", dtype: Any = None):
        super().__init__(name=name, dtype=dtype)

    def result(self) -> float:
        return float(np.sqrt(super().result()))


# ---- confusion-matrix metrics ---------------------------------------------------------------
#: Keras' ``NEG_INF``: the value of the predictions ``top_k`` filters out, and the default
#: threshold of Precision/Recall with ``top_k`` (every kept prediction counts as positive)
NEG_INF = -1e10


def _check_top_k(who: str, top_k: Any) -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"{who}: top_k must be a positive integer, received {top_k!r}")
    return int(top_k)


def _filter_top_k(x: Node, k: int, who: str) -> Node:
    """Keras' ``_filter_top_k``: keeps the ``k`` largest entries of the last axis (ties go to
    the lower index, like ``top_k``) and sets the others to ``NEG_INF``.

    An entry is kept when fewer than ``k`` entries are greater or equal with a lower index
    (pairwise comparisons: O(classes**2) per sample)."""
    n = x.shape[-1] if x.ndim > 1 else None
    if n is None:
        raise ValueError(f"{who}: top_k ranks the last (class) axis of each sample and needs "
                         "predictions of shape (samples, ..., classes) with a known class "
                         f"count, received shape {fmt(x.shape)} (for one sample, pass "
                         "[[...]])")
    if k > n:
        raise ValueError(f"{who}: top_k={k} exceeds the {n} entries of the predictions' last "
                         f"axis (shape {fmt(x.shape)})")
    xi = K.expand_dims(x, -1)  # [..., i, 1]
    xj = K.expand_dims(x, -2)  # [..., 1, j]
    earlier = K.constant(np.tri(n, n, -1, dtype=x.dtype))  # [i, j] = j < i
    ahead = K.cast(xj > xi, x.dtype) + K.cast(K.equal(xj, xi), x.dtype) * earlier
    rank = K.sum(ahead, axis=-1)
    return K.where(rank < _c(float(k), rank), x, _c(NEG_INF, x))


def _confusion_stats(y_true: Node, y_pred: Node, sample_weight: Node | None,
                     thresholds: np.ndarray, class_id: int | None = None,
                     which: tuple[str, ...] = ("tp", "fp", "tn", "fn"),
                     top_k: int | None = None, multi_label: bool = False,
                     label_weights: np.ndarray | None = None,
                     who: str = "confusion-matrix metric") -> list[Node]:
    """Weighted counts of true/false positives/negatives at each threshold
    (``prediction > threshold`` is positive; any non-zero label is positive), Keras'
    ``update_confusion_matrix_variables``:

    * ``top_k``: per sample only the ``k`` largest predictions of the last axis are kept, the
      others become ``NEG_INF`` (predicted negative); applied before ``class_id``;
    * ``multi_label``: counts per label (last axis), shape ``(thresholds, labels)``; else all
      entries are flattened into one binary problem, shape ``(thresholds,)``;
    * ``label_weights`` (flattened case only): multiply the sample weights along the last axis.
    """
    y_pred = _float(y_pred)
    y_true = K.cast(y_true, y_pred.dtype) if y_true.dtype != y_pred.dtype else y_true
    y_true, y_pred = squeeze_or_expand_to_same_rank(y_true, y_pred)
    if y_true.ndim != y_pred.ndim or not all(a is None or b is None or a == b or a == 1
                                             for a, b in zip(y_true.shape, y_pred.shape)):
        raise ValueError(f"{who}: labels of shape {fmt(y_true.shape)} do not "
                         f"match predictions of shape {fmt(y_pred.shape)} (Precision, Recall and "
                         "AUC take one label per prediction, e.g. binary labels)")
    sw = _weights_like(sample_weight, y_pred)
    if top_k is not None:
        y_pred = _filter_top_k(y_pred, top_k, who)
    if class_id is not None:
        y_true = y_true[..., class_id]
        y_pred = y_pred[..., class_id]
        sw = sw[..., class_id] if sw is not None else None
    y_true = K.broadcast_like(y_true, y_pred)
    if label_weights is not None:
        n = y_pred.shape[-1] if y_pred.ndim > 1 else None
        if n != len(label_weights):
            raise ValueError(f"{who}: label_weights has {len(label_weights)} entries but the "
                             f"predictions of shape {fmt(y_pred.shape)} have "
                             f"{n if n is not None else 'no'} labels on their last axis")
        lw = K.broadcast_like(K.constant(np.asarray(label_weights, y_pred.dtype)), y_pred)
        sw = lw if sw is None else sw * lw
    thr = np.asarray(thresholds, y_pred.dtype)
    if multi_label:  # [sample, threshold, label]
        pred = K.expand_dims(y_pred, 1)
        raw_label = K.expand_dims(y_true, 1)
        w = K.expand_dims(sw, 1) if sw is not None else None
        thr_node = K.constant(thr.reshape(1, -1, 1))
    else:  # [entry, threshold]
        pred = K.reshape(y_pred, (-1, 1))
        raw_label = K.reshape(y_true, (-1, 1))
        w = K.reshape(sw, (-1, 1)) if sw is not None else None
        thr_node = K.constant(thr.reshape(1, -1))
    label = K.cast(K.not_equal(raw_label, _c(0.0, y_pred)), y_pred.dtype)
    pos = K.cast(pred > thr_node, y_pred.dtype)
    one = _c(1.0, y_pred)
    pos_l = label if w is None else label * w
    neg_l = (one - label) if w is None else (one - label) * w
    tp = K.sum(pos * pos_l, axis=0)
    fp = K.sum(pos * neg_l, axis=0)
    out = {"tp": tp, "fp": fp}
    if "fn" in which:
        out["fn"] = K.sum(pos_l, axis=0) - tp
    if "tn" in which:
        out["tn"] = K.sum(neg_l, axis=0) - fp
    return [out[k] for k in which]


def _divide_no_nan(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.where(b != 0, a / np.where(b != 0, b, 1.0), 0.0)


class _ConfusionMetric(Metric):
    _which: tuple[str, ...] = ()

    def __init__(self, thresholds: Any = None, top_k: int | None = None,
                 class_id: int | None = None, name: str | None = None, dtype: Any = None):
        top_k = _check_top_k(type(self).__name__, top_k)
        self.init_thresholds = thresholds
        self._single = thresholds is None or np.ndim(thresholds) == 0
        if thresholds is None:
            thr = [0.5 if top_k is None else NEG_INF]
        else:
            thr = np.atleast_1d(thresholds).tolist()
            for t in thr:
                if not 0.0 <= float(t) <= 1.0:
                    raise ValueError(f"{type(self).__name__}: thresholds must be in [0, 1], "
                                     f"received {thresholds!r}")
        self.thresholds = np.asarray(thr, np.float64)
        self.top_k = top_k
        self.class_id = class_id
        super().__init__(name=name, dtype=dtype)

    def reset_state(self) -> None:
        self._state = [np.zeros(len(self.thresholds)) for _ in self._which]

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        return _confusion_stats(y_true, y_pred, sample_weight, self.thresholds, self.class_id,
                                self._which, top_k=self.top_k, who=type(self).__name__)

    def merge(self, values: list[np.ndarray]) -> None:
        for s, v in zip(self._state, values):
            s += v

    def _out(self, value: np.ndarray) -> Any:
        return float(value[0]) if self._single else value

    def _state_values(self) -> list[Any]:
        return list(self._state)

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        if any(v.shape != s.shape for v, s in zip(values, self._state)):
            raise ValueError(f"{self.name}: state shapes {[v.shape for v in values]} do not "
                             f"fit {len(self.thresholds)} thresholds")
        self._state = [v.copy() for v in values]

    def get_config(self) -> dict:
        config = super().get_config()
        thr = self.init_thresholds
        config.update({"thresholds": thr.tolist() if isinstance(thr, np.ndarray) else thr,
                       "top_k": self.top_k, "class_id": self.class_id})
        return config


class Precision(_ConfusionMetric):
    """``tp / (tp + fp)`` with ``prediction > threshold`` as positive.

    With ``top_k`` (Keras' rule), per sample only the ``k`` largest predictions of the last
    axis are kept (ties go to the lower index); the others count as predicted negative. Then
    the default threshold is ``NEG_INF`` (every kept prediction is positive), else 0.5.

    Args:
        thresholds: a float or a list of floats in [0, 1] (then the result is an array).
        top_k: optional positive int, the number of top predictions per sample to consider.
        class_id: optional class index to compute the metric for (after ``top_k``).

    Example:
        >>> m = kiln.metrics.Precision(top_k=1)
        >>> m.update_state([[0, 1, 0], [1, 0, 0]], [[0.2, 0.5, 0.3], [0.1, 0.7, 0.2]])
        >>> m.result()
        0.5
    """

    _which = ("tp", "fp")

    def result(self) -> Any:
        tp, fp = self._state
        return self._out(_divide_no_nan(tp, tp + fp))


class Recall(_ConfusionMetric):
    """``tp / (tp + fn)`` with ``prediction > threshold`` as positive.

    ``thresholds``, ``top_k`` and ``class_id`` as for :class:`Precision` (with ``top_k`` a
    label counts as recalled when its class is among the sample's ``k`` top predictions).
    """

    _which = ("tp", "fn")

    def result(self) -> Any:
        tp, fn = self._state
        return self._out(_divide_no_nan(tp, tp + fn))


class _Counts(_ConfusionMetric):
    _kind = "tp"

    def __init__(self, thresholds: Any = None, name: str | None = None, dtype: Any = None):
        super().__init__(thresholds=thresholds, name=name, dtype=dtype)

    def result(self) -> Any:
        return self._out(self._state[0])

    def get_config(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "thresholds": self.init_thresholds}


class TruePositives(_Counts):
    """Weighted count of true positives."""
    _which = ("tp",)


class FalsePositives(_Counts):
    """Weighted count of false positives."""
    _which = ("fp",)


class TrueNegatives(_Counts):
    """Weighted count of true negatives."""
    _which = ("tn",)


class FalseNegatives(_Counts):
    """Weighted count of false negatives."""
    _which = ("fn",)


class AUC(Metric):
    """Area under the ROC (or PR) curve, from confusion counts at ``num_thresholds`` thresholds
    (Keras' method: thresholds evenly spaced in [0, 1] plus ``-eps`` and ``1 + eps``;
    trapezoidal "interpolation" sums for ROC, Davis-Goadrich interpolation for PR).

    With ``multi_label=True`` (Keras' rule) the counts are kept per label (the last axis of
    rank-2 predictions; state shape ``(num_thresholds, num_labels)``), an AUC is computed per
    label and the result is their mean, weighted by ``label_weights`` when given
    (``sum(auc * w) / sum(w)``). With ``multi_label=False`` all entries are flattened into one
    binary problem and ``label_weights`` multiply the sample weights along the last axis.

    Args:
        num_thresholds: number of thresholds (default 200).
        curve: ``"ROC"`` (default) or ``"PR"``.
        summation_method: ``"interpolation"`` (default), ``"minoring"`` or ``"majoring"``.
        thresholds: optional explicit thresholds in [0, 1] (overrides ``num_thresholds``).
        multi_label: one AUC per label, averaged (see above).
        num_labels: the number of labels (``multi_label`` only; else taken from the first
            batch).
        label_weights: optional non-negative weight per label (see above).
        from_logits: apply a sigmoid to the predictions first.

    Example:
        >>> m = kiln.metrics.AUC(multi_label=True, label_weights=[1.0, 3.0])
        >>> m.update_state([[0, 1], [1, 0], [1, 1]], [[0.2, 0.9], [0.7, 0.5], [0.6, 0.4]])
        >>> m.result()  # label AUCs 1.0 and 0.5: (1.0 * 1.0 + 3.0 * 0.5) / 4
        0.625
    """

    def __init__(self, num_thresholds: int = 200, curve: str = "ROC",
                 summation_method: str = "interpolation", name: str | None = None,
                 dtype: Any = None, thresholds: Any = None, multi_label: bool = False,
                 num_labels: int | None = None, label_weights: Any = None,
                 from_logits: bool = False):
        curve = str(curve).upper()
        if curve not in ("ROC", "PR"):
            raise ValueError(f"AUC: curve must be 'ROC' or 'PR', received {curve!r}")
        summation_method = str(summation_method).lower()
        if summation_method not in ("interpolation", "minoring", "majoring"):
            raise ValueError("AUC: summation_method must be 'interpolation', 'minoring' or "
                             f"'majoring', received {summation_method!r}")
        if num_labels is not None:
            if not multi_label:
                raise ValueError("AUC: num_labels is needed only when multi_label=True, "
                                 f"received num_labels={num_labels!r}")
            if (isinstance(num_labels, bool) or not isinstance(num_labels, (int, np.integer))
                    or num_labels < 1):
                raise ValueError(f"AUC: num_labels must be a positive integer, received "
                                 f"{num_labels!r}")
            num_labels = int(num_labels)
        if label_weights is not None:
            lw = np.asarray(label_weights, np.float64)
            if lw.ndim != 1 or lw.size == 0 or not np.all(np.isfinite(lw)) or np.any(lw < 0):
                raise ValueError("AUC: label_weights must be a non-empty 1-D list of "
                                 f"non-negative numbers, received {label_weights!r}")
            if num_labels is not None and lw.size != num_labels:
                raise ValueError(f"AUC: label_weights has {lw.size} entries but "
                                 f"num_labels={num_labels}")
            label_weights = lw
        if thresholds is not None:
            inner = sorted(float(t) for t in np.atleast_1d(thresholds))
            self._init_thresholds = inner
            num_thresholds = len(inner) + 2
        else:
            if num_thresholds <= 1:
                raise ValueError(f"AUC: num_thresholds must be > 1, received {num_thresholds}")
            self._init_thresholds = None
            inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
        self.num_thresholds = int(num_thresholds)
        self.thresholds = np.asarray([0.0 - EPSILON] + inner + [1.0 + EPSILON], np.float64)
        self.curve = curve
        self.summation_method = summation_method
        self.multi_label = bool(multi_label)
        self.num_labels = num_labels
        self.label_weights: np.ndarray | None = label_weights
        self._num_labels = num_labels  # the state's label count, fixed by the first batch
        self._from_logits = bool(from_logits)
        super().__init__(name=name, dtype=dtype)

    def reset_state(self) -> None:
        if self.multi_label and self._num_labels is None:
            self._state: list[np.ndarray] | None = None  # shaped by the first batch
            return
        shape = (self.num_thresholds, self._num_labels) if self.multi_label else \
            (self.num_thresholds,)
        self._state = [np.zeros(shape) for _ in range(4)]

    def stats(self, y_true: Node, y_pred: Node, sample_weight: Node | None = None
              ) -> list[Node]:
        if self.multi_label:
            if y_pred.ndim != 2:
                raise ValueError("AUC: multi_label=True needs predictions of rank 2 (samples, "
                                 f"labels), received shape {fmt(y_pred.shape)}")
            n = y_pred.shape[-1]
            if n is None:
                raise ValueError("AUC: multi_label=True needs a known number of labels (last "
                                 f"axis), received shape {fmt(y_pred.shape)}")
            if self.label_weights is not None and len(self.label_weights) != n:
                raise ValueError(f"AUC: label_weights has {len(self.label_weights)} entries "
                                 f"but the predictions of shape {fmt(y_pred.shape)} have {n} "
                                 "labels")
            if self._num_labels is not None and n != self._num_labels:
                raise ValueError(f"AUC: the state holds {self._num_labels} labels "
                                 f"(num_labels={self.num_labels}), received predictions of "
                                 f"shape {fmt(y_pred.shape)}")
        if self._from_logits:
            y_pred = K.sigmoid(_float(y_pred))
        return _confusion_stats(y_true, y_pred, sample_weight, self.thresholds,
                                multi_label=self.multi_label,
                                label_weights=None if self.multi_label else self.label_weights,
                                who="AUC")

    def merge(self, values: list[np.ndarray]) -> None:
        if self._state is None:
            self._num_labels = int(values[0].shape[-1])
            self.reset_state()
        assert self._state is not None
        if values[0].shape != self._state[0].shape:
            raise ValueError(f"AUC: statistics of shape {values[0].shape} do not match the "
                             f"state of shape {self._state[0].shape} (multi_label needs the "
                             "same number of labels in every batch)")
        for s, v in zip(self._state, values):
            s += v

    def _counts(self) -> list[np.ndarray]:
        if self._state is None:
            return [np.zeros((self.num_thresholds, 0)) for _ in range(4)]
        return self._state

    @property
    def true_positives(self) -> np.ndarray:
        return self._counts()[0]

    @property
    def false_positives(self) -> np.ndarray:
        return self._counts()[1]

    @property
    def true_negatives(self) -> np.ndarray:
        return self._counts()[2]

    @property
    def false_negatives(self) -> np.ndarray:
        return self._counts()[3]

    def _state_values(self) -> list[Any]:
        return list(self._counts())

    def _set_state_values(self, values: list[np.ndarray]) -> None:
        shape = values[0].shape
        ok = shape[0] == self.num_thresholds and len(shape) == (2 if self.multi_label else 1)
        if not ok or any(v.shape != shape for v in values):
            raise ValueError(f"{self.name}: state shapes {[v.shape for v in values]} do not "
                             f"fit num_thresholds={self.num_thresholds}, "
                             f"multi_label={self.multi_label}")
        if self.multi_label:
            if shape[1] == 0:  # saved before the first batch
                self._num_labels = self.num_labels
                self.reset_state()
                return
            self._num_labels = shape[1]
        self._state = [v.copy() for v in values]

    def _reduce(self, terms: np.ndarray) -> float:
        """Sums the per-interval terms: one AUC, or the (label-weighted) mean of the per-label
        AUCs with ``multi_label``."""
        if not self.multi_label:
            return float(np.sum(terms))
        by_label = np.sum(terms, axis=0)
        if self.label_weights is None:
            return float(np.mean(by_label))
        lw = self.label_weights
        return float(_divide_no_nan(np.sum(by_label * lw), np.sum(lw)))

    def _interpolate_pr_auc(self) -> float:
        tp, fp, _, fn = self._counts()
        n = self.num_thresholds
        dtp = tp[:n - 1] - tp[1:]
        p = tp + fp
        dp = p[:n - 1] - p[1:]
        prec_slope = _divide_no_nan(dtp, np.maximum(dp, 0))
        intercept = tp[1:] - prec_slope * p[1:]
        safe_p_ratio = np.where((p[:n - 1] > 0) & (p[1:] > 0),
                                _divide_no_nan(p[:n - 1], np.maximum(p[1:], 0)), 1.0)
        increment = _divide_no_nan(prec_slope * (dtp + intercept * np.log(safe_p_ratio)),
                                   np.maximum(tp[1:] + fn[1:], 0))
        return self._reduce(increment)

    def result(self) -> float:
        if self._state is None:
            return 0.0
        if self.curve == "PR" and self.summation_method == "interpolation":
            return self._interpolate_pr_auc()
        tp, fp, tn, fn = self._state
        recall = _divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = _divide_no_nan(fp, fp + tn), recall
        else:
            x, y = recall, _divide_no_nan(tp, tp + fp)
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / 2.0
        elif self.summation_method == "minoring":
            heights = np.minimum(y[:-1], y[1:])
        else:
            heights = np.maximum(y[:-1], y[1:])
        return self._reduce((x[:-1] - x[1:]) * heights)

    def get_config(self) -> dict:
        config = super().get_config()
        lw = self.label_weights
        config.update({"num_thresholds": self.num_thresholds, "curve": self.curve,
                       "summation_method": self.summation_method,
                       "thresholds": self._init_thresholds, "multi_label": self.multi_label,
                       "num_labels": self.num_labels,
                       "label_weights": None if lw is None else lw.tolist(),
                       "from_logits": self._from_logits})
        return config


# ---- lookup ---------------------------------------------------------------------------------
_CLASSES: dict[str, type[Metric]] = {c.__name__: c for c in (
    Mean, Sum, MeanMetricWrapper, BinaryAccuracy, CategoricalAccuracy, SparseCategoricalAccuracy,
    TopKCategoricalAccuracy, SparseTopKCategoricalAccuracy, MeanSquaredError, MeanAbsoluteError,
    MeanAbsolutePercentageError, MeanSquaredLogarithmicError, RootMeanSquaredError, LogCoshError,
    KLDivergence, Poisson, Hinge, SquaredHinge, CategoricalHinge, BinaryCrossentropy,
    CategoricalCrossentropy, SparseCategoricalCrossentropy, Precision, Recall, AUC,
    TruePositives, FalsePositives, TrueNegatives, FalseNegatives)}

# string name -> metric class (instantiated with name=<the string>, like Keras 3's logs)
_NAMES: dict[str, type[Metric]] = {
    "binary_accuracy": BinaryAccuracy, "categorical_accuracy": CategoricalAccuracy,
    "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "top_k_categorical_accuracy": TopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy,
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
    "mean_absolute_percentage_error": MeanAbsolutePercentageError,
    "mape": MeanAbsolutePercentageError,
    "mean_squared_logarithmic_error": MeanSquaredLogarithmicError,
    "msle": MeanSquaredLogarithmicError, "root_mean_squared_error": RootMeanSquaredError,
    "logcosh": LogCoshError, "log_cosh": LogCoshError, "kl_divergence": KLDivergence,
    "kld": KLDivergence, "poisson": Poisson, "hinge": Hinge, "squared_hinge": SquaredHinge,
    "categorical_hinge": CategoricalHinge, "binary_crossentropy": BinaryCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "precision": Precision, "recall": Recall, "auc": AUC, "mean": Mean, "sum": Sum,
}


def valid_names() -> list[str]:
    return ["accuracy", "acc"] + sorted(_NAMES) + sorted(c for c in _CLASSES
                                                         if c != "MeanMetricWrapper")


def serialize(metric: Any) -> Any:
    if isinstance(metric, str) or metric is None:
        return metric
    if isinstance(metric, Metric):
        return {"module": "kiln.metrics" if type(metric).__name__ in _CLASSES else
                type(metric).__module__, "class_name": type(metric).__name__,
                "config": metric.get_config(), "registered_name": None}
    return getattr(metric, "__name__", repr(metric))


def deserialize(config: Any, custom_objects: dict | None = None) -> Any:
    if isinstance(config, str):
        if custom_objects and config in custom_objects:
            return custom_objects[config]
        return config if config.lower() in ("accuracy", "acc") else get(config)
    from kiln.models.model import instantiate

    return instantiate(config, _CLASSES, custom_objects, "metrics")


def get(identifier: Any) -> Metric:
    """Resolves a metric to a :class:`Metric` object.

    Args:
        identifier: a name (``"mae"``, ``"sparse_categorical_accuracy"``, ``"AUC"`` ...; the
            shape-dependent ``"accuracy"`` is resolved by ``Model.compile``), a config dict,
            a Metric, or a callable ``fn(y_true, y_pred)`` returning per-sample values.

    Raises:
        ValueError: for an unknown name (listing the valid ones); TypeError for other types.
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        if identifier in _NAMES:
            return _NAMES[identifier](name=identifier)
        if identifier in _CLASSES and identifier != "MeanMetricWrapper":
            return _CLASSES[identifier]()
        raise ValueError(f"Unknown metric {identifier!r}. Valid names: "
                         f"{', '.join(valid_names())}")
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        return identifier()
    if callable(identifier):
        return MeanMetricWrapper(identifier, name=getattr(identifier, "__name__", None))
    raise TypeError(f"Could not interpret metric identifier {identifier!r} "
                    f"({type(identifier).__name__}); pass a name, a Metric or a callable")


def accuracy_for(identifier: str, loss: Any, y_true_shape: tuple, y_true_int: bool,
                 y_pred_shape: tuple) -> Metric:
    """Resolves ``"accuracy"``/``"acc"`` like Keras: by the loss when it decides (binary,
    categorical or sparse categorical cross-entropy), else by the shapes."""
    name = identifier
    if _losses.is_sparse_categorical(loss):
        return SparseCategoricalAccuracy(name=name)
    if _losses.is_binary_crossentropy(loss):
        return BinaryAccuracy(name=name)
    if _losses.is_categorical_crossentropy(loss):
        return CategoricalAccuracy(name=name)
    if y_pred_shape and y_pred_shape[-1] == 1:
        return BinaryAccuracy(name=name)
    if len(y_true_shape) < len(y_pred_shape) or (
            y_true_shape and y_true_shape[-1] == 1 and len(y_true_shape) == len(y_pred_shape)):
        return SparseCategoricalAccuracy(name=name)
    return CategoricalAccuracy(name=name)


__all__ = [*sorted(_CLASSES), "Metric", "binary_accuracy", "categorical_accuracy",
           "sparse_categorical_accuracy", "top_k_categorical_accuracy",
           "sparse_top_k_categorical_accuracy", "get", "serialize", "deserialize",
           "mean_stats"]
