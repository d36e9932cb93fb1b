"""The split allreduce (``allreduce_start`` ... ``allreduce_wait``) and the bucketed,
overlapped gradient sums of data parallelism, in one process.

The oracle is a simulated group of two identical ranks (the sum is ``2 * x``) whose buffer
holds NaN while a sum is in flight: a kernel that read a started buffer before its wait would
turn the result into NaN, one that wrote into it fails the wait. The bucketed step must then
equal the one-allreduce step bit for bit (the 2-rank MPI runs are in test_data_parallel.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import ops
from kiln.core import register_group
from kiln.models.distributed import buckets


class TwinGroup:
    """Two identical ranks: every sum doubles; a started buffer is NaN until its wait (which
    checks that nothing wrote into it meanwhile)."""

    size = 2

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.pending: dict[int, np.ndarray] = {}

    @staticmethod
    def _key(buffer: np.ndarray) -> int:
        return buffer.__array_interface__["data"][0]

    def allreduce_sum(self, buffer: np.ndarray) -> None:
        buffer *= 2
        self.events.append(("sum", buffer.size))

    def allreduce_start(self, buffer: np.ndarray) -> None:
        assert self._key(buffer) not in self.pending
        self.pending[self._key(buffer)] = buffer * 2
        buffer[...] = np.nan
        self.events.append(("start", buffer.size))

    def allreduce_wait(self, buffer: np.ndarray) -> None:
        assert np.isnan(buffer).all(), "a kernel wrote into a sum in flight"
        buffer[...] = self.pending.pop(self._key(buffer))
        self.events.append(("wait", buffer.size))


@pytest.fixture
def twin():
    group = TwinGroup()
    register_group("test-twin", group)
    yield group
    register_group("test-twin", None)


def test_split_allreduce_overlaps_the_independent_kernels(twin):
    x = kiln.placeholder((5,), "float64")
    y = kiln.placeholder((7,), "float64")
    started = ops.apply_op("allreduce_start", x * 3.0, group="test-twin")
    summed = ops.apply_op("allreduce_wait", started, group="test-twin")
    chain = ops.sum(ops.sin(ops.exp(y) * 2.0) - y)  # independent of the sum
    fn = kiln.function([x, y], [summed * chain, chain])
    kernels = [n.op for n in fn.program.kernels_order]
    start, wait = kernels.index("allreduce_start"), kernels.index("allreduce_wait")
    assert start < wait - 1, kernels  # the independent kernels run between them
    xv, yv = np.linspace(-1, 1, 5), np.linspace(0, 2, 7)
    got, got_chain = fn(xv, yv)
    expected_chain = np.sum(np.sin(np.exp(yv) * 2.0) - yv)
    np.testing.assert_allclose(got_chain, expected_chain, rtol=1e-12)
    np.testing.assert_allclose(got, 2 * (3 * xv) * expected_chain, rtol=1e-12)
    assert twin.events == [("start", 5), ("wait", 5)]


def test_a_group_without_start_sums_at_the_start():
    x = kiln.placeholder((4,), "float32")
    fn = kiln.function([x], ops.apply_op("allreduce_wait", ops.apply_op(
        "allreduce_start", x + 1.0, group="local"), group="local"))
    np.testing.assert_array_equal(fn(np.arange(4, dtype="float32")), np.arange(1, 5))


@pytest.mark.parametrize("op", ["allreduce_start", "allreduce_wait"])
def test_split_allreduce_errors_name_the_op(op):
    with pytest.raises(TypeError, match=f"{op}: sums float tensors, received"):
        ops.apply_op(op, kiln.placeholder((3,), "int32"), group="local")
    with pytest.raises(TypeError, match=f"{op}: group must be a string, received 3"):
        ops.apply_op(op, kiln.placeholder((3,), "float32"), group=3)


def test_buckets_follow_the_backward_pass():
    """The last layer's gradient (computed first by the backward pass) fills the first bucket;
    each bucket holds at least ``bucket_bytes`` but the last."""
    x = kiln.placeholder((8, 6), "float32")
    w1, w2, w3 = (kiln.Variable(np.full(s, 0.1, "float32")) for s in ((6, 5), (5, 4), (4, 3)))
    h1 = ops.tanh(ops.matmul(x, w1))
    h2 = ops.tanh(ops.matmul(h1, w2))
    loss = ops.sum(ops.matmul(h2, w3))
    grads = kiln.grad(loss, [w1, w2, w3])
    assert buckets(grads, [0, 1, 2], 1) == [[2], [1], [0]]
    assert buckets(grads, [0, 1, 2], 12 * 4) == [[2], [1], [0]]  # 48 bytes: full
    assert buckets(grads, [0, 1, 2], 12 * 4 + 1) == [[2, 1], [0]]
    assert buckets(grads, [0, 1, 2], 10**9) == [[2, 1, 0]]


class TwinDistribution:
    """What a step compiled for data parallelism uses of a DataParallel, over :class:`TwinGroup`:
    rank 0 of two identical ranks."""

    rank, world_size, group_name = 0, 2, "test-twin"

    def __init__(self, group: TwinGroup, bucket_bytes: int | None):
        self.group = group
        self.bucket_bytes = bucket_bytes


class TwinCollectives(TwinGroup):
    """With the collectives fit runs between steps (the ranks agree at once)."""

    def allgather_json(self, value):
        return [value, value]

    def broadcast(self, buffer, root=0):
        return None

    def poison(self, reason):
        return None


def _train(monkeypatch, bucket_bytes, model_kind):
    group = TwinCollectives()
    dist = TwinDistribution(group, bucket_bytes)
    register_group(dist.group_name, group)
    monkeypatch.setitem(kiln.distribution._current, "dist", dist)
    try:
        kiln.utils.set_random_seed(7)
        rng = np.random.default_rng(0)
        if model_kind == "mlp":
            x = rng.standard_normal((64, 12)).astype("float32")
            layers = [kiln.layers.Input((12,)), kiln.layers.Dense(16, activation="relu"),
                      kiln.layers.Dense(3, activation="softmax")]
        else:  # with BatchNormalization: its moving statistics are summed too
            x = rng.standard_normal((64, 6, 6, 1)).astype("float32")
            layers = [kiln.layers.Input((6, 6, 1)), kiln.layers.Conv2D(4, 3),
                      kiln.layers.BatchNormalization(), kiln.layers.Flatten(),
                      kiln.layers.Dense(3, activation="softmax")]
        y = rng.integers(0, 3, 64).astype("int32")
        model = kiln.Sequential(layers)
        model.compile(optimizer=kiln.optimizers.Adam(0.01),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        hist = model.fit(x[:60], y[:60], batch_size=16, epochs=2, verbose=0, shuffle=False,
                         validation_data=(x[60:], y[60:]))  # a last batch of 12 rows
        ev = model.evaluate(x, y, batch_size=24, verbose=0)
        return model.get_weights(), hist.history, ev, [e for e, _ in group.events]
    finally:
        register_group(dist.group_name, None)


@pytest.mark.parametrize("model_kind", ["mlp", "bn"])
def test_bucketed_step_equals_one_allreduce_bit_for_bit(monkeypatch, model_kind):
    w_one, h_one, e_one, ev_one = _train(monkeypatch, None, model_kind)
    w_bkt, h_bkt, e_bkt, ev_bkt = _train(monkeypatch, 256, model_kind)
    assert set(ev_one) == {"sum"} and ev_bkt.count("start") > 8  # several buckets per step
    assert ev_bkt.count("start") == ev_bkt.count("wait")
    for a, b in zip(w_one, w_bkt):
        assert np.all(np.isfinite(b))
        np.testing.assert_array_equal(a, b)
    assert h_one == h_bkt and e_one == e_bkt


def test_bucket_bytes_is_checked():
    pytest.importorskip("mpi4py")
    for bad in (0, -5, 1.5, True, "1MB"):
        with pytest.raises(ValueError, match="bucket_bytes must be a positive integer or "
                                             f"None, received {bad!r}"):
            kiln.distribution.DataParallel(bucket_bytes=bad)


@pytest.mark.mpi
def test_mpi_group_start_and_wait_on_one_rank():
    """One rank: the started sum is the buffer itself; a wait needs its start; an empty
    buffer sums nothing."""
    pytest.importorskip("mpi4py")
    group = kiln.distribution.DataParallel(timeout=30).group
    a = np.arange(6, dtype="float32")
    b = np.ones((2, 3), "float64")
    group.allreduce_start(a)
    group.allreduce_start(b)
    group.allreduce_wait(b)
    group.allreduce_wait(a)
    np.testing.assert_array_equal(a, np.arange(6))
    np.testing.assert_array_equal(b, np.ones((2, 3)))
    with pytest.raises(kiln.distribution.DistributionError,
                       match="allreduce_wait of 6 float32 values: no allreduce was started"):
        group.allreduce_wait(a)
    empty = np.zeros(0, "float32")
    group.allreduce_start(empty)
    group.allreduce_wait(empty)
