"""IMDB movie-review sentiment, loaded like ``keras.datasets.imdb``.

25,000 training and 25,000 test reviews (Maas et al., 2011, "Learning Word Vectors for
Sentiment Analysis"), each a list of word indices ranked by frequency, labelled 0 (negative)
or 1 (positive). :func:`load_data` reads Keras' own ``imdb.npz`` and applies Keras' processing
(shuffling, ``start_char``, ``index_from``, ``maxlen``, ``num_words``/``skip_top``) with the
same results; :func:`get_word_index` reads ``imdb_word_index.json``.

**Where the files come from.** Searched in order: ``$KILN_DATA_DIR/imdb``, ``$KILN_DATA_DIR``,
``~/.kiln/datasets/imdb`` and ``~/.keras/datasets`` (Keras' cache). Otherwise the file is
downloaded from ``$KILN_DATASETS_MIRROR/imdb/`` or :data:`BASE_URL` (Keras' URL) into
``$KILN_DATA_DIR/imdb`` (else ``~/.kiln/datasets/imdb``), checked against the hash Keras
publishes (:data:`NPZ_SHA256`, :data:`WORD_INDEX_MD5`) and renamed into place only once
verified. No Debian or PyPI package ships the data: copy ``imdb.npz`` there yourself.

**Loading never runs code from the file.** Keras' ``imdb.npz`` holds ``x_train``/``x_test`` as numpy
object arrays, which ``.npy`` stores as a pickle (``np.load(allow_pickle=True)`` would run
whatever code the file names). kiln reads the archive itself: numeric arrays go through
``np.lib.format.read_array(allow_pickle=False)``; an object array's pickle goes through a
restricted unpickler whose ``find_class`` resolves only the names an array pickle uses
(numpy's ``_reconstruct``, ``ndarray``, ``dtype`` and ``scalar``, plus ``_codecs.encode``
and ``bytes``, which protocols 0-2 use to spell bytes) and maps them to stand-ins defined
here that only record their arguments: nothing the file names is imported or called. Any
other global (``os.system``, ``builtins.eval`` ...) is refused before it is looked up. The
recorded arrays are then checked and built by this module: a 1-D object array of lists of
ints (or of 1-D integer arrays), integer dtypes only.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import zipfile
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from kiln import config
from kiln.datasets import _fetch, _npz, _source

# Keras' URL (keras/src/datasets/imdb.py). Overridden by $KILN_DATASETS_MIRROR/imdb/.
BASE_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
NPZ_NAME = "imdb.npz"
WORD_INDEX_NAME = "imdb_word_index.json"
# The hashes Keras passes to get_file: sha256 for imdb.npz, md5 for the word index.
NPZ_SHA256 = "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"
WORD_INDEX_MD5 = "bfafd718b763782e994055a2d397834f"
KEYS = ("x_train", "y_train", "x_test", "y_test")
# The largest member of Keras' imdb.npz (x_train's pickle) is about 20 MB; reuters.npz's ~6 MB.
MAX_MEMBER_BYTES = 128 * _npz.MiB
HOW_TO_GET = (
    f"no Debian or PyPI package ships it: on a machine with internet, download {BASE_URL}"
    f"{NPZ_NAME} (sha256 {NPZ_SHA256}) and {BASE_URL}{WORD_INDEX_NAME} (md5 "
    f"{WORD_INDEX_MD5}), then copy them into $KILN_DATA_DIR/imdb or ~/.kiln/datasets/imdb "
    "(a Keras user's ~/.keras/datasets/ copy is found as it is)",
)

_INT64 = 2**62  # bound on the integer arguments, so the int64 arithmetic cannot overflow


def dataset() -> _source.Dataset:
    """The IMDB description used for the search places, mirror and messages."""
    return _source.Dataset(
        name="imdb",
        title="IMDB",
        npz_name=NPZ_NAME,
        base_url=BASE_URL,
        sha256={NPZ_NAME: NPZ_SHA256},
        raw_sha256={},
        how_to_get=HOW_TO_GET,
    )


def load_data(
    path: str | os.PathLike[str] = NPZ_NAME,
    num_words: int | None = None,
    skip_top: int = 0,
    maxlen: int | None = None,
    seed: int | None = 113,
    start_char: int | None = 1,
    oov_char: int | None = 2,
    index_from: int = 3,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Load the IMDB reviews, like ``keras.datasets.imdb.load_data``.

    The same steps as Keras, in its order: shuffle the training then the test reviews with
    one ``np.random.RandomState(seed)``; prepend ``start_char`` and add ``index_from`` to
    every word; with ``maxlen``, drop the reviews whose length (``start_char`` included) is
    not below ``maxlen``; then every word outside ``skip_top <= w < num_words`` becomes
    ``oov_char`` (or is dropped when ``oov_char`` is None). When ``num_words`` is None, it is
    the largest index present, so that word itself becomes ``oov_char``, as in Keras.

    Args:
        path: File name, searched for in ``$KILN_DATA_DIR/imdb``, ``$KILN_DATA_DIR``,
            ``~/.kiln/datasets/imdb`` and ``~/.keras/datasets``; an absolute path (or a
            folder holding ``imdb.npz``) is used as it is.
        num_words: Keep the ``num_words`` most frequent words (indices below it).
        skip_top: Replace the ``skip_top`` most frequent words (indices below it).
        maxlen: Drop longer reviews (see above); None or 0 keeps all.
        seed: Seed of the shuffle.
        start_char: Index put at the start of each review; None for none.
        oov_char: Index of the replaced words; None drops them instead.
        index_from: Added to every word index of the file.

    Returns:
        ``((x_train, y_train), (x_test, y_test))``: ``x`` are 1-D object arrays of lists of
        ``int``; ``y`` are the file's integer label arrays (0 or 1), reordered alike.

    Raises:
        DatasetNotFoundError: (a ``FileNotFoundError``) not found and no download; the message
            lists the places looked in and how to get the file.
        ValueError: Not a usable IMDB ``.npz`` (e.g. a pickle naming anything but numpy's
            array reconstruction), a failed checksum, or ``maxlen`` keeping no review.

    Example:
        >>> from kiln.datasets import imdb
        >>> (x_train, y_train), (x_test, y_test) = imdb.load_data(num_words=10000)  # doctest: +SKIP
        >>> x_train[0][:5], int(y_train[0])  # doctest: +SKIP
        ([1, 14, 22, 16, 43], 1)
    """
    ints = {"num_words": num_words, "maxlen": maxlen, "start_char": start_char,
            "oov_char": oov_char, "skip_top": skip_top, "index_from": index_from}  # fmt: skip
    for name, value in ints.items():
        if value is not None and not -_INT64 < _as_int(name, value) < _INT64:
            raise ValueError(f"{name}={value} is out of range")
    (x_train, y_train), (x_test, y_test) = read_npz(_find(path, NPZ_NAME, NPZ_SHA256))

    rng = np.random.RandomState(seed)
    order = np.arange(len(x_train))
    rng.shuffle(order)
    x_train, y_train = [x_train[i] for i in order], y_train[order]
    order = np.arange(len(x_test))
    rng.shuffle(order)
    x_test, y_test = [x_test[i] for i in order], y_test[order]

    rows = x_train + x_test
    labels = np.concatenate([y_train, y_test])
    split = np.array([True] * len(x_train) + [False] * len(x_test), dtype=bool)
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    words = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    if words.size and not -_INT64 < int(words.min()) <= int(words.max()) < _INT64:
        raise ValueError("word indices out of range in the IMDB file")

    if start_char is not None:
        starts = np.cumsum(lengths) - lengths + np.arange(len(rows))
        is_word = np.ones(words.size + len(rows), dtype=bool)
        is_word[starts] = False
        shifted = np.empty(is_word.size, dtype=np.int64)
        shifted[starts] = start_char
        shifted[is_word] = words + index_from
        words, lengths = shifted, lengths + 1
    elif index_from:
        words = words + index_from

    if maxlen:
        keep = lengths < maxlen
        if not keep[split].any() or not keep[~split].any():
            raise ValueError(
                f"After filtering for sequences shorter than maxlen={maxlen}, "
                "no sequence was kept. Increase maxlen."
            )
        words = words[np.repeat(keep, lengths)]
        lengths, labels, split = lengths[keep], labels[keep], split[keep]

    if not num_words:
        num_words = int(words.max()) if words.size else 0
    in_vocab = (words >= skip_top) & (words < num_words)
    if oov_char is not None:
        words = np.where(in_vocab, words, oov_char)
    else:
        row_of = np.repeat(np.arange(len(lengths)), lengths)
        lengths = np.bincount(row_of[in_vocab], minlength=len(lengths))
        words = words[in_vocab]

    values = words.tolist()
    ends = np.cumsum(lengths).tolist()
    out = _object_array([values[e - n : e] for e, n in zip(ends, lengths.tolist())])
    return (out[split], labels[split]), (out[~split], labels[~split])


