"""What ``image_dataset_from_directory`` and ``text_dataset_from_directory`` share: Keras'
indexing of a folder of class sub-folders, its train/validation split, and the re-iterable
batched dataset they return (files are read batch by batch)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

import kiln.config
from kiln.utils.dataset_ops import BatchSource


def check_split_args(fn: str, validation_split: float | None, subset: str | None,
                     shuffle: bool, seed: int | None) -> None:
    """Keras' checks of ``validation_split``/``subset``/``seed``."""
    if validation_split is not None and not (
            isinstance(validation_split, int | float) and 0 < validation_split < 1):
        raise ValueError(f"{fn}: validation_split must be between 0 and 1, received "
                         f"{validation_split!r}")
    if (validation_split or subset) and not (validation_split and subset):
        raise ValueError(f"{fn}: if subset is set, validation_split must be set, and inversely "
                         f"(received validation_split={validation_split!r}, "
                         f"subset={subset!r})")
    if subset not in ("training", "validation", "both", None):
        raise ValueError(f"{fn}: subset must be 'training', 'validation', 'both' or None, "
                         f"received {subset!r}")
    if validation_split and shuffle and seed is None:
        raise ValueError(f"{fn}: with validation_split and shuffle, pass a seed, so that the "
                         "training and validation subsets do not overlap")


def _walk(folder: str, follow_links: bool, formats: tuple[str, ...]) -> list[str]:
    """Files under ``folder`` (recursively) with one of ``formats``, relative, sorted as Keras
    sorts them (by ``(root, name)``)."""
    found = []
    for root, _, files in os.walk(folder, followlinks=follow_links):
        for name in files:
            if name.lower().endswith(formats):
                found.append((root, name))
    return [os.path.relpath(os.path.join(r, n), folder) for r, n in sorted(found)]


def index_directory(fn: str, directory: str | os.PathLike[str], labels: Any,
                    formats: tuple[str, ...], class_names: Sequence[str] | None, shuffle: bool,
                    seed: int | None, follow_links: bool, verbose: bool
                    ) -> tuple[list[str], np.ndarray | None, list[str]]:
    """``(file paths, integer labels or None, class names)`` as Keras indexes them: classes
    are the sorted sub-folders (or ``class_names``, in its order), files are sorted within
    each, and with ``shuffle`` paths and labels are shuffled by ``RandomState(seed)``."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"{fn}: directory {directory!r} does not exist or is not a folder")
    if labels == "inferred":
        subdirs = sorted(d for d in os.listdir(directory)
                         if os.path.isdir(os.path.join(directory, d)))
        if class_names is not None:
            if not set(class_names) <= set(subdirs):
                raise ValueError(f"{fn}: class_names {list(class_names)} do not match the "
                                 f"sub-folders of {directory}: expected {subdirs} (or a "
                                 "subset of it)")
            subdirs = list(class_names)
    else:
        if class_names is not None:
            raise ValueError(f"{fn}: class_names must be None when labels is "
                             f"{'None' if labels is None else 'a list'} (received "
                             f"class_names={list(class_names)})")
        subdirs = [""]
    files, inferred = [], []
    for index, sub in enumerate(subdirs):
        names = _walk(os.path.join(directory, sub), follow_links, formats)
        files += [os.path.join(sub, n) for n in names]
        inferred += [index] * len(names)
    names_out = list(subdirs) if labels == "inferred" else []
    if labels is None:
        out_labels = None
    elif labels == "inferred":
        out_labels = np.array(inferred, dtype=np.int64)
    else:
        if isinstance(labels, str) or not isinstance(labels, list | tuple | np.ndarray):
            raise ValueError(f"{fn}: labels must be 'inferred', None, or a list/tuple of "
                             f"integer labels, one per file; received {labels!r}")
        if len(labels) != len(files):
            raise ValueError(f"{fn}: len(labels) is {len(labels)} but {len(files)} files were "
                             f"found in {directory}; the labels must match the files sorted "
                             "by path")
        out_labels = np.asarray(labels)
        if out_labels.dtype.kind not in "iu":
            raise ValueError(f"{fn}: labels must be integers, received dtype "
                             f"{out_labels.dtype}")
        out_labels = out_labels.astype(np.int64)
        names_out = [str(v) for v in sorted(set(out_labels.tolist()))]
    if verbose:
        if out_labels is None:
            print(f"Found {len(files)} files.")
        else:
            print(f"Found {len(files)} files belonging to {len(names_out)} classes.")
    paths = [os.path.join(directory, f) for f in files]
    if shuffle:
        if seed is None:
            seed = int(np.random.randint(1_000_000))
        np.random.RandomState(seed).shuffle(paths)
        if out_labels is not None:
            np.random.RandomState(seed).shuffle(out_labels)
    return paths, out_labels, names_out


def split(fn: str, paths: list[str], labels: np.ndarray | None, validation_split: float | None,
          subset: str, verbose: bool) -> tuple[list[str], np.ndarray | None]:
    """Keras' cut: the last ``int(validation_split * n)`` files are the validation subset."""
    if not validation_split:
        return paths, labels
    n_val = int(validation_split * len(paths))
    if n_val == 0 or n_val == len(paths):
        raise ValueError(f"{fn}: validation_split={validation_split} of {len(paths)} files "
                         f"leaves an empty {'validation' if n_val == 0 else 'training'} subset")
    if subset == "training":
        if verbose:
            print(f"Using {len(paths) - n_val} files for training.")
        return paths[:-n_val], None if labels is None else labels[:-n_val]
    if verbose:
        print(f"Using {n_val} files for validation.")
    return paths[-n_val:], None if labels is None else labels[-n_val:]


