"""The shared steps of Keras' regression datasets (``boston_housing``, ``california_housing``):
read ``x`` and ``y`` from an ``.npz`` without pickles, shuffle with ``RandomState(seed)``,
split off the last ``test_split`` fraction."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from kiln.datasets import _keras_file, _npz

# boston_housing.npz and california_housing.npz are under 2 MB uncompressed.
MAX_MEMBER_BYTES = 32 * _npz.MiB


def read_xy(path: Path, title: str) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` of a Keras regression ``.npz`` (numeric arrays, never unpickled).

    Raises:
        ValueError: Not an ``.npz``, a missing array, object arrays, or ``x``/``y`` of
            different lengths; names the file.
    """
    try:
        arrays = _npz.read_all(path, ("x", "y"), MAX_MEMBER_BYTES)
        x, y = arrays["x"], arrays["y"]
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a usable {title} .npz file ({exc})") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not a usable {title} .npz file: {exc}") from exc
    if x.ndim == 0 or y.ndim == 0 or len(x) != len(y):
        raise ValueError(f"{path}: x of shape {x.shape} and y of shape {y.shape} do not have "
                         "the same number of samples")
    return x, y


def shuffle_split(x: np.ndarray, y: np.ndarray, test_split: float, seed: int | None,
                  what: str) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray,
                                                                          np.ndarray]]:
    """Keras' order: one ``RandomState(seed)`` shuffle, then the first ``1 - test_split``
    fraction is the training set."""
    cut = _keras_file.split_index(len(x), test_split, what)
    rng = np.random.RandomState(seed)
    indices = np.arange(len(x))
    rng.shuffle(indices)
    x, y = x[indices], y[indices]
    return (np.array(x[:cut]), np.array(y[:cut])), (np.array(x[cut:]), np.array(y[cut:]))
