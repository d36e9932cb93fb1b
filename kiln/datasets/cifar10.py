"""CIFAR-10 small images, loaded like ``keras.datasets.cifar10``.

50,000 training and 10,000 test 32x32 colour images in 10 classes (airplane, automobile,
bird, cat, deer, dog, frog, horse, ship, truck), by Alex Krizhevsky (2009, "Learning Multiple
Layers of Features from Tiny Images").

**Where the data comes from.** Searched in order: the ``path`` argument, ``$KILN_DATA_DIR/cifar10``,
``$KILN_DATA_DIR``, ``~/.kiln/datasets/cifar10`` and ``~/.keras/datasets`` (Keras' cache),
each for the extracted ``cifar-10-batches-py/`` folder or the ``cifar-10-python.tar.gz``
archive (read in place, never extracted), then for the binary version
(``cifar-10-batches-bin/``, ``cifar-10-binary.tar.gz``). Otherwise the archive is downloaded
from ``$KILN_DATASETS_MIRROR/cifar10/`` or :data:`BASE_URL` and checked against Keras'
sha256. No Debian or PyPI package ships CIFAR. The python version's pickles are never
unpickled (see ``kiln/datasets/_cifar.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from kiln import config
from kiln.datasets import _cifar, _fetch, _keras_file, _source

BASE_URL = "https://www.cs.toronto.edu/~kriz/"
ARCHIVE = "cifar-10-python.tar.gz"
ARCHIVE_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
FOLDER = "cifar-10-batches-py"
BINARY_ARCHIVE, BINARY_FOLDER = "cifar-10-binary.tar.gz", "cifar-10-batches-bin"
CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
               "truck")


def load_data(path: str | os.PathLike[str] | None = None
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load CIFAR-10, like ``keras.datasets.cifar10.load_data``.

    Args:
        path: kiln's addition: a ``cifar-10-batches-py`` (or ``-bin``) folder, a CIFAR-10
            archive, or a folder holding one. None searches the places listed in the module
            docstring, then downloads.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``x`` uint8 of shape ``(n, 32, 32, 3)``
        (channels last), ``y`` uint8 of shape ``(n, 1)`` with labels 0-9.

    Raises:
        DatasetNotFoundError: Not on disk and not downloadable.
        ValueError: A damaged file, or a pickle naming anything but numpy's arrays.

    Example:
        >>> from kiln.datasets import cifar10
        >>> (x_train, y_train), (x_test, y_test) = cifar10.load_data()  # doctest: +SKIP
        >>> x_train.shape, y_train.shape  # doctest: +SKIP
        ((50000, 32, 32, 3), (50000, 1))
    """
    source, binary = find("cifar10", "CIFAR-10", path, (ARCHIVE, FOLDER),
                          (BINARY_ARCHIVE, BINARY_FOLDER), ARCHIVE_SHA256, BASE_URL)
    xs, ys = [], []
    for i in range(1, 6):
        x, y = _read(source, binary, f"data_batch_{i}")
        xs.append(x)
        ys.append(y)
    x_test, y_test = _read(source, binary, "test_batch")
    x_train, y_train = np.concatenate(xs), np.concatenate(ys)
    return ((_cifar.channels_last(x_train), y_train.astype(np.uint8).reshape(-1, 1)),
            (_cifar.channels_last(x_test), y_test.astype(np.uint8).reshape(-1, 1)))


def _read(source: _cifar.Source, binary: bool, batch: str) -> tuple[np.ndarray, np.ndarray]:
    if binary:
        return _cifar.parse_binary_batch(source.read(f"{batch}.bin"), 1, 0,
                                         f"{source.path}: {batch}.bin")
    return _cifar.parse_python_batch(source.read(batch), "labels", f"{source.path}: {batch}")


def find(name: str, title: str, path: str | os.PathLike[str] | None,
         python: tuple[str, str], binary: tuple[str, str] | None, sha256: str,
         base_url: str) -> tuple[_cifar.Source, bool]:
    """The CIFAR copy to read (``(source, is_binary)``), found or downloaded."""
    places = _keras_file.places(name)
    if path is not None:
        given = Path(path).expanduser()
        if given.name in (python[1], python[0]) and given.exists():
            return _cifar.Source(given, python[1]), False
        if binary and given.name in binary and given.exists():
            return _cifar.Source(given, binary[1]), True
        places = [("path argument", given)]
    found, looked = _cifar.locate(name, python[0], python[1], places)
    if found is not None:
        return _cifar.Source(found, python[1]), False
    if binary:
        found, _ = _cifar.locate(name, binary[0], binary[1], places)
        if found is not None:
            return _cifar.Source(found, binary[1]), True
    target = _source.data_home() / name / python[0]
    env = config.env_url(_source.MIRROR_ENV)
    url = (f"{env.rstrip('/')}/{name}" if env else base_url.rstrip("/")) + "/" + python[0]
    if path is not None:
        problem = "a path argument is never downloaded to"
    elif config.env_flag(_source.OFFLINE_ENV):
        problem = f"downloads are disabled by {_source.OFFLINE_ENV}"
    else:
        created = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
        try:
            _fetch.download(url, target, sha256)
            return _cifar.Source(target, python[1]), False
        except _fetch.DownloadError as exc:
            problem = f"download from {url} into {target} failed: {exc}"
        finally:
            for folder in created:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
    raise _source.DatasetNotFoundError("\n".join([
        f"{title} was not found and could not be downloaded. Looked in:", *looked,
        f"Then {problem}.", "To get it:",
        f"  - on a machine with internet, download {base_url}{python[0]} (sha256 {sha256}) "
        f"and copy it (or its extracted {python[1]}/ folder) into $KILN_DATA_DIR/{name} or "
        f"~/.kiln/datasets/{name}; a Keras user's ~/.keras/datasets/ copy is found as it is",
        f"  - or set {_source.DATA_DIR_ENV} to the folder holding it, or pass path=...",
        f"  - or set {_source.MIRROR_ENV} to a mirror serving <mirror>/{name}/{python[0]}",
    ]))
