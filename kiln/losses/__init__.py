"""Losses (Keras 3 names, arguments and formulas), built from ``kiln.ops`` graph nodes.

A loss *function* ``fn(y_true, y_pred)`` returns per-sample values (the last axis reduced); a
loss *object* (``MeanSquaredError()``...) applies a sample weight and a reduction
(``"sum_over_batch_size"`` by default) and returns a scalar. Both accept symbolic tensors
(inside a model's training graph) or NumPy arrays (then the result is a NumPy value, computed
by a function compiled once per input signature: :mod:`kiln.eager`).

* :mod:`~kiln.losses.base`: :class:`Loss`, reductions, shared helpers;
* :mod:`~kiln.losses.regression`: squared/absolute/percentage/log errors, Huber, log-cosh,
  cosine similarity;
* :mod:`~kiln.losses.probabilistic`: cross-entropies, KL divergence, Poisson;
* :mod:`~kiln.losses.hinges`: hinge, squared hinge, categorical hinge;
* :mod:`~kiln.losses.focal`: binary and categorical focal cross-entropy;
* :mod:`~kiln.losses.overlap`: Dice, Tversky;
* :mod:`~kiln.losses.generalized`: the generalized cross-entropy;
* :mod:`~kiln.losses.sequence`: CTC; :mod:`~kiln.losses.metric_learning`: the Circle loss;
* :mod:`~kiln.losses.lookup`: :func:`get`, :func:`serialize`, :func:`deserialize`.

Example:
    >>> loss = kiln.losses.SparseCategoricalCrossentropy(from_logits=True)
    >>> kiln.losses.get("mse")
    <function mean_squared_error ...>
"""

from kiln.losses.base import (
    EPSILON,
    REDUCTIONS,
    Loss,
    LossFunctionWrapper,
    eager,
    reduce_weighted_values,
    squeeze_or_expand_to_same_rank,
    standardize_reduction,
)
from kiln.losses.focal import (
    BinaryFocalCrossentropy,
    CategoricalFocalCrossentropy,
    binary_focal_crossentropy,
    categorical_focal_crossentropy,
)
from kiln.losses.generalized import (
    CategoricalGeneralizedCrossEntropy,
    categorical_generalized_cross_entropy,
)
from kiln.losses.hinges import (
    CategoricalHinge,
    Hinge,
    SquaredHinge,
    categorical_hinge,
    hinge,
    squared_hinge,
)
from kiln.losses.lookup import (
    as_loss_object,
    deserialize,
    get,
    is_binary_crossentropy,
    is_categorical_crossentropy,
    is_sparse_categorical,
    serialize,
    target_rule,
)
from kiln.losses.metric_learning import Circle, circle
from kiln.losses.overlap import Dice, Tversky, dice, tversky
from kiln.losses.probabilistic import (
    BinaryCrossentropy,
    CategoricalCrossentropy,
    KLDivergence,
    Poisson,
    SparseCategoricalCrossentropy,
    binary_crossentropy,
    categorical_crossentropy,
    kl_divergence,
    poisson,
    sparse_categorical_crossentropy,
)
from kiln.losses.regression import (
    CosineSimilarity,
    Huber,
    LogCosh,
    MeanAbsoluteError,
    MeanAbsolutePercentageError,
    MeanSquaredError,
    MeanSquaredLogarithmicError,
    cosine_similarity,
    huber,
    log_cosh,
    mean_absolute_error,
    mean_absolute_percentage_error,
    mean_squared_error,
    mean_squared_logarithmic_error,
)
from kiln.losses.sequence import CTC, ctc

__all__ = [
    "Loss", "LossFunctionWrapper", "binary_crossentropy", "categorical_crossentropy",
    "categorical_hinge", "cosine_similarity", "hinge", "huber", "kl_divergence", "log_cosh",
    "mean_absolute_error", "mean_absolute_percentage_error", "mean_squared_error",
    "mean_squared_logarithmic_error", "poisson", "sparse_categorical_crossentropy",
    "squared_hinge", "BinaryCrossentropy", "CategoricalCrossentropy", "CategoricalHinge",
    "CosineSimilarity", "Hinge", "Huber", "KLDivergence", "LogCosh", "MeanAbsoluteError",
    "MeanAbsolutePercentageError", "MeanSquaredError", "MeanSquaredLogarithmicError",
    "Poisson", "SparseCategoricalCrossentropy", "SquaredHinge", "get", "serialize",
    "deserialize", "reduce_weighted_values", "squeeze_or_expand_to_same_rank", "EPSILON",
    "REDUCTIONS", "as_loss_object", "eager", "is_binary_crossentropy",
    "is_categorical_crossentropy", "is_sparse_categorical", "standardize_reduction",
    "target_rule",
    "BinaryFocalCrossentropy", "CategoricalFocalCrossentropy", "binary_focal_crossentropy",
    "categorical_focal_crossentropy", "Dice", "Tversky", "dice", "tversky",
    "CategoricalGeneralizedCrossEntropy", "categorical_generalized_cross_entropy",
    "CTC", "Circle", "ctc", "circle",
]
