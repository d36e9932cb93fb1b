"""``timeseries_dataset_from_array`` (``keras.utils``): sliding windows over a sequence,
as a re-iterable dataset of ``(x, y)`` batches that ``fit``/``evaluate``/``predict`` take."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from kiln.random_state import numpy_rng
from kiln.utils.dataset_ops import BatchSource


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"timeseries_dataset_from_array: {name} must be a positive integer, "
                         f"received {name}={value!r}")
    return int(value)


class TimeseriesDataset(BatchSource):
    """The windows :func:`timeseries_dataset_from_array` returns: iterate it (once per epoch)
    for batches; ``len()`` is the number of batches. It has the methods of
    :class:`kiln.utils.Dataset` (``map``, ``batch``, ``take`` ...).

    Attributes:
        start_positions: The first index (relative to ``start_index``) of every window, in
            the order of the first iteration.
    """

    def __init__(self, data: np.ndarray, targets: np.ndarray | None, sequence_length: int,
                 sampling_rate: int, batch_size: int | None, start_positions: np.ndarray,
                 start_index: int, shuffle: bool, seed: int | None):
        self.data, self.targets = data, targets
        self.sequence_length, self.sampling_rate = sequence_length, sampling_rate
        self.batch_size = batch_size
        self.start_positions = start_positions
        self.start_index = start_index
        self.shuffle = shuffle
        self._rng = np.random.RandomState(seed) if seed is not None else None
        self._epochs = 0
        self._offsets = np.arange(sequence_length) * sampling_rate

    def __len__(self) -> int:
        n = len(self.start_positions)
        return n if self.batch_size is None else math.ceil(n / self.batch_size)

    def _order(self) -> np.ndarray:
        positions = self.start_positions
        if self.shuffle and self._epochs > 0:  # a new order every epoch after the first
            perm = (self._rng.permutation(len(positions)) if self._rng is not None
                    else numpy_rng().permutation(len(positions)))
            positions = positions[perm]
        self._epochs += 1
        return positions

    def _window(self, starts: np.ndarray) -> Any:
        first = self.start_index + starts
        x = self.data[first[:, None] + self._offsets]
        if self.targets is None:
            return x
        return x, self.targets[first]

    def __iter__(self) -> Iterator[Any]:
        positions = self._order()
        if self.batch_size is None:
            for p in positions:
                item = self._window(np.array([p]))
                yield item[0] if self.targets is None else (item[0][0], item[1][0])
            return
        for i in range(0, len(positions), self.batch_size):
            yield self._window(positions[i:i + self.batch_size])

    def __repr__(self) -> str:
        return (f"TimeseriesDataset({len(self.start_positions)} sequences of length "
                f"{self.sequence_length}, {len(self)} batches)")


def timeseries_dataset_from_array(data: Any, targets: Any, sequence_length: int,
                                  sequence_stride: int = 1, sampling_rate: int = 1,
                                  batch_size: int | None = 128, shuffle: bool = False,
                                  seed: int | None = None, start_index: int | None = None,
                                  end_index: int | None = None,
                                  format: str = "tf") -> Any:  # noqa: A002
    """Sliding windows over ``data``, like ``keras.utils.timeseries_dataset_from_array``.

    Window ``i`` holds ``data[s, s + sampling_rate, ..., s + (sequence_length - 1) *
    sampling_rate]`` with ``s = start_index + start_positions[i]``, the start positions being
    ``0, sequence_stride, 2 * sequence_stride ...`` while the window ends before ``end_index``;
    its target is ``targets[s]`` (Keras' alignment: to predict the value after a window, pass
    ``targets=data[sequence_length:]``). Only rows ``start_index <= t < end_index`` are used.

    Args:
        data: Array (or array-like) of timesteps on axis 0.
        targets: Targets aligned with ``data`` on axis 0 (may be shorter: windows without a
            target are dropped), or None to yield ``x`` batches only.
        sequence_length: Timesteps per window.
        sequence_stride: Shift between the starts of consecutive windows.
        sampling_rate: Step between the timesteps of a window.
        batch_size: Windows per batch (the last may be smaller); None yields single windows.
        shuffle: Shuffle the windows. The first epoch's order is Keras' (the start positions
            shuffled by ``np.random.RandomState(seed)``); later epochs reshuffle.
        seed: Seed of the shuffle; None uses kiln's seeded generator.
        start_index: First row used (default 0).
        end_index: Rows from this one on are not used (default ``len(data)``).

    Returns:
        A :class:`TimeseriesDataset`: iterating it yields ``(x, y)`` batches (``x`` alone
        without targets), ``x`` of shape ``(batch, sequence_length) + data.shape[1:]``; it can
        be iterated again for every epoch, and ``len()`` gives the number of batches. With
        TensorFlow installed, a ``tf.data.Dataset`` of the same batches, as Keras returns
        (``kiln.utils.set_dataset_format("kiln")`` keeps kiln's).

    Raises:
        ValueError: Non-positive lengths or strides, indices outside the data, or no window
            fitting between ``start_index`` and ``end_index``.

    Example:
        >>> data = np.arange(100.0)[:, None]
        >>> ds = kiln.utils.timeseries_dataset_from_array(data[:-10], data[10:],
        ...                                                sequence_length=10, batch_size=16)
        >>> x, y = next(iter(ds))
        >>> x.shape, float(x[0, -1, 0]), float(y[0, 0])
        ((16, 10, 1), 9.0, 10.0)
        >>> model.fit(ds, epochs=5)  # doctest: +SKIP
    """
    if format != "tf":  # kiln returns its own dataset (batches of NumPy arrays)
        raise ValueError(f"timeseries_dataset_from_array: format={format!r} is not supported by "
                         "kiln; the default 'tf' returns kiln's dataset of NumPy batches")
    data = np.asarray(data)
    if data.ndim == 0:
        raise ValueError("timeseries_dataset_from_array: data must have a time axis, received "
                         "a scalar")
    n = len(data)
    sequence_length = _positive("sequence_length", sequence_length)
    sequence_stride = _positive("sequence_stride", sequence_stride)
    sampling_rate = _positive("sampling_rate", sampling_rate)
    if batch_size is not None:
        batch_size = _positive("batch_size", batch_size)
    start = 0 if start_index is None else int(start_index)
    end = n if end_index is None else int(end_index)
    if not 0 <= start < n:
        raise ValueError(f"timeseries_dataset_from_array: start_index must be in [0, {n}) for "
                         f"data of length {n}, received start_index={start_index}")
    if not start < end <= n:
        raise ValueError(f"timeseries_dataset_from_array: end_index must be in "
                         f"({start}, {n}] (above start_index={start}, at most the data length "
                         f"{n}), received end_index={end_index}")
    num_seqs = end - start - (sequence_length - 1) * sampling_rate
    if targets is not None:
        targets = np.asarray(targets)
        if targets.ndim == 0:
            raise ValueError("timeseries_dataset_from_array: targets must be an array with a "
                             "time axis, received a scalar")
        num_seqs = min(num_seqs, len(targets) - start)
    if num_seqs <= 0:
        raise ValueError(
            f"timeseries_dataset_from_array: no window fits: sequence_length={sequence_length} "
            f"with sampling_rate={sampling_rate} spans "
            f"{(sequence_length - 1) * sampling_rate + 1} rows, but rows {start} to {end} "
            f"of data of length {n}"
            + (f" (and targets of length {len(targets)})" if targets is not None else "")
            + " are available")
    positions = np.arange(0, num_seqs, sequence_stride, dtype=np.int64)
    if shuffle:
        rng = np.random.RandomState(seed) if seed is not None else None
        if rng is None:
            positions = positions[numpy_rng().permutation(len(positions))]
        else:
            rng.shuffle(positions)
    ds = TimeseriesDataset(data, targets, sequence_length, sampling_rate, batch_size,
                           positions, start, bool(shuffle), seed)
    from kiln.utils.tf_interop import dataset_format
    if dataset_format() == "tf":  # Keras' type where TensorFlow is installed
        return _tf_windows(ds, seed)
    return ds


def _tf_windows(ds: TimeseriesDataset, seed: int | None) -> Any:
    """Keras' ``tf.data`` pipeline of the same windows: gathered from the data with TF ops
    in the order of the start positions, shuffled again by ``Dataset.shuffle(8 *
    batch_size, seed)`` (1024 unbatched) when ``shuffle``, then batched."""
    import tensorflow as tf
    data = tf.constant(ds.data[ds.start_index:])
    offsets = tf.constant(ds._offsets)
    out = tf.data.Dataset.from_tensor_slices(ds.start_positions)
    if ds.targets is None:
        out = out.map(lambda p: tf.gather(data, p + offsets))
    else:
        targets = tf.constant(ds.targets[ds.start_index:])
        out = out.map(lambda p: (tf.gather(data, p + offsets), tf.gather(targets, p)))
    if ds.shuffle:
        buffer = 8 * ds.batch_size if ds.batch_size is not None else 1024
        out = out.shuffle(buffer_size=buffer, seed=seed)
    if ds.batch_size is not None:
        out = out.batch(ds.batch_size)
    return out.prefetch(tf.data.AUTOTUNE)
