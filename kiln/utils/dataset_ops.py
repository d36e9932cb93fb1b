"""kiln's own dataset: a lazy, re-iterable pipeline of NumPy elements with the common
``tf.data.Dataset`` methods (``map``, ``batch``, ``unbatch``, ``take``, ``skip``, ``shuffle``,
``cache``, ``prefetch``, ``repeat``, ``filter``, ``concatenate``, ``rebatch``, ``enumerate``,
``cardinality``, ``as_numpy_iterator``; ``from_tensor_slices``, ``from_generator``, ``range``,
``zip``).

``image_dataset_from_directory``, ``text_dataset_from_directory`` and
``timeseries_dataset_from_array`` return one when TensorFlow is absent (or when kiln's own
datasets are asked for: see :func:`kiln.utils.set_dataset_format`). Every method returns a
new dataset and leaves the one it is called on as it was; every iteration (epoch) starts
the pipeline again, so ``fit`` reads one epoch per ``iter()``.

An element is an array, a string, a number, or a tuple/list/dict of them (nested).
``batch`` stacks elements along a new first axis (strings into an object array),
``unbatch`` splits them again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

INFINITE = -1
UNKNOWN = -2


def _map_structure(fn: Callable, *items: Any) -> Any:
    first = items[0]
    if isinstance(first, dict):
        return {k: _map_structure(fn, *(i[k] for i in items)) for k in first}
    if isinstance(first, tuple | list):
        out = [_map_structure(fn, *parts) for parts in zip(*items)]
        return tuple(out) if isinstance(first, tuple) else out
    return fn(*items)


def _stack(*values: Any) -> np.ndarray:
    if all(isinstance(v, str | bytes) for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.stack([np.asarray(v) for v in values])


def stack_elements(elements: list) -> Any:
    """Elements of one structure stacked along a new first axis (a batch)."""
    return _map_structure(_stack, *elements)


def _rows(batch: Any) -> int:
    sizes: list[int] = []
    _map_structure(lambda a: sizes.append(len(a)), batch)
    if not sizes or len(set(sizes)) != 1:
        raise ValueError(f"Dataset.unbatch: the parts of a batch must have the same first "
                         f"dimension, received sizes {sizes}")
    return sizes[0]


def _row(batch: Any, i: int) -> Any:
    return _map_structure(lambda a: a[i], batch)


def _concat(*parts: Any) -> np.ndarray:
    return np.concatenate([np.asarray(p) for p in parts])


def _check_count(method: str, name: str, value: Any, allow_minus_one: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or (
            value < 0 and not (allow_minus_one and value == -1)):
        raise ValueError(f"Dataset.{method}: {name} must be a non-negative integer"
                         + (" or -1" if allow_minus_one else "") + f", received {name}={value!r}")
    return int(value)


class Dataset:
    """A re-iterable pipeline of elements (see the module docstring).

    Args:
        make_iterator: Called at every ``iter()``: returns a fresh iterator of elements.
        cardinality: The number of elements, ``INFINITE`` (-1) or ``UNKNOWN`` (-2).

    Example:
        >>> ds = kiln.utils.Dataset.from_tensor_slices(np.arange(10))
        >>> [b.tolist() for b in ds.map(lambda x: x * 2).batch(4)]
        [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
    """

    class_names: list[str] | None = None

    def __init__(self, make_iterator: Callable[[], Iterator[Any]], cardinality: int = UNKNOWN):
        self._make_iterator = make_iterator
        self._cardinality = int(cardinality)

    # --- construction -------------------------------------------------------------------
    @staticmethod
    def from_tensor_slices(data: Any) -> Dataset:
        """The rows (first axis) of ``data``: an array, or a tuple/dict of arrays of the same
        length."""
        data = _map_structure(lambda a: a if isinstance(a, np.ndarray) else np.asarray(a), data)
        n = _rows(data)
        return Dataset(lambda: (_row(data, i) for i in range(n)), n)

    @staticmethod
    def from_generator(generator: Callable[[], Iterator[Any]],
                       cardinality: int = UNKNOWN) -> Dataset:
        """The elements of ``generator()`` (called again at every iteration)."""
        if not callable(generator):
            raise TypeError(f"Dataset.from_generator: generator must be callable (it is called "
                            f"once per iteration), received {type(generator).__name__}")
        return Dataset(generator, cardinality)

    @staticmethod
    def range(*args: int) -> Dataset:
        """``range(start, stop, step)`` as int64 elements."""
        r = range(*args)
        return Dataset(lambda: (np.int64(i) for i in r), len(r))

    @staticmethod
    def zip(*datasets: Any) -> Dataset:
        """Tuples of the elements of ``datasets`` (a tuple of datasets or several), as long as
        the shortest."""
        if len(datasets) == 1 and isinstance(datasets[0], tuple | list):
            datasets = tuple(datasets[0])
        sizes = [d.cardinality() if hasattr(d, "cardinality") else UNKNOWN for d in datasets]
        known = [n for n in sizes if n >= 0]
        n = UNKNOWN if UNKNOWN in sizes else min(known) if known else INFINITE
        return Dataset(lambda: zip(*(iter(d) for d in datasets)), n)

    # --- iteration ----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        return iter(self._make_iterator())

    def cardinality(self) -> int:
        """The number of elements; -1 when infinite, -2 when unknown (as ``tf.data``)."""
        return self._cardinality

    def __len__(self) -> int:
        n = self.cardinality()
        if n == INFINITE:
            raise TypeError("The dataset is infinite (repeat() without a count)")
        if n == UNKNOWN:
            raise TypeError("The dataset's length is unknown (after filter()); use "
                            "cardinality() or iterate it")
        return n

    def as_numpy_iterator(self) -> Iterator[Any]:
        """The elements, as NumPy arrays (they already are: kept for ``tf.data``'s API)."""
        return iter(self)

    def _derived(self, make: Callable[[], Iterator[Any]], cardinality: int) -> Dataset:
        out = Dataset(make, cardinality)
        out.class_names = self.class_names
        return out

    # --- transformations ----------------------------------------------------------------
    def map(self, map_func: Callable[..., Any], num_parallel_calls: Any = None,
            deterministic: Any = None) -> Dataset:
        """``map_func(element)`` for every element (a tuple element is passed as
        ``map_func(*element)``, as ``tf.data`` does)."""
        if not callable(map_func):
            raise TypeError(f"Dataset.map: map_func must be callable, received "
                            f"{type(map_func).__name__}")

        def apply(e: Any) -> Any:
            return map_func(*e) if isinstance(e, tuple) else map_func(e)
        return self._derived(lambda: (apply(e) for e in self), self.cardinality())

    def enumerate(self, start: int = 0) -> Dataset:
        """``(index, element)`` pairs, the index an int64 from ``start``."""
        return self._derived(lambda: ((np.int64(i), e) for i, e in enumerate(self, start)),
                             self.cardinality())

    def filter(self, predicate: Callable[..., Any]) -> Dataset:
        """The elements for which ``predicate(element)`` is true (length unknown)."""
        def keep(e: Any) -> bool:
            return bool(np.asarray(predicate(*e) if isinstance(e, tuple) else predicate(e)))
        return self._derived(lambda: (e for e in self if keep(e)), UNKNOWN)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: Any = None, deterministic: Any = None) -> Dataset:
        """Consecutive elements stacked ``batch_size`` at a time (the last batch smaller unless
        ``drop_remainder``)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) \
                or batch_size < 1:
            raise ValueError(f"Dataset.batch: batch_size must be a positive integer, received "
                             f"batch_size={batch_size!r}")
        size = int(batch_size)

        def gen() -> Iterator[Any]:
            it = iter(self)
            while True:
                chunk = list(itertools.islice(it, size))
                if not chunk or (drop_remainder and len(chunk) < size):
                    return
                yield stack_elements(chunk)
        n = self.cardinality()
        if n >= 0:
            n = n // size if drop_remainder else math.ceil(n / size)
        return self._derived(gen, n)

    def unbatch(self) -> Dataset:
        """Splits every batch into its rows (length unknown)."""
        def gen() -> Iterator[Any]:
            for b in self:
                for i in range(_rows(b)):
                    yield _row(b, i)
        return self._derived(gen, INFINITE if self.cardinality() == INFINITE else UNKNOWN)

    def rebatch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """The same rows in batches of ``batch_size`` (``unbatch().batch(batch_size)``)."""
        return self.unbatch().batch(batch_size, drop_remainder)

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (all with -1)."""
        count = _check_count("take", "count", count, allow_minus_one=True)
        if count == -1:
            return self._derived(lambda: iter(self), self.cardinality())
        n = self.cardinality()
        n = count if n == INFINITE else min(n, count) if n >= 0 else UNKNOWN
        return self._derived(lambda: itertools.islice(iter(self), count), n)

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements."""
        count = _check_count("skip", "count", count)
        n = self.cardinality()
        n = max(n - count, 0) if n >= 0 else n
        return self._derived(lambda: itertools.islice(iter(self), count, None), n)

    def repeat(self, count: int | None = None) -> Dataset:
        """The elements ``count`` times over (forever with None or -1)."""
        times = None if count is None or count == -1 else _check_count("repeat", "count", count)

        def gen() -> Iterator[Any]:
            k = 0
            while times is None or k < times:
                k += 1
                yield from self
        n = self.cardinality()
        if times is None:
            n = 0 if n == 0 else INFINITE
        elif n >= 0:
            n = n * times
        return self._derived(gen, n)

    def concatenate(self, dataset: Dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s."""
        if not hasattr(dataset, "__iter__"):
            raise TypeError(f"Dataset.concatenate: expected a dataset, received "
                            f"{type(dataset).__name__}")
        a = self.cardinality()
        b = dataset.cardinality() if hasattr(dataset, "cardinality") else UNKNOWN
        n = INFINITE if INFINITE in (a, b) else UNKNOWN if UNKNOWN in (a, b) else a + b
        return self._derived(lambda: itertools.chain(iter(self), iter(dataset)), n)

    def shuffle(self, buffer_size: int, seed: int | None = None,
                reshuffle_each_iteration: bool = True) -> Dataset:
        """Shuffles through a buffer of ``buffer_size`` elements, as ``tf.data`` does (a
        buffer at least as large as the dataset shuffles it uniformly). Every iteration draws
        a new order unless ``reshuffle_each_iteration=False``."""
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int | np.integer) \
                or buffer_size < 1:
            raise ValueError(f"Dataset.shuffle: buffer_size must be a positive integer, "
                             f"received buffer_size={buffer_size!r}")
        base = np.random.SeedSequence(seed).entropy if seed is None else int(seed)
        epochs = itertools.count()

        def gen() -> Iterator[Any]:
            epoch = next(epochs) if reshuffle_each_iteration else 0
            rng = np.random.default_rng([base, epoch])
            buf: list = []
            for e in self:
                if len(buf) < buffer_size:
                    buf.append(e)
                    continue
                j = int(rng.integers(len(buf)))
                yield buf[j]
                buf[j] = e
            while buf:
                yield buf.pop(int(rng.integers(len(buf))))
        return self._derived(gen, self.cardinality())

    def cache(self, filename: str = "") -> Dataset:
        """Keeps the elements of the first complete iteration in memory; later iterations
        read them from there (``filename`` is not used: the cache is in memory)."""
        store: list = []
        done = [False]

        def gen() -> Iterator[Any]:
            if done[0]:
                yield from store
                return
            store.clear()
            for e in self:
                store.append(e)
                yield e
            done[0] = True
        return self._derived(gen, self.cardinality())

    def prefetch(self, buffer_size: Any = None) -> Dataset:
        """The same dataset (kiln reads elements when they are asked for; kept so that
        ``tf.data`` pipelines run unchanged)."""
        return self._derived(lambda: iter(self), self.cardinality())

    @property
    def element_spec(self) -> Any:
        """Shapes and dtypes of the first element, ``(shape, dtype)`` per array (the first
        axis of a batch is None)."""
        first = next(iter(self))

        def spec(a: Any) -> tuple:
            a = np.asarray(a)
            return ((None,) + a.shape[1:] if a.ndim else (), a.dtype)
        return _map_structure(spec, first)

    def __repr__(self) -> str:
        n = self.cardinality()
        size = {INFINITE: "infinite", UNKNOWN: "unknown length"}.get(n, f"{n} elements")
        return f"{type(self).__name__}({size})"


class BatchSource(Dataset):
    """Base of the datasets that read their own batches (folders, windows of a series):
    a subclass defines ``__iter__`` and ``__len__``; the ``Dataset`` methods come from here."""

    def __init__(self) -> None:  # no make_iterator: __iter__ is the subclass's
        pass

    def cardinality(self) -> int:
        return len(self)

    def _derived(self, make: Callable[[], Iterator[Any]], cardinality: int) -> Dataset:
        out = Dataset(make, cardinality)
        out.class_names = getattr(self, "class_names", None)
        return out


__all__ = ["Dataset", "BatchSource", "stack_elements", "INFINITE", "UNKNOWN"]
