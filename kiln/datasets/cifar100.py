"""CIFAR-100 small images, loaded like ``keras.datasets.cifar100``.

50,000 training and 10,000 test 32x32 colour images in 100 fine classes grouped in 20
coarse ones, by Alex Krizhevsky (2009). Found and checked like CIFAR-10 (see
``kiln/datasets/cifar10.py``): the extracted ``cifar-100-python/`` folder or the
``cifar-100-python.tar.gz`` archive (read in place), else downloaded from
``$KILN_DATASETS_MIRROR/cifar100/`` or :data:`BASE_URL`; never unpickled.
"""

from __future__ import annotations

import os

import numpy as np

from kiln.datasets import _cifar, cifar10

BASE_URL = "https://www.cs.toronto.edu/~kriz/"
ARCHIVE = "cifar-100-python.tar.gz"
ARCHIVE_SHA256 = "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7"
FOLDER = "cifar-100-python"


def load_data(label_mode: str = "fine", path: str | os.PathLike[str] | None = None
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load CIFAR-100, like ``keras.datasets.cifar100.load_data``.

    Args:
        label_mode: ``"fine"`` (100 classes) or ``"coarse"`` (20 superclasses).
        path: kiln's addition: a ``cifar-100-python`` folder, the archive, or a folder
            holding one; None searches, then downloads.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``x`` uint8 ``(n, 32, 32, 3)``, ``y``
        int64 ``(n, 1)``.

    Raises:
        ValueError: A bad ``label_mode`` or a damaged file.
        DatasetNotFoundError: Not on disk and not downloadable.

    Example:
        >>> from kiln.datasets import cifar100
        >>> (x_train, y_train), _ = cifar100.load_data(label_mode="coarse")  # doctest: +SKIP
        >>> int(y_train.max())  # doctest: +SKIP
        19
    """
    if label_mode not in ("fine", "coarse"):
        raise ValueError("cifar100.load_data: label_mode must be one of 'fine', 'coarse'; "
                         f"received {label_mode!r}")
    source, _ = cifar10.find("cifar100", "CIFAR-100", path, (ARCHIVE, FOLDER), None,
                             ARCHIVE_SHA256, BASE_URL)
    key = f"{label_mode}_labels"
    out = []
    for part in ("train", "test"):
        x, y = _cifar.parse_python_batch(source.read(part), key, f"{source.path}: {part}")
        out.append((_cifar.channels_last(x), y.reshape(-1, 1)))
    return out[0], out[1]