def get_word_index(path: str | os.PathLike[str] = WORD_INDEX_NAME) -> dict[str, int]:
    """Return the dict mapping each word to its index in the file, like
    ``keras.datasets.imdb.get_word_index`` (add ``index_from`` to match ``load_data``).

    Args:
        path: File name, searched for like :func:`load_data`'s; downloaded (md5-checked
            against :data:`WORD_INDEX_MD5`) when absent.

    Returns:
        ``{word: index}``, index 1 for the most frequent word.

    Raises:
        DatasetNotFoundError: Not found and no download.
        ValueError: Not a JSON object of ``str -> int``, or a failed checksum.

    Example:
        >>> from kiln.datasets import imdb
        >>> words = {i + 3: w for w, i in imdb.get_word_index().items()}  # doctest: +SKIP
        >>> words[4]  # doctest: +SKIP
        'the'
    """
    found = _find(path, WORD_INDEX_NAME, WORD_INDEX_MD5)
    try:
        with open(found, encoding="utf-8") as f:
            index = json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{found}: not a JSON word index ({exc})") from exc
    if not isinstance(index, dict) or not all(
        isinstance(w, str) and type(i) is int for w, i in index.items()
    ):
        raise ValueError(f"{found}: expected a JSON object mapping words to integer indices")
    return index


