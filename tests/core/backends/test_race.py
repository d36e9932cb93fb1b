"""A plan's split steps spread over the workers or in order on the caller, whichever its calls
measure faster (kiln/core/backends/cpu/runtime/race.py). Oracles: the race's rule on given
times (a fake clock), and the same plan's other way (the same parts: the same bits)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.core.backends.cpu.runtime import race, spin_pool, threads
from kiln.core.backends.cpu.runtime.race import BLOCK, ORDERED, ROUNDS, SPREAD, Race


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _run(r: Race, spread_ns: int, ordered_ns: int, calls: int) -> list[int]:
    ways = []
    for _ in range(calls):
        way = r.way()
        ways.append(way)
        if r.settled is None:
            r.record(way, spread_ns if way == SPREAD else ordered_ns)
    return ways


def _race_length() -> int:
    return BLOCK + 2 * BLOCK * ROUNDS  # the warm-up block, then the rounds


@pytest.mark.parametrize("spread,ordered,want", [(30, 50, SPREAD), (50, 30, ORDERED),
                                                 (40, 40, ORDERED), (39, 40, ORDERED),
                                                 (38, 40, SPREAD)])
def test_the_race_settles_on_the_faster_way(spread, ordered, want):
    # the workers only where they make a call at least 3% faster
    r = Race(Clock())
    ways = _run(r, spread, ordered, _race_length())
    assert r.settled == want and r.races == 1
    # blocks of each way in turn after the warm-up block (spread)
    assert ways[:BLOCK] == [SPREAD] * BLOCK
    rounds = ways[BLOCK:]
    assert rounds == ([SPREAD] * BLOCK + [ORDERED] * BLOCK) * ROUNDS
    assert _run(r, spread, ordered, 50) == [want] * 50


def test_a_blocks_first_call_and_the_warm_up_do_not_count():
    r = Race(Clock())
    for k in range(_race_length()):
        way = r.way()
        first = k < BLOCK or (k - BLOCK) % BLOCK == 0
        # spread is slow only where it should not count
        r.record(way, (1000 if first else 10) if way == SPREAD else 20)
    assert r.settled == SPREAD


def test_long_calls_run_spread_without_a_race():
    # a training step of 2 ms: its warm-up block settles it, no call runs in order
    clock = Clock()
    r = Race(clock)
    ways = _run(r, 2 * race.LONG_NS, 10, 200)
    assert set(ways) == {SPREAD} and r.settled == SPREAD and r.races == 1
    clock.now += race.RACE_EVERY_S + 1.0  # raced again: another warm-up block, spread
    ways = _run(r, 2 * race.LONG_NS, 10, race.CHECK_EVERY + 2 * BLOCK)
    assert set(ways) == {SPREAD} and r.races == 2


def test_a_settled_race_runs_again_after_a_while():
    clock = Clock()
    r = Race(clock)
    _run(r, 10, 50, _race_length())
    assert r.settled == SPREAD
    clock.now += race.RACE_EVERY_S - 0.5
    assert set(_run(r, 10, 50, 4 * race.CHECK_EVERY)) == {SPREAD}
    assert r.settled == SPREAD
    clock.now += 1.0  # the load changed: in order is faster now
    ways = _run(r, 50, 10, race.CHECK_EVERY + _race_length())
    assert r.settled == ORDERED and r.races == 2
    assert ORDERED in ways and ways[-1] == ORDERED


def test_a_long_race_waits_longer_before_the_next():
    clock = Clock()
    r = Race(clock)
    for _ in range(_race_length()):  # each call takes 0.05 s of the clock: a training step
        way = r.way()
        clock.now += 0.05
        r.record(way, 10 if way == SPREAD else 20)
    assert r.settled == SPREAD
    length = 0.05 * _race_length()
    clock.now += race.RACE_EVERY_S + 1.0
    _run(r, 10, 20, race.CHECK_EVERY)
    assert r.races == 1 and r.settled == SPREAD  # 100 race lengths have not passed
    clock.now += race.LENGTHS * length
    _run(r, 10, 20, race.CHECK_EVERY)
    assert r.settled is None  # racing again


def _convnet() -> kiln.Model:
    kiln.utils.set_random_seed(11)
    return kiln.Sequential([
        kiln.layers.Input((16, 16, 3)),
        kiln.layers.Conv2D(16, 3, activation="relu"),
        kiln.layers.MaxPooling2D(2),
        kiln.layers.Conv2D(32, 3, activation="relu"),
        kiln.layers.Flatten(),
        kiln.layers.Dense(10, activation="softmax")])


def _plan(model: kiln.Model, x: np.ndarray):
    model.predict_on_batch(x)
    return model.predict_function.program.plan([x])


def _settle(r: Race, way: int) -> None:
    r.settled, r.countdown = way, 1 << 30


@pytest.mark.parametrize("batch", [1, 3])
def test_both_ways_give_the_same_bits(batch, cpu_options, monkeypatch):
    # every split step split (serial_work 0), two parts: the Python loop's race, or the
    # native plan's where it takes the plan
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    cpu_options(serial_work=0, gemv_split_work=0, winograd_point_split_work=0)
    model = _convnet()
    x = np.random.default_rng(batch).normal(size=(batch, 16, 16, 3)).astype(np.float32)
    plan = _plan(model, x)
    r = plan.native.race if plan.native is not None else plan.loop.race
    assert plan.loop is not None and any(race.unforced(fn) for fn, _ in plan.calls)
    _settle(r, SPREAD)
    spread = model.predict_on_batch(x)
    _settle(r, ORDERED)
    placed = []
    real = spin_pool.POOL.place
    monkeypatch.setattr(spin_pool.POOL, "place", lambda: (placed.append(1), real()))
    ordered = model.predict_on_batch(x)
    np.testing.assert_array_equal(ordered, spread)
    if plan.native is not None:
        assert not placed  # the workers were not asked for
    # the loop's in-order calls are SerialParts of the same kernels and arguments
    if plan.native is None:
        kinds = {type(fn).__name__ for fn, _ in plan.loop.ordered}
        assert "SplitCall" not in kinds and "SerialParts" in kinds
        assert all(a is b for (_, a), (_, b) in zip(plan.loop.ordered, plan.calls))


def test_a_plan_races_through_its_calls_and_keeps_its_answers(cpu_options, monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    cpu_options(serial_work=0)
    model = _convnet()
    xs = [np.random.default_rng(k).normal(size=(1, 16, 16, 3)).astype(np.float32)
          for k in range(3)]
    want = [model.predict_on_batch(x) for x in xs]
    plan = _plan(model, xs[0])
    r = plan.native.race if plan.native is not None else plan.loop.race
    for k in range(_race_length() + 10):
        np.testing.assert_array_equal(model.predict_on_batch(xs[k % 3]), want[k % 3])
    assert r.races == 1 and r.settled in (SPREAD, ORDERED)


def test_the_race_off_and_plans_without_split_steps_have_no_loop(cpu_options, monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    x = np.random.default_rng(0).normal(size=(1, 16, 16, 3)).astype(np.float32)
    cpu_options(serial_work=0, race=False)
    plan = _plan(_convnet(), x)
    assert plan.loop is None and (plan.native is None or plan.native.race is None)
    monkeypatch.setattr(threads, "kernel_threads", lambda: 1)
    cpu_options(serial_work=0)
    assert _plan(_convnet(), x).loop is None  # one part: nothing split
