"""Utilities: seeding, padding sequences and (with the viz extra) pictures of models and
training."""

from __future__ import annotations

from kiln.random_state import set_seed as _set_seed
from kiln.utils.plot import plot_history, plot_model
from kiln.utils.sequence import pad_sequences


def set_random_seed(seed: int) -> None:
    """Makes weight initialization, dropout and shuffling reproducible.

    Two runs of the same script with the same seed give bit-identical weights.

    Example:
        >>> kiln.utils.set_random_seed(42)
    """
    _set_seed(seed)


__all__ = ["set_random_seed", "plot_model", "plot_history", "pad_sequences"]
