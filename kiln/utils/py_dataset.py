"""``PyDataset`` (``keras.utils.PyDataset``, alias ``Sequence``): a dataset of batches by
index, which ``fit``/``evaluate``/``predict`` take as ``x``.

The trainer treats any object with ``__len__`` and ``__getitem__`` as a sequence of batches
(``kiln/models/data.py``, ``IterableAdapter``): ``len()`` is the number of steps per epoch and
``on_epoch_end`` is called after each epoch. A ``PyDataset`` adds :meth:`iter_batches`, which
the adapter uses to read an epoch: with ``workers > 1`` a thread pool prepares up to
``max_queue_size`` batches ahead, and they are still handed out in order.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class PyDataset:
    """Base class of a dataset of batches: subclass it, define ``__len__`` (the number of
    batches) and ``__getitem__(index)`` (the batch: ``x``, ``(x, y)`` or
    ``(x, y, sample_weight)``), and optionally ``on_epoch_end``.

    Args:
        workers: Threads preparing batches ahead of the training step (1: in the loop).
        use_multiprocessing: Keras' processes are not used: kiln always prefetches with
            threads (NumPy and file reads release the GIL). True gives a warning once.
        max_queue_size: Batches prepared ahead at most (with ``workers > 1``).

    Example:
        >>> class Batches(kiln.utils.PyDataset):
        ...     def __init__(self, x, y, batch_size, **kwargs):
        ...         super().__init__(**kwargs)
        ...         self.x, self.y, self.batch_size = x, y, batch_size
        ...     def __len__(self):
        ...         return -(-len(self.x) // self.batch_size)
        ...     def __getitem__(self, i):
        ...         s = slice(i * self.batch_size, (i + 1) * self.batch_size)
        ...         return self.x[s], self.y[s]
        >>> model.fit(Batches(x, y, 32, workers=4), epochs=3)  # doctest: +SKIP
    """

    def __init__(self, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10):
        for name, value in (("workers", workers), ("max_queue_size", max_queue_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < (
                    0 if name == "workers" else 1):
                raise ValueError(f"{type(self).__name__}: {name} must be a "
                                 f"{'non-negative' if name == 'workers' else 'positive'} "
                                 f"integer, received {value!r}")
        self._workers = workers
        self._use_multiprocessing = bool(use_multiprocessing)
        self._max_queue_size = max_queue_size

    # Subclasses that do not call super().__init__() still work (Keras allows it too).
    @property
    def workers(self) -> int:
        return getattr(self, "_workers", 1)

    @workers.setter
    def workers(self, value: int) -> None:
        self._workers = value

    @property
    def use_multiprocessing(self) -> bool:
        return getattr(self, "_use_multiprocessing", False)

    @use_multiprocessing.setter
    def use_multiprocessing(self, value: bool) -> None:
        self._use_multiprocessing = value

    @property
    def max_queue_size(self) -> int:
        return getattr(self, "_max_queue_size", 10)

    @max_queue_size.setter
    def max_queue_size(self, value: int) -> None:
        self._max_queue_size = value

    @property
    def num_batches(self) -> int | None:
        """``len(self)``, or None when the subclass defines no ``__len__``; or the number a
        subclass assigned (``self.num_batches = n`` in ``__init__``, as tf.keras-era
        ``Sequence`` subclasses do: keras.io's metric-learning example)."""
        if "_num_batches" in self.__dict__:
            return self.__dict__["_num_batches"]
        try:
            return len(self)  # type: ignore[arg-type]
        except TypeError:
            return None

    @num_batches.setter
    def num_batches(self, value: int | None) -> None:
        # Keras 3's property has no setter; a subclass that declares its size this way means
        # what an overriding property would (the loops read ``num_batches`` or ``len``)
        if value is not None and (isinstance(value, bool) or int(value) != value or value < 0):
            raise ValueError(f"{type(self).__name__}.num_batches must be a non-negative int "
                             f"or None, received {value!r}")
        self.__dict__["_num_batches"] = None if value is None else int(value)

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__(index), "
                                  "returning the batch of that index")

    def on_epoch_begin(self) -> None:
        """Called at the start of every epoch (before its first batch is read)."""

    def on_epoch_end(self) -> None:
        """Called at the end of every epoch (e.g. to reshuffle)."""

    def iter_batches(self, order: Iterable[int]) -> Iterator[Any]:
        """The batches ``self[i]`` for ``i`` in ``order``, in that order, prepared by
        ``workers`` threads up to ``max_queue_size`` ahead. Calls :meth:`on_epoch_begin`.

        Args:
            order: The batch indices of one epoch.

        Returns:
            An iterator of batches; closing it early cancels the batches not yet started.
        """
        self.on_epoch_begin()
        indices = iter(int(i) for i in order)
        workers = int(self.workers or 1)
        if workers <= 1:
            return (self[i] for i in indices)
        if self.use_multiprocessing and not getattr(PyDataset, "_warned", False):
            PyDataset._warned = True  # type: ignore[attr-defined]
            warnings.warn("PyDataset: use_multiprocessing=True is served by threads in kiln "
                          "(no processes are started)", stacklevel=2)
        return self._prefetch(indices, workers, max(1, int(self.max_queue_size)))

    def _prefetch(self, indices: Iterator[int], workers: int, depth: int) -> Iterator[Any]:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kiln-pydataset")
        pending: deque[Future] = deque()
        try:
            for i in indices:
                pending.append(pool.submit(self.__getitem__, i))
                if len(pending) >= depth:
                    break
            while pending:
                batch = pending.popleft().result()  # an error in __getitem__ raises here
                nxt = next(indices, None)
                if nxt is not None:
                    pending.append(pool.submit(self.__getitem__, nxt))
                yield batch
        finally:
            for fut in pending:
                fut.cancel()
            pool.shutdown(wait=True)


Sequence = PyDataset
