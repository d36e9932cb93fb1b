"""Helpers for the model tests."""

from __future__ import annotations

import numpy as np


def blobs(n: int = 600, classes: int = 10, features: int = 8, spread: float = 4.0,
          seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded Gaussian blobs: ``classes`` centers, unit noise."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, features)) * spread
    y = rng.integers(0, classes, n)
    x = (centers[y] + rng.normal(size=(n, features))).astype("float32")
    return x, y


def weights_equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))
