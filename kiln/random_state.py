"""Process-wide random state: one seed makes weight initialization, dropout and shuffling
reproducible (``kiln.utils.set_random_seed``)."""

from __future__ import annotations

import random

import numpy as np

_state: dict = {"seed": None, "rng": np.random.default_rng(), "draws": 0}


def set_seed(seed: int) -> None:
    """Seeds kiln's generators (and Python's and NumPy's legacy global ones)."""
    seed = int(seed)
    _state["seed"] = seed
    _state["rng"] = np.random.default_rng(seed)
    _state["draws"] = 0
    random.seed(seed)
    np.random.seed(seed % (2**32))


def numpy_rng() -> np.random.Generator:
    """The generator behind initializers and shuffling."""
    return _state["rng"]


def next_seed() -> int:
    """A fresh 31-bit seed drawn from the generator (for a model's dropout stream)."""
    return int(_state["rng"].integers(0, 2**31 - 1))
