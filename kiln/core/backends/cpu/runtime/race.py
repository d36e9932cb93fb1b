"""Which of a plan's two ways to run its split steps is faster on this machine, now: measured
on the plan's own calls (docs/architecture.md, "Threads"; issue 47: serving).

A native plan (``native_plan.py``) runs each split step's parts either on the spin workers
(way :data:`SPREAD`) or all on the caller, in order (way :data:`ORDERED`): the same parts,
so the same bits. Which is faster is not a property of the kernel: on the 2-core Zen 5 test
host the MNIST convnet's batch-1 call took 35 us spread, on a 2-core Xeon (Emerald Rapids,
KVM) 56-58 us spread against 36-39 us in order, its Winograd products split over two
threads taking longer than on one (docs/performance.md, "Another host"). A threshold tuned on one
host is wrong on the other, so each plan races the two ways: blocks of :data:`BLOCK` calls
of each way, :data:`ROUNDS` times (the first call of a block is not counted: it meets the
other way's state, workers still spinning or asleep), then the way with the lower median
call runs, the workers only where they make a call at least ``1 - MARGIN`` faster (the same
speed from one core leaves the other to the machine). A settled way is raced again after
:data:`RACE_EVERY_S` seconds (the load changes), the clock read every :data:`CHECK_EVERY`
calls, or after 100 times the race's own length where that is longer. Each race opens with a
warm-up block of :data:`BLOCK` spread calls, which count for neither way; where their median
call takes :data:`LONG_NS` or longer (a training step), the plan runs spread without racing:
splitting such calls pays wherever kiln has the cores (``cpus.plan`` runs them in order where
it has not), and a block run in order would cost whole steps (racing every plan of the
benchmark suite cost conv1d, the CIFAR CNN and the dilated Conv1D 13-23% of their speed).

A plan run by its Python loop races the same way (:class:`Loop`): its split steps through
:class:`~.threads.SplitCall` (spin workers or kiln's portable pool) or each as
:class:`~.serial.SerialParts`. ``CpuOptions.race`` False: always spread (benchmarks' A/B).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from kiln.core.backends.cpu.runtime.serial import SerialParts
from kiln.core.backends.cpu.runtime.threads import SplitCall

SPREAD, ORDERED = 0, 1
BLOCK = 8
ROUNDS = 3
MARGIN = 0.97
RACE_EVERY_S = 5.0
CHECK_EVERY = 256
LONG_NS = 1_000_000  # warm-up calls this long: spread, no race (a training step)
LENGTHS = 100  # a settled way lasts at least this many times the race's length


class Race:
    """The race of one plan: :meth:`way` is the way the next call runs; a call of an
    unsettled race reports its time with :meth:`record`."""

    __slots__ = ("settled", "call", "times", "countdown", "since", "began", "clock", "races")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.races = 0  # races finished (tests and benchmarks read it)
        self.settled: int | None = None
        self.start()

    def start(self) -> None:
        """Races anew: a warm-up block (spread), then the rounds."""
        self.settled = None
        self.call = -BLOCK
        self.times: tuple[list[int], list[int]] = ([], [])
        self.countdown = CHECK_EVERY
        self.since = 0.0  # when it settled
        self.began = self.clock()

    def way(self) -> int:
        """The way the next call runs (:data:`SPREAD` or :data:`ORDERED`)."""
        settled = self.settled
        if settled is not None:
            self.countdown -= 1
            if self.countdown <= 0:
                self.countdown = CHECK_EVERY
                now = self.clock()
                if now - self.since >= max(RACE_EVERY_S, LENGTHS * (self.since - self.began)):
                    self.start()
                    return SPREAD
            return settled
        return (max(self.call, 0) // BLOCK) % 2

    def record(self, way: int, ns: int) -> None:
        """The time of an unsettled race's call that ran ``way``."""
        k = self.call
        self.call = k + 1
        if k < 0:
            self.times[SPREAD].append(ns)
            if k == -1:
                warm = statistics.median(self.times[SPREAD])
                self.times[SPREAD].clear()
                if warm >= LONG_NS:
                    self._settle(SPREAD)
            return
        if (k // BLOCK) % 2 != way:
            return
        if k % BLOCK:
            self.times[way].append(ns)
        if self.call == 2 * BLOCK * ROUNDS:
            spread, ordered = (statistics.median(t) for t in self.times)
            self._settle(SPREAD if spread < MARGIN * ordered else ORDERED)

    def _settle(self, way: int) -> None:
        self.settled = way
        self.since = self.clock()
        self.races += 1


def unforced(fn: Any) -> bool:
    """Whether a plan step is split into parts whose engine follows the load (a
    :class:`SplitCall` whose engine no one forced)."""
    return isinstance(fn, SplitCall) and fn.engine is None


def in_order(fn: Callable) -> Callable:
    """A step run with every part on the caller where it is split with an unforced engine."""
    return SerialParts(fn) if isinstance(fn, SplitCall) and fn.engine is None else fn


class Loop:
    """A plan's Python loop with its race: :meth:`run` calls every step, its split steps
    spread or in order (:class:`SerialParts`, the same parts), whichever measures faster.
    The in-order list shares the steps' argument objects (the feeds' views are changed in
    them in place: ``program.Plan._feed``, which makes them lists at a plan's first call)."""

    __slots__ = ("race", "ordered", "_for")

    def __init__(self) -> None:
        self.race = Race()
        self.ordered: list[tuple[Callable, Any]] = []
        self._for: list | None = None

    def run(self, calls: list[tuple[Callable, Any]]) -> None:
        race = self.race
        way = race.way()
        if way == ORDERED:
            if self._for is not calls:  # (built after the first call's feeds: the argument
                # lists it shares are then settled)
                self.ordered = [(in_order(fn), args) for fn, args in calls]
                self._for = calls
            calls = self.ordered
        if race.settled is not None:
            for fn, args in calls:
                fn(*args)
            return
        clock = time.perf_counter_ns
        t0 = clock()
        for fn, args in calls:
            fn(*args)
        race.record(way, clock() - t0)


def loop_for(calls: list[tuple[Callable, Any]], enabled: bool) -> Loop | None:
    """The :class:`Loop` of a plan's calls where ``enabled`` and a step is split with no
    forced engine, else None (the plain loop)."""
    return Loop() if enabled and any(unforced(fn) for fn, _ in calls) else None
