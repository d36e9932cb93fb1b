"""California housing prices (regression), loaded like ``keras.datasets.california_housing``.

20,640 districts of the 1990 California census with 8 attributes (Pace & Barry, 1997, via
StatLib); the target is the median house value in dollars. ``version="small"`` keeps the
first 600 samples, as Keras does. Read from Keras' ``california_housing.npz`` (found on disk
or downloaded and checked, see ``kiln/datasets/_keras_file.py``); never unpickled.
"""

from __future__ import annotations

import os

import numpy as np

from kiln.datasets import _keras_file, _regression

BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
NPZ_NAME = "california_housing.npz"
NPZ_SHA256 = "1a2e3a52e0398de6463aebe6f4a8da34fb21fbb6b934cf88c3425e766f2a1a6f"
SMALL = 600  # samples kept by version="small"


def load_data(version: str = "large", path: str | os.PathLike[str] = NPZ_NAME,
              test_split: float = 0.2, seed: int | None = 113
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load the California housing data, like ``keras.datasets.california_housing.load_data``.

    Args:
        version: ``"large"`` (all 20,640 samples) or ``"small"`` (the first 600).
        path: File name, searched for like ``boston_housing``'s (folder
            ``california_housing``); an absolute path is used as it is.
        test_split: Fraction of the (shuffled) samples kept as the test set, in [0, 1).
        seed: Seed of the shuffle (``np.random.RandomState(seed)``).

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``x`` of shape ``(n, 8)``, ``y`` of
        shape ``(n,)``.

    Raises:
        DatasetNotFoundError: Not on disk and not downloadable.
        ValueError: A bad ``version``, ``test_split`` or file.

    Example:
        >>> from kiln.datasets import california_housing
        >>> (x_train, y_train), _ = california_housing.load_data(version="small")  # doctest: +SKIP
        >>> x_train.shape  # doctest: +SKIP
        (480, 8)
    """
    if version not in ("small", "large"):
        raise ValueError("california_housing.load_data: version must be one of 'small', "
                         f"'large'; received version={version!r}")
    _keras_file.split_index(1, test_split, "california_housing.load_data")
    found = _keras_file.find("california_housing", "California housing", path, NPZ_NAME,
                             NPZ_SHA256, BASE_URL)
    x, y = _regression.read_xy(found, "California housing")
    if version == "small":
        x, y = x[:SMALL], y[:SMALL]
    return _regression.shuffle_split(x, y, test_split, seed, "california_housing.load_data")
