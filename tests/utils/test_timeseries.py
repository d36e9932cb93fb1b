"""timeseries_dataset_from_array: windows, strides, sampling rate, targets alignment,
indices and shuffling against windows built by hand; and fit on it."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers
from kiln.utils import timeseries_dataset_from_array as tsds


def windows(data, targets, length, stride, rate, start, end):
    """Keras' windows, by hand: start s = start + k * stride while the window ends < end."""
    xs, ys = [], []
    s = start
    while s + (length - 1) * rate < end and (targets is None or s < len(targets)):
        xs.append(data[s:s + (length - 1) * rate + 1:rate])
        if targets is not None:
            ys.append(targets[s])
        s += stride
    return np.array(xs), (np.array(ys) if targets is not None else None)


@pytest.mark.parametrize("length, stride, rate, batch, start, end", [
    (5, 1, 1, 4, None, None), (3, 2, 2, 5, None, None), (4, 3, 1, 2, 7, 40),
    (2, 1, 3, 100, 10, None)])
def test_windows_and_targets(length, stride, rate, batch, start, end):
    data = np.arange(100, dtype=np.float32).reshape(50, 2)
    targets = np.arange(50) * 10
    ds = tsds(data, targets, length, sequence_stride=stride, sampling_rate=rate,
              batch_size=batch, start_index=start, end_index=end)
    want_x, want_y = windows(data, targets, length, stride, rate, start or 0, end or 50)
    batches = list(ds)
    assert len(batches) == len(ds) == -(-len(want_x) // batch)
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), want_x)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), want_y)
    assert all(len(b[0]) == batch for b in batches[:-1])


def test_keras_forecasting_alignment_and_unbatched():
    data = np.arange(20)
    ds = tsds(data[:-3], data[3:], sequence_length=3, batch_size=None)
    items = list(ds)
    assert len(items) == 15
    x, y = items[4]
    assert x.tolist() == [4, 5, 6] and int(y) == 7  # the value right after the window
    only_x = list(tsds(data, None, sequence_length=4, sequence_stride=8, batch_size=2))
    assert [b.tolist() for b in only_x] == [[[0, 1, 2, 3], [8, 9, 10, 11]], [[16, 17, 18, 19]]]


def test_shuffle_follows_keras_first_order_and_reiterates():
    data = np.arange(30)
    ds = tsds(data, data, sequence_length=2, batch_size=4, shuffle=True, seed=7)
    pos = np.arange(29)
    np.random.RandomState(7).shuffle(pos)
    first = np.concatenate([b[1] for b in ds])
    np.testing.assert_array_equal(first, pos)
    second = np.concatenate([b[1] for b in ds])
    assert sorted(second.tolist()) == list(range(29)) and second.tolist() != first.tolist()
    x, y = next(iter(tsds(data, data, 2, batch_size=4, shuffle=True, seed=7)))
    np.testing.assert_array_equal(x[:, 0], y)


@pytest.mark.parametrize("kwargs, match", [
    ({"sequence_length": 0}, "sequence_length must be a positive integer, received "
                             "sequence_length=0"),
    ({"sequence_length": 3, "sampling_rate": -1}, "sampling_rate must be a positive"),
    ({"sequence_length": 3, "start_index": 10}, r"start_index must be in \[0, 10\)"),
    ({"sequence_length": 3, "start_index": 4, "end_index": 4}, "end_index must be in"),
    ({"sequence_length": 11}, "no window fits: sequence_length=11"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tsds(np.arange(10), None, **kwargs)


def test_fit_on_timeseries_dataset_equals_fit_on_arrays():
    rng = np.random.default_rng(0)
    series = rng.normal(size=(60, 3)).astype(np.float32)
    target = series[:, 0].copy()
    ds = tsds(series[:-4], target[4:], sequence_length=4, batch_size=16)
    x, y = windows(series[:-4], target[4:], 4, 1, 1, 0, 56)

    def model():
        kiln.utils.set_random_seed(3)
        m = kiln.Sequential([kiln.Input((4, 3)), layers.Flatten(), layers.Dense(1)])
        m.compile("sgd", "mse")
        return m

    a, b = model(), model()
    ha = a.fit(ds, epochs=2, verbose=0).history
    hb = b.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
    np.testing.assert_allclose(ha["loss"], hb["loss"], rtol=1e-6)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)
    np.testing.assert_allclose(a.evaluate(ds, verbose=0), b.evaluate(x, y, verbose=0),
                               rtol=1e-6)
