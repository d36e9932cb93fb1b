"""Metrics (Keras 3 names and semantics) computed as graph statistics.

A metric splits into two halves: ``stats(...)`` builds graph nodes for one batch's sufficient
statistics (the trainer adds them to the training/test graph), and ``merge(values)`` /
``result()`` accumulate them and compute the value in Python. ``update_state`` on NumPy arrays
compiles the statistics once per input signature (:mod:`kiln.eager`) and merges them.

* :mod:`~kiln.metrics.base`: :class:`Metric`, :class:`Mean`, :class:`Sum`,
  :class:`MeanMetricWrapper`;
* :mod:`~kiln.metrics.accuracy`: binary, categorical, sparse and top-k accuracies;
* :mod:`~kiln.metrics.regression`, :mod:`~kiln.metrics.probabilistic`: the losses as metrics;
* :mod:`~kiln.metrics.confusion`: Precision, Recall, true/false positives/negatives;
* :mod:`~kiln.metrics.auc`: AUC;
* :mod:`~kiln.metrics.constrained`: sensitivity/specificity/precision/recall at a constraint;
* :mod:`~kiln.metrics.f_score`: F1, F-beta and R2 scores;
* :mod:`~kiln.metrics.iou`: IoU, MeanIoU, BinaryIoU, OneHotIoU, OneHotMeanIoU;
* :mod:`~kiln.metrics.correlation`: cosine similarity, Pearson and concordance correlation;
* :mod:`~kiln.metrics.stateful`: Keras-style metrics with variables (``add_variable``);
* :mod:`~kiln.metrics.lookup`: :func:`get`, :func:`serialize`, :func:`deserialize`.

Example:
    >>> m = kiln.metrics.SparseCategoricalAccuracy()
    >>> m.update_state([1, 2], [[0.1, 0.9, 0.0], [0.8, 0.1, 0.1]])
    >>> m.result()
    0.5
"""

# Keras exports the loss functions under keras.metrics too: the same functions.
from kiln.losses import (
    binary_crossentropy,
    binary_focal_crossentropy,
    categorical_crossentropy,
    categorical_focal_crossentropy,
    categorical_hinge,
    hinge,
    huber,
    kl_divergence,
    log_cosh,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_squared_error,
    mean_squared_logarithmic_error,
    poisson,
    sparse_categorical_crossentropy,
    squared_hinge,
)
from kiln.losses.base import EPSILON, eager, squeeze_or_expand_to_same_rank
from kiln.metrics.accuracy import (
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
    binary_accuracy,
    categorical_accuracy,
    sparse_categorical_accuracy,
    sparse_top_k_categorical_accuracy,
    top_k_categorical_accuracy,
)
from kiln.metrics.auc import AUC
from kiln.metrics.base import Mean, MeanMetricWrapper, Metric, Sum, mean_stats
from kiln.metrics.confusion import (
    NEG_INF,
    FalseNegatives,
    FalsePositives,
    Precision,
    Recall,
    TrueNegatives,
    TruePositives,
)
from kiln.metrics.constrained import (
    PrecisionAtRecall,
    RecallAtPrecision,
    SensitivityAtSpecificity,
    SpecificityAtSensitivity,
)
from kiln.metrics.correlation import (
    ConcordanceCorrelation,
    CosineSimilarity,
    PearsonCorrelation,
    concordance_correlation,
    cosine_similarity,
    pearson_correlation,
)
from kiln.metrics.f_score import F1Score, FBetaScore, R2Score
from kiln.metrics.iou import BinaryIoU, IoU, MeanIoU, OneHotIoU, OneHotMeanIoU
from kiln.metrics.lookup import (
    accuracy_for,
    deserialize,
    get,
    serialize,
    valid_names,
)
from kiln.metrics.probabilistic import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    CategoricalHinge,
    Hinge,
    KLDivergence,
    Poisson,
    SparseCategoricalCrossentropy,
    SquaredHinge,
)
from kiln.metrics.regression import (
    LogCoshError,
    MeanAbsoluteError,
    MeanAbsolutePercentageError,
    MeanSquaredError,
    MeanSquaredLogarithmicError,
    RootMeanSquaredError,
)

__all__ = [
    "AUC", "BinaryAccuracy", "BinaryCrossentropy", "CategoricalAccuracy",
    "CategoricalCrossentropy", "CategoricalHinge", "FalseNegatives", "FalsePositives", "Hinge",
    "KLDivergence", "LogCoshError", "Mean", "MeanAbsoluteError", "MeanAbsolutePercentageError",
    "MeanMetricWrapper", "MeanSquaredError", "MeanSquaredLogarithmicError", "Poisson",
    "Precision", "Recall", "RootMeanSquaredError", "SparseCategoricalAccuracy",
    "SparseCategoricalCrossentropy", "SparseTopKCategoricalAccuracy", "SquaredHinge", "Sum",
    "TopKCategoricalAccuracy", "TrueNegatives", "TruePositives", "Metric", "binary_accuracy",
    "categorical_accuracy", "sparse_categorical_accuracy", "top_k_categorical_accuracy",
    "sparse_top_k_categorical_accuracy", "get", "serialize", "deserialize", "mean_stats",
    "accuracy_for", "valid_names", "eager", "EPSILON", "NEG_INF",
    "squeeze_or_expand_to_same_rank",
    "Accuracy", "PrecisionAtRecall",
    "RecallAtPrecision", "SensitivityAtSpecificity", "SpecificityAtSensitivity",
    "ConcordanceCorrelation", "CosineSimilarity", "PearsonCorrelation",
    "concordance_correlation", "cosine_similarity", "pearson_correlation", "F1Score",
    "FBetaScore", "R2Score", "IoU", "BinaryIoU", "MeanIoU", "OneHotIoU", "OneHotMeanIoU",
    # the loss functions, as keras.metrics exports them
    "binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy",
    "categorical_focal_crossentropy", "categorical_hinge", "hinge", "huber", "kl_divergence",
    "log_cosh", "mean_absolute_error", "mean_absolute_percentage_error", "mean_squared_error",
    "mean_squared_logarithmic_error", "poisson", "sparse_categorical_crossentropy",
    "squared_hinge",
]
