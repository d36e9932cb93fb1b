"""PyDataset / Sequence: fit/evaluate/predict take it (len = steps, on_epoch_end, workers
prefetching in order), compared with the same batches given as arrays; list batches."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import kiln
from kiln import layers


def data(n=96):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return x, y


class Batches(kiln.utils.PyDataset):
    def __init__(self, x, y, batch_size, delay=0.0, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size, self.delay = x, y, batch_size, delay
        self.epoch_ends, self.epoch_begins, self.threads = 0, 0, set()

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, i):
        self.threads.add(threading.current_thread().name)
        if self.delay:
            time.sleep(self.delay * (i % 3))  # later batches may finish first
        s = slice(i * self.batch_size, (i + 1) * self.batch_size)
        return self.x[s], self.y[s]

    def on_epoch_begin(self):
        self.epoch_begins += 1

    def on_epoch_end(self):
        self.epoch_ends += 1


def model():
    kiln.utils.set_random_seed(11)
    m = kiln.Sequential([kiln.Input((6,)), layers.Dense(8, activation="relu"),
                         layers.Dense(2, activation="softmax")])
    m.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return m


@pytest.mark.parametrize("workers", [1, 3])
def test_fit_on_pydataset_equals_fit_on_arrays(workers):
    x, y = data()
    ds = Batches(x, y, 20, delay=0.002 if workers > 1 else 0.0, workers=workers,
                 max_queue_size=2)
    a, b = model(), model()
    ha = a.fit(ds, epochs=2, shuffle=False, verbose=0).history
    hb = b.fit(x, y, batch_size=20, epochs=2, shuffle=False, verbose=0).history
    np.testing.assert_allclose(ha["loss"], hb["loss"], rtol=1e-6)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)
    assert ds.epoch_ends == 2
    if workers > 1:
        assert any(t.startswith("kiln-pydataset") for t in ds.threads)
    np.testing.assert_allclose(a.predict(ds, verbose=0), a.predict(x, verbose=0), rtol=1e-6)
    np.testing.assert_allclose(a.evaluate(ds, verbose=0), a.evaluate(x, y, verbose=0),
                               rtol=1e-6)


def test_prefetch_keeps_order_and_propagates_errors():
    x, y = data(40)
    ds = Batches(x, y, 4, delay=0.003, workers=4, max_queue_size=3)
    got = list(ds.iter_batches(range(len(ds))))
    np.testing.assert_array_equal(np.concatenate([b[0] for b in got]), x)
    assert ds.epoch_begins == 1

    class Broken(Batches):
        def __getitem__(self, i):
            if i == 2:
                raise KeyError("batch 2 is broken")
            return super().__getitem__(i)

    with pytest.raises(KeyError, match="batch 2 is broken"):
        list(Broken(x, y, 4, workers=2).iter_batches(range(10)))


def test_sequence_alias_and_bad_arguments():
    assert kiln.utils.Sequence is kiln.utils.PyDataset
    with pytest.raises(ValueError, match="Batches: workers must be a non-negative integer, "
                                         "received -1"):
        Batches(*data(8), 4, workers=-1)

    class NoInit(kiln.utils.Sequence):
        def __len__(self):
            return 1

    ds = NoInit()
    assert (ds.workers, ds.use_multiprocessing, ds.max_queue_size, ds.num_batches) == (
        1, False, 10, 1)
    with pytest.raises(NotImplementedError, match="NoInit must define __getitem__"):
        ds[0]


def test_generator_of_lists_like_a_torch_dataloader():
    x, y = data(64)
    a, b = model(), model()

    class Loader:  # re-iterable, yields [x, y] lists as torch's DataLoader does
        def __iter__(self):
            return ([x[i:i + 16], y[i:i + 16]] for i in range(0, 64, 16))

    a.fit(Loader(), epochs=2, verbose=0)
    b.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-6)
