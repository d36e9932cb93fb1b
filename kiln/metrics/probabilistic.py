"""Probabilistic metrics (the means of the probabilistic and hinge losses): cross-entropies,
KL divergence, Poisson, hinge."""

from __future__ import annotations

from kiln.losses import hinges as _hinge
from kiln.losses import probabilistic as _losses
from kiln.metrics.base import wrapper_class

KLDivergence = wrapper_class("KLDivergence", _losses.kl_divergence, "kl_divergence", {},
                             "Kullback-Leibler divergence.")
Poisson = wrapper_class("Poisson", _losses.poisson, "poisson", {}, "Poisson deviance term.")
BinaryCrossentropy = wrapper_class("BinaryCrossentropy", _losses.binary_crossentropy,
                                   "binary_crossentropy",
                                   {"from_logits": False, "label_smoothing": 0.0},
                                   "Binary cross-entropy as a metric.")
CategoricalCrossentropy = wrapper_class(
    "CategoricalCrossentropy", _losses.categorical_crossentropy, "categorical_crossentropy",
    {"from_logits": False, "label_smoothing": 0.0}, "Categorical cross-entropy as a metric.")
SparseCategoricalCrossentropy = wrapper_class(
    "SparseCategoricalCrossentropy", _losses.sparse_categorical_crossentropy,
    "sparse_categorical_crossentropy", {"from_logits": False, "ignore_class": None},
    "Sparse categorical cross-entropy as a metric.")
Hinge = wrapper_class("Hinge", _hinge.hinge, "hinge", {}, "Hinge loss as a metric.")
SquaredHinge = wrapper_class("SquaredHinge", _hinge.squared_hinge, "squared_hinge", {},
                             "Squared hinge loss as a metric.")
CategoricalHinge = wrapper_class("CategoricalHinge", _hinge.categorical_hinge,
                                 "categorical_hinge", {}, "Categorical hinge loss as a metric.")