# ---------------------------------------------------------------------------- the npz file


def read_npz(path: str | os.PathLike[str]) -> tuple[tuple[list, np.ndarray], ...]:
    """Read an IMDB ``.npz`` (Keras' layout) without unpickling: see the module docstring.

    Args:
        path: The archive, with ``x_train, y_train, x_test, y_test``.

    Returns:
        ``((x_train, y_train), (x_test, y_test))`` in file order: ``x`` as lists of lists of
        ``int``, ``y`` as 1-D integer arrays of the same lengths.

    Raises:
        ValueError: Not a zip of ``.npy`` files, a missing array, a pickle naming anything
            but numpy's array reconstruction, or arrays of the wrong kind. Names the file.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            missing = [key for key in KEYS if f"{key}.npy" not in names]
            if missing:
                raise ValueError(f"missing arrays {missing}; expected keys {list(KEYS)}")
            x_train, y_train, x_test, y_test = (_read_member(archive, key) for key in KEYS)
        splits = []
        for part, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
            x, y = _reviews(f"x_{part}", x), _labels(f"y_{part}", y)
            if len(x) != len(y):
                raise ValueError(f"{len(x)} x_{part} reviews but {len(y)} y_{part} labels")
            splits.append((x, y))
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a usable IMDB .npz file ({exc})") from exc
    except ValueError as exc:
        raise ValueError(f"{path}: not a usable IMDB .npz file: {exc}") from exc
    return tuple(splits)


def _read_member(archive: zipfile.ZipFile, key: str) -> Any:
    """Member ``key``: an object array's restricted unpickle, or a numeric array; both bounded
    (``_npz``: the member at most :data:`MAX_MEMBER_BYTES`, a numeric header no larger than
    its member)."""
    name = f"{key}.npy"
    with _npz.open_member(archive, name, MAX_MEMBER_BYTES) as stream:
        try:
            _, dtype, _ = _npz.declared_nbytes(stream)
        except ValueError:
            dtype = None  # a newer format: numeric arrays only, read_numeric says which
        if dtype is not None and dtype.hasobject:
            if dtype != np.dtype(object):
                raise ValueError(f"{key}: unsupported dtype {dtype}")
            stub = _safe_unpickle(stream, key)
            stub.budget = archive.getinfo(name).file_size
            return stub
    return _npz.read_numeric(archive, key, MAX_MEMBER_BYTES)


def _reviews(key: str, x: Any) -> list[list[int]]:
    budget = getattr(x, "budget", None)
    items = _to_list(key, x)
    if budget is not None:
        # a pickle spends at least one byte on each int it holds; more words than that means
        # rows aliasing one another (memo references), which would multiply in memory below
        words = sum(len(item) for item in items if isinstance(item, list | tuple))
        if words > budget:
            raise ValueError(f"{key}: its rows hold {words:,} word indices, more than its "
                             f"{budget:,} bytes can spell (rows that alias one another)")
    rows = []
    for i, item in enumerate(items):
        if isinstance(item, _ArrayStub):
            item = _materialize(item, f"{key}[{i}]").tolist()
        if not isinstance(item, (list, tuple)):
            raise ValueError(f"{key}[{i}] is a {type(item).__name__}, not a list of ints")
        rows.append(item)
    kinds = set(map(type, chain.from_iterable(rows)))
    if not kinds <= {int}:
        bad = sorted(t.__name__ for t in kinds - {int})
        raise ValueError(f"{key} holds {', '.join(bad)} values; word indices must be ints")
    return rows


def _labels(key: str, y: Any) -> np.ndarray:
    if isinstance(y, np.ndarray):
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise ValueError(f"{key} must be a 1-D integer array, got {y.dtype} {y.shape}")
        return y
    items = _to_list(key, y)
    if not all(type(v) is int for v in items):
        raise ValueError(f"{key} must hold integer labels")
    return np.array(items, dtype=np.int64)


def _to_list(key: str, value: Any) -> list:
    if isinstance(value, _ArrayStub):
        value = _materialize(value, key)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ValueError(f"{key} must be 1-D, got shape {value.shape}")
        return value.tolist()
    raise ValueError(f"{key} is not an array")


def _object_array(items: list) -> np.ndarray:
    """A 1-D object array of ``items`` (``np.array`` would make 2-D of equal-length lists)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


