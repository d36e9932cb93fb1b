"""Reuters newswire topics, loaded like ``keras.datasets.reuters``.

11,228 newswires from Reuters (the Reuters-21578 collection), labelled over 46 topics, each a
list of word indices ranked by frequency. :func:`load_data` reads Keras' ``reuters.npz`` and
applies Keras' steps (one shuffle of all newswires with ``RandomState(seed)``,
``start_char``/``index_from``, ``maxlen``, ``num_words``/``skip_top``, then the
``test_split`` cut) with the same results; :func:`get_word_index` reads
``reuters_word_index.json``; :func:`get_label_names` names the 46 topics.

The file is found on disk or downloaded and checked (see ``kiln/datasets/_keras_file.py``).
Its ``x`` is a numpy object array, which ``.npy`` stores as a pickle: it goes through the same
restricted unpickler as IMDB's (``kiln/datasets/imdb.py``), which runs nothing from the file.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from kiln.datasets import _keras_file, imdb

BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
NPZ_NAME = "reuters.npz"
WORD_INDEX_NAME = "reuters_word_index.json"
NPZ_SHA256 = "d6586e694ee56d7a4e65172e12b3e987c03096cb01eab99753921ef915959916"
WORD_INDEX_MD5 = "4d44cc38712099c9e383dc6e5f11a921"
LABEL_NAMES = (
    "cocoa", "grain", "veg-oil", "earn", "acq", "wheat", "copper", "housing", "money-supply",
    "coffee", "sugar", "trade", "reserves", "ship", "cotton", "carcass", "crude", "nat-gas",
    "cpi", "money-fx", "interest", "gnp", "meal-feed", "alum", "oilseed", "gold", "tin",
    "strategic-metal", "livestock", "retail", "ipi", "iron-steel", "rubber", "heat", "jobs",
    "lei", "bop", "zinc", "orange", "pet-chem", "dlr", "gas", "silver", "wpi", "hog", "lead",
)


def _find(path: str | os.PathLike[str], default_name: str, digest: str) -> Path:
    return _keras_file.find("reuters", "Reuters", path, default_name, digest, BASE_URL)


def read_npz(path: str | os.PathLike[str]) -> tuple[list[list[int]], np.ndarray]:
    """Read Keras' ``reuters.npz`` (``x``: object array of lists of ints, ``y``: labels)
    without unpickling anything but numpy's array reconstruction.

    Raises:
        ValueError: Not a usable file (names it and what is wrong).
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            missing = [k for k in ("x", "y") if f"{k}.npy" not in names]
            if missing:
                raise ValueError(f"missing arrays {missing}; expected keys ['x', 'y']")
            x, y = imdb._read_member(archive, "x"), imdb._read_member(archive, "y")
        xs, labels = imdb._reviews("x", x), imdb._labels("y", y)
        if len(xs) != len(labels):
            raise ValueError(f"{len(xs)} newswires but {len(labels)} labels")
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a usable Reuters .npz file ({exc})") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not a usable Reuters .npz file: {exc}") from exc
    return xs, labels


