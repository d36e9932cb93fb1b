"""kiln/core/gc_pause.py: no automatic garbage collection while kiln compiles (functions, plans,
a model's steps), the collector's state restored after, whatever happens inside."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core import gc_pause


@pytest.fixture
def collections():
    """The automatic collections started while the test runs (generation of each)."""
    seen: list[int] = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    was = gc.isenabled()
    gc.enable()
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        if not was:
            gc.disable()


def test_paused_turns_the_collector_off_inside_and_back_on_after(collections):
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():  # nested
            assert not gc.isenabled()
        assert not gc.isenabled()
        junk = [[] for _ in range(50_000)]  # far past the young generation's threshold
        del junk
        assert collections == []
    assert gc.isenabled()


def test_an_error_inside_restores_the_collector():
    with pytest.raises(ZeroDivisionError):
        with gc_pause.paused():
            raise ZeroDivisionError("inside")
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    try:
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_back_on_only_after_the_last_of_concurrent_pauses():
    inside, release = threading.Event(), threading.Event()

    def other():
        with gc_pause.paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with gc_pause.paused():
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread still compiles
    release.set()
    t.join(10)
    assert gc.isenabled()


def _compile_a_function():
    x = kiln.placeholder((None, 32))
    h = x
    for k in range(80):
        h = K.tanh(h @ np.eye(32, dtype=np.float32) + 0.5 * k)
    out = K.softmax(h)

    def compile_and_plan():
        fn = kiln.function([x], out)
        fn(np.ones((4, 32), np.float32))  # plans the function
    return compile_and_plan


def _train_a_model():
    layers = kiln.layers
    model = kiln.Sequential([kiln.Input((16,))] + [
        layers.Dense(32, activation="relu") for _ in range(12)] + [
        layers.Dense(4, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x = np.ones((8, 16), np.float32)

    def first_steps():
        model.train_on_batch(x, np.zeros(8, np.int32))
        model.predict(x, verbose=0)
    return first_steps


@pytest.mark.parametrize("make", [_compile_a_function, _train_a_model])
def test_compiling_runs_only_young_collections_and_far_fewer(make, collections,
                                                                      monkeypatch):
    # the same work with and without the pauses: without, the allocations of tracing,
    # autodiff, the passes and the plans start collections all along
    for pause in (True, False):
        if not pause:  # gc_pause's calls do nothing
            monkeypatch.setattr(gc, "disable", lambda: None)
        work = make()
        gc.collect()
        collections.clear()
        work()
        if pause:
            with_pause = list(collections)
        else:
            without = list(collections)
    # measured: 2 and 4 young collections with the pauses, 10 and 30 (two of the middle
    # generation) without
    assert set(with_pause) <= {0} and len(with_pause) <= 4, with_pause
    assert len(without) >= 2 * len(with_pause) + 4, (without, with_pause)
    assert gc.isenabled()