# ---------------------------------------------------------------- the restricted unpickler


class _Stub:
    """Stands for a numpy object while unpickling; records what ``BUILD`` would set."""

    def __init__(self, args: tuple) -> None:
        self.args, self.state = args, None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _ArrayStub(_Stub):
    pass


class _DtypeStub(_Stub):
    def describe(self, where: str) -> np.dtype:
        """The dtype, if it is ``object`` or a plain integer type; else ValueError."""
        spec = self.args[0] if self.args else None
        spec = spec.decode("latin1") if isinstance(spec, bytes) else spec
        order = self.state[1] if isinstance(self.state, tuple) and len(self.state) > 1 else "="
        order = order.decode("latin1") if isinstance(order, bytes) else order
        if isinstance(spec, str) and re.fullmatch(r"O[48]", spec):
            return np.dtype(object)
        if (
            isinstance(spec, str)
            and re.fullmatch(r"[iu][1248]", spec)
            and order in ("<", ">", "=", "|")
        ):
            return np.dtype(("=" if order == "|" else order) + spec)
        raise ValueError(f"{where}: unsupported array type {spec!r}")


_NDARRAY = object()  # what the name numpy.ndarray resolves to: not callable, not a class


def _reconstruct(subtype: Any, *args: Any) -> _ArrayStub:
    if subtype is not _NDARRAY:
        raise pickle.UnpicklingError("_reconstruct of something other than numpy.ndarray")
    return _ArrayStub(args)


def _dtype(*args: Any) -> _DtypeStub:
    return _DtypeStub(args)


def _scalar(dtype: Any, data: Any = None) -> Any:
    """``numpy.core.multiarray.scalar``: an integer scalar becomes a Python int."""
    if not isinstance(dtype, _DtypeStub):
        raise pickle.UnpicklingError("scalar of something other than a dtype")
    dt = dtype.describe("a scalar")
    if dt == np.dtype(object):
        return data
    data = data.encode("latin1") if isinstance(data, str) else data
    if not isinstance(data, bytes) or len(data) != dt.itemsize:
        raise pickle.UnpicklingError("malformed integer scalar")
    return int(np.frombuffer(data, dtype=dt)[0])