def load_data(path: str | os.PathLike[str] = NPZ_NAME, num_words: int | None = None,
              skip_top: int = 0, maxlen: int | None = None, test_split: float = 0.2,
              seed: int | None = 113, start_char: int | None = 1, oov_char: int | None = 2,
              index_from: int = 3
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load the Reuters newswires, like ``keras.datasets.reuters.load_data``.

    Keras' steps in its order: shuffle all newswires with ``np.random.RandomState(seed)``;
    prepend ``start_char`` and add ``index_from`` to every word; with ``maxlen``, keep the
    newswires shorter than ``maxlen`` (``start_char`` included); every word outside
    ``skip_top <= w < num_words`` becomes ``oov_char`` (dropped when it is None; ``num_words``
    None means the largest index present); the first ``1 - test_split`` fraction is the
    training set.

    Args:
        path: File name, searched for in ``$KILN_DATA_DIR/reuters``, ``$KILN_DATA_DIR``,
            ``~/.kiln/datasets/reuters`` and ``~/.keras/datasets``; or an absolute path.
        num_words: Keep the words of index below ``num_words``.
        skip_top: Replace the words of index below ``skip_top``.
        maxlen: Drop the newswires not shorter than this; None or 0 keeps all.
        test_split: Fraction kept as the test set, in [0, 1).
        seed: Seed of the shuffle.
        start_char: Index put at the start of each newswire; None for none.
        oov_char: Index of the replaced words; None drops them.
        index_from: Added to every word index of the file.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``x`` 1-D object arrays of lists of
        ``int``, ``y`` integer topic labels (0 to 45, see :func:`get_label_names`).

    Raises:
        DatasetNotFoundError: Not on disk and not downloadable.
        ValueError: A bad file or argument, or ``maxlen`` keeping no newswire.

    Example:
        >>> from kiln.datasets import reuters
        >>> (x_train, y_train), (x_test, y_test) = reuters.load_data(
        ...     num_words=10000)  # doctest: +SKIP
        >>> len(x_train), len(x_test)  # doctest: +SKIP
        (8982, 2246)
    """
    for name, value in (("num_words", num_words), ("maxlen", maxlen),
                        ("start_char", start_char), ("oov_char", oov_char),
                        ("skip_top", skip_top), ("index_from", index_from)):
        if value is not None:
            imdb._as_int(name, value)
    _keras_file.split_index(1, test_split, "reuters.load_data")
    xs, labels = read_npz(_find(path, NPZ_NAME, NPZ_SHA256))
    rng = np.random.RandomState(seed)
    indices = np.arange(len(xs))
    rng.shuffle(indices)
    xs, labels = [xs[i] for i in indices], labels[indices]
    if start_char is not None:
        xs = [[start_char] + [w + index_from for w in x] for x in xs]
    elif index_from:
        xs = [[w + index_from for w in x] for x in xs]
    if maxlen:
        keep = [i for i, x in enumerate(xs) if len(x) < maxlen]
        if not keep:
            raise ValueError(f"reuters.load_data: no newswire is shorter than maxlen={maxlen}; "
                             "increase maxlen")
        xs, labels = [xs[i] for i in keep], labels[keep]
    if not num_words:
        num_words = max((max(x) for x in xs if x), default=0)
    if oov_char is not None:
        xs = [[w if skip_top <= w < num_words else oov_char for w in x] for x in xs]
    else:
        xs = [[w for w in x if skip_top <= w < num_words] for x in xs]
    cut = int(len(xs) * (1 - test_split))
    return ((imdb._object_array(xs[:cut]), np.array(labels[:cut])),
            (imdb._object_array(xs[cut:]), np.array(labels[cut:])))


def get_word_index(path: str | os.PathLike[str] = WORD_INDEX_NAME) -> dict[str, int]:
    """Return the dict mapping each word to its index, like
    ``keras.datasets.reuters.get_word_index`` (add ``index_from`` to match :func:`load_data`).

    Raises:
        DatasetNotFoundError: Not found and no download.
        ValueError: Not a JSON object of ``str -> int``, or a failed md5 check.

    Example:
        >>> from kiln.datasets import reuters
        >>> words = {i + 3: w for w, i in reuters.get_word_index().items()}  # doctest: +SKIP
    """
    found = _find(path, WORD_INDEX_NAME, WORD_INDEX_MD5)
    try:
        with open(found, encoding="utf-8") as f:
            index = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{found}: not a JSON word index ({exc})") from exc
    if not isinstance(index, dict) or not all(
            isinstance(w, str) and type(i) is int for w, i in index.items()):
        raise ValueError(f"{found}: expected a JSON object mapping words to integer indices")
    return index


def get_label_names() -> tuple[str, ...]:
    """The 46 topic names, by label index (``get_label_names()[3] == "earn"``)."""
    return LABEL_NAMES
