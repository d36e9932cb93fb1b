"""Process-wide random state: one seed makes weight initialization, dropout and shuffling
reproducible (``kiln.utils.set_random_seed``)."""

from __future__ import annotations

import random

import numpy as np

# The random layers' streams come from a generator of their own, derived from the seed (so a
# Dropout added to a model does not change the other layers' initial weights); before any
# set_seed it starts from this fixed tag, so a script builds the same streams in every process.
_STREAMS_TAG = 0x5EED_57AE

_state: dict = {"seed": None, "rng": np.random.default_rng(), "draws": 0,
                "streams": np.random.default_rng(_STREAMS_TAG)}


def set_seed(seed: int) -> None:
    """Seeds kiln's generators (and Python's and NumPy's legacy global ones)."""
    seed = int(seed)
    _state["seed"] = seed
    _state["rng"] = np.random.default_rng(seed)
    _state["streams"] = np.random.default_rng([_STREAMS_TAG, seed])
    _state["draws"] = 0
    random.seed(seed)
    np.random.seed(seed % (2**32))


def numpy_rng() -> np.random.Generator:
    """The generator behind initializers and shuffling."""
    return _state["rng"]


def next_seed() -> int:
    """A fresh 31-bit seed drawn from the generator (for a model's dropout stream)."""
    return int(_state["rng"].integers(0, 2**31 - 1))


def layer_stream() -> int:
    """The random stream (a 31-bit salt) of a random layer built without ``seed=``: Dropout,
    the recurrent cells' dropout, attention dropout. Drawn when the layer is constructed, so
    two models built alike after the same ``set_seed`` draw the same streams whatever their
    layers' automatic names ("dropout", "dropout_1" ...). Below 2**31: the config stores it as
    the layer's ``seed``, and Keras reads a seed as an int32."""
    return int(_state["streams"].integers(0, 2**31))
