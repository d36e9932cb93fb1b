"""``keras.utils.split_dataset``: two datasets from one (arrays, tuples/lists/dicts of
arrays, kiln datasets, and ``tf.data`` datasets when TensorFlow is installed).

The sizes follow Keras: an int is a number of samples, a float in (0, 1) a fraction (rounded);
a missing side is the complement of the other. The left split is the first ``left_size``
samples, the right split the last ``right_size``. With ``shuffle``, the samples are shuffled
first with Python's ``random.Random(seed)``, the same order Keras gives for the same seed.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from kiln.utils.dataset_ops import Dataset, _map_structure, _rows, stack_elements

_BACKENDS = (None, "kiln", "numpy", "tensorflow", "torch")


def _is_tf_dataset(x: Any) -> bool:
    return any(c.__module__.startswith("tensorflow") and c.__name__ in ("DatasetV2", "Dataset")
               for c in type(x).__mro__)


def _is_torch_dataset(x: Any) -> bool:
    return any(c.__module__.startswith("torch.utils.data") and c.__name__ == "Dataset"
               for c in type(x).__mro__)


def _split_torch(dataset: Any, left_size: Any, right_size: Any, shuffle: bool,
                 seed: Any) -> tuple[Any, Any]:
    """torch ``Subset`` s, as Keras gives for ``preferred_backend="torch"``: arrays become a
    ``TensorDataset``; with ``shuffle`` the order is ``torch.randperm`` of a generator seeded
    with ``seed`` (Keras' ``random_split`` order when the sizes cover the dataset)."""
    import torch
    from torch.utils.data import Subset, TensorDataset

    if not _is_torch_dataset(dataset):
        if isinstance(dataset, np.ndarray):
            dataset = TensorDataset(torch.from_numpy(dataset))
        elif isinstance(dataset, list | tuple):
            dataset = TensorDataset(*(torch.from_numpy(np.asarray(a)) for a in dataset))
        else:
            raise TypeError("split_dataset: with preferred_backend='torch', dataset must be a "
                            "torch Dataset, an array or a tuple/list of arrays, received "
                            f"{type(dataset).__name__}")
    total = len(dataset)
    n_left, n_right = _sizes(left_size, right_size, total)
    order = list(range(total))
    if shuffle:
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        else:
            generator.seed()
        order = torch.randperm(total, generator=generator).tolist()
    return Subset(dataset, order[:n_left]), Subset(dataset, order[total - n_right:])


def _sizes(left: Any, right: Any, total: int) -> tuple[int, int]:
    for name, value in (("left_size", left), ("right_size", right)):
        if value is not None and (isinstance(value, bool) or type(value) not in (int, float)):
            raise TypeError(f"split_dataset: {name} must be an int, a float or None, received "
                            f"{type(value).__name__} {value!r}")
    if left is None and right is None:
        raise ValueError("split_dataset: at least one of left_size and right_size must be "
                         "given, received left_size=None and right_size=None")
    if left == 0 and right == 0:
        raise ValueError("split_dataset: left_size and right_size are both zero")
    for name, value in (("left_size", left), ("right_size", right)):
        if isinstance(value, int) and not 0 < value < total or \
                isinstance(value, float) and not 0 < value < 1:
            raise ValueError(f"split_dataset: {name} must be a positive integer smaller than "
                             f"the dataset's length {total}, or a float in (0, 1); received "
                             f"{name}={value!r}")
    if isinstance(left, float) and isinstance(right, float) and left + right > 1:
        raise ValueError(f"split_dataset: left_size + right_size = {left + right} is above 1")
    n_left = round(left * total) if isinstance(left, float) else left
    n_right = round(right * total) if isinstance(right, float) else right
    if n_left is None:
        n_left = total - n_right
    if n_right is None:
        n_right = total - n_left
    if n_left + n_right > total:
        raise ValueError(f"split_dataset: left_size + right_size = {n_left + n_right} samples "
                         f"is more than the dataset's {total}")
    for side, n in (("left", n_left), ("right", n_right)):
        if n == 0:
            raise ValueError(f"split_dataset: with a dataset of {total} samples, left_size="
                             f"{left!r} and right_size={right!r} leave the {side} split empty")
    return int(n_left), int(n_right)


def split_dataset(dataset: Any, left_size: Any = None, right_size: Any = None,
                  shuffle: bool = False, seed: Any = None, preferred_backend: Any = None
                  ) -> tuple[Any, Any]:
    """Splits ``dataset`` into a left and a right dataset.

    Args:
        dataset: an array, a tuple/list/dict of arrays of the same length, a kiln
            :class:`~kiln.utils.Dataset` (its elements are the samples; it must be finite) or a
            ``tf.data.Dataset`` (a batched one is split by samples and batched again).
        left_size, right_size: the sizes (int: samples; float in (0, 1): fraction).
        shuffle: shuffle the samples before splitting.
        seed: the shuffling seed (Python's ``random``; None: a random one).
        preferred_backend: None (a ``tf.data`` input gives ``tf.data`` splits, anything else
            kiln datasets; a torch dataset torch subsets), ``"kiln"``/``"numpy"`` (kiln
            datasets), ``"tensorflow"`` or ``"torch"`` (``torch.utils.data.Subset`` s).

    Returns:
        ``(left, right)``.

    Example:
        >>> left, right = kiln.utils.split_dataset(np.random.random((1000, 4)), left_size=0.8)
        >>> len(left), len(right)
        (800, 200)
    """
    if preferred_backend not in _BACKENDS:
        raise ValueError(f"split_dataset: preferred_backend must be one of {_BACKENDS}, "
                         f"received {preferred_backend!r}")
    if preferred_backend == "torch" or (preferred_backend is None and
                                        _is_torch_dataset(dataset)):
        return _split_torch(dataset, left_size, right_size, shuffle, seed)
    batch_size = None
    is_tf = _is_tf_dataset(dataset)
    if is_tf:
        batch_size = getattr(dataset, "_batch_size", None)
        if batch_size is not None:
            batch_size = int(batch_size.numpy()) if hasattr(batch_size, "numpy") \
                else int(batch_size)
            dataset = dataset.unbatch()
        samples = list(dataset.as_numpy_iterator())
    elif isinstance(dataset, Dataset):
        if dataset.cardinality() == -1:
            raise ValueError("split_dataset: the kiln dataset is infinite (repeat())")
        samples = list(dataset)
    elif isinstance(dataset, np.ndarray | tuple | list | dict):
        data = tuple(dataset) if isinstance(dataset, list) else dataset  # a list: its arrays
        data = _map_structure(np.asarray, data)
        lengths = {_rows(a) for a in _flatten(data)}
        if len(lengths) != 1:
            raise ValueError("split_dataset: the arrays must have the same length, received "
                             f"lengths {sorted(lengths)}")
        n = lengths.pop()
        samples = [_map_structure(lambda a, i=i: a[i], data) for i in range(n)]
    else:
        raise TypeError("split_dataset: dataset must be an array, a tuple/list/dict of arrays, "
                        "a kiln Dataset or a tf.data.Dataset, received "
                        f"{type(dataset).__name__}")
    if shuffle:
        if seed is None:
            seed = random.randint(0, int(1e6))
        random.Random(seed).shuffle(samples)
    n_left, n_right = _sizes(left_size, right_size, len(samples))
    left, right = samples[:n_left], samples[-n_right:]
    if preferred_backend == "tensorflow" or (is_tf and preferred_backend is None):
        import tensorflow as tf

        def to_tf(part: list) -> Any:
            ds = tf.data.Dataset.from_tensor_slices(stack_elements(part))
            return ds.batch(batch_size) if batch_size else ds
        return to_tf(left), to_tf(right)
    return _to_kiln(left), _to_kiln(right)


def _flatten(x: Any) -> list:
    if isinstance(x, dict):
        return [a for v in x.values() for a in _flatten(v)]
    if isinstance(x, tuple | list):
        return [a for v in x for a in _flatten(v)]
    return [x]


def _to_kiln(samples: list) -> Dataset:
    return Dataset(lambda: iter(samples), len(samples))
