"""``text_dataset_from_directory`` (``keras.utils``): a folder of class sub-folders of
``.txt`` files as a re-iterable dataset of ``(texts, labels)`` batches."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.utils import _directory

_FN = "text_dataset_from_directory"


def _stack(texts: list[str]) -> np.ndarray:
    out = np.empty(len(texts), dtype=object)
    out[:] = texts
    return out


def text_dataset_from_directory(
        directory: str | os.PathLike[str], labels: Any = "inferred", label_mode: str | None = "int",
        class_names: Sequence[str] | None = None, batch_size: int | None = 32,
        max_length: int | None = None, shuffle: bool = True, seed: int | None = None,
        validation_split: float | None = None, subset: str | None = None,
        follow_links: bool = False, format: str = "tf",  # noqa: A002
        verbose: bool = True) -> Any:
    """Text files in class sub-folders as a dataset, like
    ``keras.utils.text_dataset_from_directory``.

    Indexing, labels, shuffling and the split follow Keras exactly as
    :func:`~kiln.utils.image_dataset_from_directory` does, for ``.txt`` files (read as
    UTF-8).

    Args:
        directory: The folder (``directory/class_a/*.txt`` ...).
        labels: ``"inferred"``, None, or a list of integer labels in sorted path order.
        label_mode: ``"int"``, ``"categorical"``, ``"binary"`` or None.
        class_names: With ``labels="inferred"``: the sub-folders to use, in label order.
        batch_size: Texts per batch; None yields single texts.
        max_length: Keep at most this many bytes (UTF-8) of each text, as Keras does.
        shuffle, seed, validation_split, subset, follow_links, verbose: As for images.

    Returns:
        A dataset (iterable once per epoch, ``len()`` batches) of ``(texts, labels)`` where
        ``texts`` is a 1-D object array of ``str``; it has ``class_names`` and ``file_paths``;
        ``[training, validation]`` with ``subset="both"``. With TensorFlow installed, a
        ``tf.data.Dataset`` of the same elements with ``class_names``, as Keras returns
        (``kiln.utils.set_dataset_format("kiln")`` keeps kiln's :class:`kiln.utils.Dataset`).

    Raises:
        ValueError: Bad arguments, or no ``.txt`` file found.

    Example:
        >>> train = kiln.utils.text_dataset_from_directory("aclImdb/train", batch_size=64,
        ...                                                seed=0)  # doctest: +SKIP
        >>> texts, labels = next(iter(train))  # doctest: +SKIP
    """
    if format != "tf":  # kiln returns its own dataset (batches of NumPy arrays)
        raise ValueError(f"text_dataset_from_directory: format={format!r} is not supported by "
                         "kiln; the default 'tf' returns kiln's dataset of NumPy batches")
    label_mode = _directory.check_label_mode(_FN, label_mode, labels)
    if max_length is not None and (isinstance(max_length, bool) or max_length < 1):
        raise ValueError(f"{_FN}: max_length must be a positive integer or None, received "
                         f"{max_length!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or batch_size < 1):
        raise ValueError(f"{_FN}: batch_size must be a positive integer or None, received "
                         f"{batch_size!r}")
    _directory.check_split_args(_FN, validation_split, subset, shuffle, seed)
    if seed is None and shuffle:
        seed = int(np.random.randint(1_000_000))
    paths, int_labels, names = _directory.index_directory(
        _FN, directory, labels, (".txt",), class_names, shuffle, seed, follow_links, verbose)
    if label_mode == "binary" and len(names) != 2:
        raise ValueError(f"{_FN}: label_mode='binary' needs exactly 2 classes, found "
                         f"class_names={names}")
    if not paths:
        raise ValueError(f"{_FN}: no .txt files found in directory "
                         f"{os.fspath(directory)!r}")

    def load(path: str) -> str:
        # only what is kept is read: Keras keeps max_length bytes (tf.strings.substr)
        with open(path, "rb") as f:
            raw = f.read() if not max_length else f.read(max_length)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if max_length and exc.reason == "unexpected end of data" and \
                    exc.start >= len(raw) - 3:  # a character cut in two by max_length: dropped
                return raw[:exc.start].decode("utf-8")
            raise ValueError(f"{_FN}: {path} is not UTF-8 text ({exc.reason} at byte "
                             f"{exc.start})") from None

    def build(which: str) -> _directory.DirectoryDataset:
        p, lab = _directory.split(_FN, paths, int_labels, validation_split, which, verbose)
        y = _directory.encode_labels(_FN, lab, label_mode, len(names))
        return _directory.DirectoryDataset(p, y, load, _stack, batch_size, shuffle, seed,
                                           names)

    if subset == "both":
        return _directory.finish([build("training"), build("validation")], False, True, max_length)
    return _directory.finish([build(subset or "training")], False, True, max_length)[0]
