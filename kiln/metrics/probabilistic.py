"""Probabilistic metrics (the means of the probabilistic and hinge losses): cross-entropies,
KL divergence, Poisson, hinge."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.losses import hinges as _hinge
from kiln.losses import probabilistic as _losses
from kiln.metrics.base import mean_stats, wrapper_class

KLDivergence = wrapper_class("KLDivergence", _losses.kl_divergence, "kl_divergence", {},
                             "Kullback-Leibler divergence.")
Poisson = wrapper_class("Poisson", _losses.poisson, "poisson", {}, "Poisson deviance term.")
BinaryCrossentropy = wrapper_class("BinaryCrossentropy", _losses.binary_crossentropy,
                                   "binary_crossentropy",
                                   {"from_logits": False, "label_smoothing": 0.0},
                                   "Binary cross-entropy as a metric.")
CategoricalCrossentropy = wrapper_class(
    "CategoricalCrossentropy", _losses.categorical_crossentropy, "categorical_crossentropy",
    {"from_logits": False, "label_smoothing": 0.0, "axis": -1},
    "Categorical cross-entropy as a metric.")
SparseCategoricalCrossentropy = wrapper_class(
    "SparseCategoricalCrossentropy", _losses.sparse_categorical_crossentropy,
    "sparse_categorical_crossentropy", {"from_logits": False, "ignore_class": None, "axis": -1},
    "Sparse categorical cross-entropy as a metric (``ignore_class``: see below).")


def _ignored_class_stats(self: Any, y_true: Node, y_pred: Node,
                         sample_weight: Node | None = None) -> list[Node]:
    """Keras 3.15's rule for ``ignore_class`` (measured on its JAX and TensorFlow backends):
    an ignored label's value is 0; without sample weights the mean is over all labels, with
    them the ignored labels' weights are 0 (the mean is over the others)."""
    ignore = self._fn_kwargs.get("ignore_class")
    values = self._fn(y_true, y_pred, **self._fn_kwargs)
    if ignore is None or sample_weight is None:
        return mean_stats(values, sample_weight)
    labels = y_true if y_true.ndim == values.ndim else K.squeeze(y_true, -1)
    keep = K.cast(K.not_equal(K.cast(labels, "int64"), K.cast(ignore, "int64")), values.dtype)
    return mean_stats(values, keep * K.cast(sample_weight, values.dtype))


SparseCategoricalCrossentropy.stats = _ignored_class_stats  # type: ignore[method-assign]
Hinge = wrapper_class("Hinge", _hinge.hinge, "hinge", {}, "Hinge loss as a metric.")
SquaredHinge = wrapper_class("SquaredHinge", _hinge.squared_hinge, "squared_hinge", {},
                             "Squared hinge loss as a metric.")
CategoricalHinge = wrapper_class("CategoricalHinge", _hinge.categorical_hinge,
                                 "categorical_hinge", {}, "Categorical hinge loss as a metric.")