def encode_labels(fn: str, labels: np.ndarray | None, label_mode: str | None,
                  num_classes: int) -> np.ndarray | None:
    """Integer labels in ``label_mode``'s form: int32, one-hot float, or ``(n, 1)`` float."""
    if labels is None or label_mode is None:
        return None
    if label_mode == "int":
        return labels.astype(np.int32)
    if label_mode == "binary":
        return labels.astype(kiln.config.floatx()).reshape(-1, 1)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"{fn}: label_mode='categorical' needs labels in [0, {num_classes}), "
                         f"received {int(labels.min())} to {int(labels.max())}")
    out = np.zeros((len(labels), num_classes), dtype=kiln.config.floatx())
    out[np.arange(len(labels)), labels] = 1
    return out


def check_label_mode(fn: str, label_mode: str | None, labels: Any) -> str | None:
    if label_mode not in ("int", "categorical", "binary", None):
        raise ValueError(f"{fn}: label_mode must be 'int', 'categorical', 'binary' or None, "
                         f"received {label_mode!r}")
    return None if labels is None else label_mode


class DirectoryDataset(BatchSource):
    """Files of a folder, read and batched on the fly: iterate it (once per epoch) for
    ``(x, y)`` batches (``x`` alone without labels); ``len()`` is the number of batches.

    It has the methods of :class:`kiln.utils.Dataset` (``map``, ``batch``, ``take`` ...).

    Attributes:
        class_names: The class names (index ``i`` is label ``i``).
        file_paths: The files, in the order of the first epoch.
    """

    def __init__(self, paths: list[str], labels: np.ndarray | None,
                 load: Callable[[str], Any], stack: Callable[[list], Any],
                 batch_size: int | None, shuffle: bool, seed: int | None,
                 class_names: list[str]):
        self.file_paths = paths
        self.labels = labels
        self.class_names = class_names
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self._load, self._stack = load, stack
        self._rng = np.random.RandomState(seed) if seed is not None else np.random.RandomState()
        self._epochs = 0

    def __len__(self) -> int:
        n = len(self.file_paths)
        return n if self.batch_size is None else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        order = np.arange(len(self.file_paths))
        if self.shuffle and self._epochs > 0:  # the first epoch keeps Keras' file order
            order = self._rng.permutation(order)
        self._epochs += 1
        step = self.batch_size or 1
        for i in range(0, len(order), step):
            idx = order[i:i + step]
            x = self._stack([self._load(self.file_paths[j]) for j in idx])
            y = None if self.labels is None else self.labels[idx]
            if self.batch_size is None:
                x = x[0]
                y = None if y is None else y[0]
            yield x if y is None else (x, y)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self.file_paths)} files, "
                f"{len(self.class_names)} classes, {len(self)} batches)")


def finish(datasets: list[DirectoryDataset], file_paths: bool, text: bool,
           max_length: int | None = None) -> list[Any]:
    """kiln's datasets, or (see :func:`kiln.utils.set_dataset_format`) Keras'
    ``tf.data.Dataset`` s: the files zipped with their labels, shuffled by
    ``Dataset.shuffle(8 * batch_size, seed)`` (except a ``subset="both"`` validation part),
    read (texts with TF ops, images with kiln's loader) and batched, with ``class_names``
    (and ``file_paths`` for images) set as Keras sets them."""
    from kiln.utils.tf_interop import dataset_format
    if dataset_format() != "tf":
        return list(datasets)
    out = []
    for k, d in enumerate(datasets):
        shuffle = d.shuffle and not (len(datasets) == 2 and k == 1)
        ds = _tf_files(d, shuffle, text, max_length)
        ds.class_names = d.class_names
        if file_paths:
            ds.file_paths = d.file_paths
        out.append(ds)
    return out


def _tf_files(d: DirectoryDataset, shuffle: bool, text: bool, max_length: int | None) -> Any:
    import tensorflow as tf
    ds = tf.data.Dataset.from_tensor_slices(d.file_paths)
    if d.labels is not None:
        ds = tf.data.Dataset.zip((ds, tf.data.Dataset.from_tensor_slices(d.labels)))
    if shuffle:
        buffer = d.batch_size * 8 if d.batch_size is not None else 1024
        ds = ds.shuffle(buffer_size=buffer, seed=d.seed)
    if text:
        def read(path: Any) -> Any:
            txt = tf.io.read_file(path)
            return txt if max_length is None else tf.strings.substr(txt, 0, max_length)
    else:
        shape = np.shape(d._load(d.file_paths[0]))

        def read(path: Any) -> Any:
            img = tf.numpy_function(lambda p: d._load(p.decode()), [path],
                                    tf.as_dtype(kiln.config.floatx()))
            img.set_shape(shape)
            return img
    if d.labels is not None:
        ds = ds.map(lambda p, y: (read(p), y), num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.map(read, num_parallel_calls=tf.data.AUTOTUNE)
    if d.batch_size is not None:
        ds = ds.batch(d.batch_size)
    return ds.prefetch(tf.data.AUTOTUNE)