def _encode(text: Any, encoding: Any) -> bytes:
    """``_codecs.encode``: how pickle protocols 0-2 written by Python 3 spell ``bytes``."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is allowed only for latin1 bytes")
    return text.encode("latin1")


def _bytes(*args: Any) -> bytes:
    """``bytes()``: how pickle protocols 0-2 written by Python 3 spell ``b""``."""
    if args:
        raise pickle.UnpicklingError("bytes() is allowed only without arguments")
    return b""


_NUMPY_MULTIARRAY = ("numpy.core.multiarray", "numpy._core.multiarray")
_ALLOWED = {
    **{(m, "_reconstruct"): _reconstruct for m in _NUMPY_MULTIARRAY},
    **{(m, "scalar"): _scalar for m in _NUMPY_MULTIARRAY},
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _encode,
    ("__builtin__", "bytes"): _bytes,
    ("builtins", "bytes"): _bytes,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"the pickle refers to {module}.{name}; only numpy's array reconstruction "
                "is allowed in a dataset file (kiln never runs code from a data file)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed in a dataset file")


def _safe_unpickle(stream: BinaryIO, key: str) -> Any:
    try:
        # encoding="latin1": arrays pickled by Python 2 carry their bytes as str.
        value = _Unpickler(stream, encoding="latin1").load()
    except Exception as exc:  # a hostile or damaged pickle can fail in any way: report it
        msg = f"{key}: refused or unreadable pickle ({type(exc).__name__}: {exc})"
        raise ValueError(msg) from exc
    if not isinstance(value, _ArrayStub):
        raise ValueError(f"{key}: the pickle holds a {type(value).__name__}, not an array")
    return value


def _materialize(stub: _ArrayStub, where: str) -> np.ndarray:
    """Build the array a stub describes: 1-D, object or integer dtype, C order."""
    state = stub.state
    if not isinstance(state, tuple) or len(state) not in (4, 5):
        raise ValueError(f"{where}: malformed array pickle")
    shape, dtype, fortran, data = state[-4:]
    if (
        not isinstance(shape, tuple)
        or len(shape) != 1
        or type(shape[0]) is not int
        or not isinstance(dtype, _DtypeStub)
    ):
        raise ValueError(f"{where}: expected a 1-D array, got shape {shape!r}")
    dt, n = dtype.describe(where), shape[0]
    if dt == np.dtype(object):
        if not isinstance(data, list) or len(data) != n:
            raise ValueError(f"{where}: malformed object array pickle")
        return _object_array(data)
    data = data.encode("latin1") if isinstance(data, str) else data
    if not isinstance(data, bytes) or len(data) != n * dt.itemsize:
        raise ValueError(f"{where}: malformed integer array pickle")
    return np.frombuffer(data, dtype=dt).astype(dt.newbyteorder("="))


# --------------------------------------------------------------- finding and downloading


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or None, got {value!r}")
    try:
        return int(value.__index__())
    except AttributeError:
        raise TypeError(f"{name} must be an int or None, got {value!r}") from None


def _places() -> list[tuple[str, Path]]:
    out = _source.places(dataset(), None)
    keras = Path.home() / ".keras" / "datasets"
    return out + ([("Keras' cache", keras)] if all(p != keras for _, p in out) else [])


def _find(path: str | os.PathLike[str], default_name: str, digest: str) -> Path:
    """The file ``path`` names, found on disk or downloaded (see the module docstring)."""
    given = Path(path).expanduser()
    if given.is_absolute():
        if given.is_dir():
            given = given / default_name
        if given.is_file():
            return given
        looked, target = [f"  - {given} (path argument): no such file"], given
    else:
        looked = []
        for label, folder in _places():
            if (folder / given).is_file():
                return folder / given
            looked.append(f"  - {folder / given} ({label}): no such file")
        target = _source.default_dir(dataset()) / given
    url = _source.mirror_url(dataset()) + default_name
    if config.env_flag(_source.OFFLINE_ENV):
        problem = f"downloads are disabled by {_source.OFFLINE_ENV}"
    else:
        path, problem = _fetch.try_download(url, target, digest)
        if path is not None:
            return path
    lines = [
        f"IMDB's {default_name} was not found and could not be downloaded. Looked in:",
        *looked,
        f"Then {problem}.",
        "To get it:",
        *(f"  - {hint}" for hint in HOW_TO_GET),
        f"  - or set {_source.DATA_DIR_ENV} to the folder holding it, or pass an absolute path",
        f"  - or set {_source.MIRROR_ENV} to a mirror serving <mirror>/imdb/{default_name}",
    ]
    raise _source.DatasetNotFoundError("\n".join(lines))


