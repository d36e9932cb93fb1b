"""Boston housing prices (regression), loaded like ``keras.datasets.boston_housing``.

506 samples of 13 attributes of houses around Boston in the 1970s (Harrison & Rubinfeld,
1978, via StatLib / Carnegie Mellon University); the target is the median value of the
houses, in k$. Read from Keras' ``boston_housing.npz`` (found on disk or downloaded and checked,
see ``kiln/datasets/_keras_file.py``); never unpickled.
"""

from __future__ import annotations

import os

import numpy as np

from kiln.datasets import _keras_file, _regression

BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
NPZ_NAME = "boston_housing.npz"
NPZ_SHA256 = "f553886a1f8d56431e820c5b82552d9d95cfcb96d1e678153f8839538947dff5"


def load_data(path: str | os.PathLike[str] = NPZ_NAME, test_split: float = 0.2,
              seed: int | None = 113
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load the Boston housing data, like ``keras.datasets.boston_housing.load_data``.

    Args:
        path: File name, searched for in ``$KILN_DATA_DIR/boston_housing``,
            ``$KILN_DATA_DIR``, ``~/.kiln/datasets/boston_housing`` and ``~/.keras/datasets``;
            an absolute path is used as it is.
        test_split: Fraction of the (shuffled) samples kept as the test set, in [0, 1).
        seed: Seed of the shuffle (``np.random.RandomState(seed)``, as Keras).

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``x`` of shape ``(n, 13)``, ``y`` of
        shape ``(n,)`` (404 / 102 samples with the default split).

    Raises:
        DatasetNotFoundError: Not on disk and not downloadable.
        ValueError: A bad ``test_split`` or file.

    Example:
        >>> from kiln.datasets import boston_housing
        >>> (x_train, y_train), (x_test, y_test) = boston_housing.load_data()  # doctest: +SKIP
        >>> x_train.shape, x_test.shape  # doctest: +SKIP
        ((404, 13), (102, 13))
    """
    _keras_file.split_index(1, test_split, "boston_housing.load_data")
    found = _keras_file.find("boston_housing", "Boston housing", path, NPZ_NAME, NPZ_SHA256,
                             BASE_URL)
    x, y = _regression.read_xy(found, "Boston housing")
    return _regression.shuffle_split(x, y, test_split, seed, "boston_housing.load_data")
