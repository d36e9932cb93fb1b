"""Fashion-MNIST (Zalando Research), loaded like ``keras.datasets.fashion_mnist``.

60,000 training and 10,000 test 28x28 grayscale images of clothing in 10 classes
(see :data:`CLASS_NAMES`). On Debian and Ubuntu, ``apt-get install dataset-fashion-mnist``
puts the files in ``/usr/share/datasets/fashion-mnist``, which is searched.
"""

from __future__ import annotations

import os
from pathlib import Path

from kiln.datasets import _idx, _source

# Canonical mirror. Overridden by $KILN_DATASETS_MIRROR.
BASE_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"

# sha256 of the upstream gz files (published md5s 8d4fb7e6..., 25c81989..., bef4ecab...,
# bb300cfd...). Debian's dataset-fashion-mnist recompresses them (gz sha256 b0564c3e...,
# 0ae29f65..., cc1d090a..., 8d3605d1...); any gz whose payload matches RAW_SHA256 is accepted.
SHA256 = {
    "train-images-idx3-ubyte.gz": (
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"
    ),
    "train-labels-idx1-ubyte.gz": (
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"
    ),
    "t10k-images-idx3-ubyte.gz": (
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"
    ),
    "t10k-labels-idx1-ubyte.gz": (
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"
    ),
}
# sha256 of the decompressed idx files (same for the upstream and the Debian files).
RAW_SHA256 = {
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
SYSTEM_DIRS: tuple[Path, ...] = (Path("/usr/share/datasets/fashion-mnist"),)
CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
HOW_TO_GET = (
    "apt-get install dataset-fashion-mnist   (Debian/Ubuntu; installs the files into "
    "/usr/share/datasets/fashion-mnist)",
    "python -m kiln.datasets install fashion_mnist   (downloads from the mirror)",
)


def dataset() -> _source.Dataset:
    """The Fashion-MNIST description used by the loader (reads this module's constants)."""
    return _source.Dataset(
        name="fashion-mnist",
        title="Fashion-MNIST",
        npz_name="fashion-mnist.npz",
        base_url=BASE_URL,
        sha256=SHA256,
        raw_sha256=RAW_SHA256,
        system_dirs=SYSTEM_DIRS,
        how_to_get=HOW_TO_GET,
    )


def load_data(path: str | os.PathLike[str] | None = None) -> _idx.Splits:
    """Load Fashion-MNIST, like ``keras.datasets.fashion_mnist.load_data``.

    Searched in order: ``path`` (a folder, or an ``.npz`` file),
    ``$KILN_DATA_DIR/fashion-mnist``, ``$KILN_DATA_DIR``, ``~/.kiln/datasets/fashion-mnist``,
    ``/usr/share/datasets/fashion-mnist``. A folder must hold the four idx files
    (``train-images-idx3-ubyte.gz`` or ``train-images.idx3-ubyte`` style, gzipped or not)
    or a ``fashion-mnist.npz`` with Keras' keys. If none is found, the gz files are
    downloaded from ``$KILN_DATASETS_MIRROR/fashion-mnist/`` or :data:`BASE_URL` into
    ``$KILN_DATA_DIR/fashion-mnist`` (else ``~/.kiln/datasets/fashion-mnist``), checked
    against :data:`SHA256` / :data:`RAW_SHA256`.

    Args:
        path: Optional folder or ``.npz`` file to look in first.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``uint8`` arrays of shapes
        ``(60000, 28, 28)``, ``(60000,)``, ``(10000, 28, 28)``, ``(10000,)``; labels index
        :data:`CLASS_NAMES`.

    Raises:
        DatasetNotFoundError: (a ``FileNotFoundError``) nothing found and no download;
            the message lists every place looked in and how to get the files.
        ValueError: A file is not a valid idx/npz file, or a download failed its checksum.

    Example:
        >>> from kiln.datasets import fashion_mnist
        >>> (x_train, y_train), _ = fashion_mnist.load_data()  # doctest: +SKIP
        >>> fashion_mnist.CLASS_NAMES[y_train[0]]  # doctest: +SKIP
        'Ankle boot'
    """
    return _source.load(dataset(), path)


def install(target: str | os.PathLike[str] | None = None) -> Path:
    """Download the four gz files (those not already there) from the mirror.

    Args:
        target: Destination folder; default ``$KILN_DATA_DIR/fashion-mnist`` or
            ``~/.kiln/datasets/fashion-mnist``.

    Returns:
        The folder holding the files.

    Raises:
        DownloadError: (an ``OSError``) the mirror could not be reached.
        ValueError: A file failed its checksum.

    Example:
        >>> from kiln.datasets import fashion_mnist
        >>> fashion_mnist.install("/data/fashion-mnist")  # doctest: +SKIP
        PosixPath('/data/fashion-mnist')
    """
    folder = Path(target).expanduser() if target else None
    return _source.fetch(dataset(), folder)
