"""Finding metrics by name: :func:`get`, :func:`serialize`, :func:`deserialize`, and the
resolution of ``"accuracy"`` by the loss and the shapes (:func:`accuracy_for`)."""

from __future__ import annotations

from typing import Any

from kiln.losses import lookup as _losses
from kiln.losses.lookup import defined_in, find_class
from kiln.metrics import (
    accuracy,
    auc,
    base,
    confusion,
    constrained,
    correlation,
    f_score,
    iou,
    probabilistic,
    regression,
)
from kiln.metrics.base import MeanMetricWrapper, Metric

_CLASSES: dict[str, type[Metric]] = defined_in(
    (base, accuracy, regression, probabilistic, confusion, auc, constrained, correlation,
     f_score, iou),
    lambda o: isinstance(o, type) and issubclass(o, Metric) and o is not Metric, own=False)

# string name -> metric class (instantiated with name=<the string>, like Keras 3's logs)
_NAMES: dict[str, type[Metric]] = {alias: _CLASSES[name] for alias, name in {
    "binary_accuracy": "BinaryAccuracy", "categorical_accuracy": "CategoricalAccuracy",
    "sparse_categorical_accuracy": "SparseCategoricalAccuracy",
    "top_k_categorical_accuracy": "TopKCategoricalAccuracy",
    "sparse_top_k_categorical_accuracy": "SparseTopKCategoricalAccuracy",
    "mean_squared_error": "MeanSquaredError", "mse": "MeanSquaredError",
    "mean_absolute_error": "MeanAbsoluteError", "mae": "MeanAbsoluteError",
    "mean_absolute_percentage_error": "MeanAbsolutePercentageError",
    "mape": "MeanAbsolutePercentageError",
    "mean_squared_logarithmic_error": "MeanSquaredLogarithmicError",
    "msle": "MeanSquaredLogarithmicError", "root_mean_squared_error": "RootMeanSquaredError",
    "logcosh": "LogCoshError", "log_cosh": "LogCoshError", "kl_divergence": "KLDivergence",
    "kld": "KLDivergence", "poisson": "Poisson", "hinge": "Hinge", "squared_hinge": "SquaredHinge",
    "categorical_hinge": "CategoricalHinge", "binary_crossentropy": "BinaryCrossentropy",
    "categorical_crossentropy": "CategoricalCrossentropy",
    "sparse_categorical_crossentropy": "SparseCategoricalCrossentropy",
    "precision": "Precision", "recall": "Recall", "auc": "AUC", "mean": "Mean", "sum": "Sum",
    "cosine_similarity": "CosineSimilarity", "pearson_correlation": "PearsonCorrelation",
    "concordance_correlation": "ConcordanceCorrelation", "f1_score": "F1Score",
    "fbeta_score": "FBetaScore", "r2_score": "R2Score",
}.items()}


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
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"metrics.deserialize: could not interpret {config!r}")
    cls = find_class(config.get("registered_name") or config["class_name"], _CLASSES, Metric,
                     custom_objects, "metric")
    return cls.from_config(dict(config.get("config", {})))


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
        return _CLASSES["SparseCategoricalAccuracy"](name=name)
    if _losses.is_binary_crossentropy(loss):
        return _CLASSES["BinaryAccuracy"](name=name)
    if _losses.is_categorical_crossentropy(loss):
        return _CLASSES["CategoricalAccuracy"](name=name)
    if y_pred_shape and y_pred_shape[-1] == 1:
        return _CLASSES["BinaryAccuracy"](name=name)
    if len(y_true_shape) < len(y_pred_shape) or (
            y_true_shape and y_true_shape[-1] == 1 and len(y_true_shape) == len(y_pred_shape)):
        return _CLASSES["SparseCategoricalAccuracy"](name=name)
    return _CLASSES["CategoricalAccuracy"](name=name)
