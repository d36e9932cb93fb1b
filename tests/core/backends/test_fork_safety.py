"""fork() while another thread is inside a kiln GEMM (issue 46 item 6): the fork waits for the
GEMM in flight (kiln's fork handler, gemm/products.py) and the child computes with fresh
pools instead of hanging (it hung 7 times in 7 before the handler)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from test_spin_pool import _in_child

from kiln.core.backends.cpu.gemm import products

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")


def _busy_gemms(stop: threading.Event, started: threading.Event) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((800, 800)).astype(np.float32)
    out = np.empty_like(a)
    while not stop.is_set():
        products.matmul(a, a, out)  # ~10-50 ms each: the fork lands inside one
        started.set()


def test_child_forked_during_a_gemm_computes_and_exits():
    stop, started = threading.Event(), threading.Event()
    t = threading.Thread(target=_busy_gemms, args=(stop, started), daemon=True)
    t.start()
    try:
        assert started.wait(60)

        def child() -> bool:
            rng = np.random.default_rng(1)
            a = rng.standard_normal((300, 200)).astype(np.float32)
            b = rng.standard_normal((200, 300)).astype(np.float32)
            out = np.empty((300, 300), np.float32)
            products.matmul(a, b, out)  # through the private OpenBLAS where it is loaded
            ref = a.astype(np.float64) @ b.astype(np.float64)
            return bool(np.allclose(out, ref, rtol=1e-4, atol=1e-3))

        for _ in range(3):
            _in_child(child, 60, "a child forked during a GEMM hung")
            time.sleep(0.05)
    finally:
        stop.set()
        t.join(60)


def test_child_forked_during_a_training_step_trains():
    import kiln
    from kiln import layers

    rng = np.random.default_rng(2)
    x = rng.standard_normal((512, 256)).astype(np.float32)
    y = rng.integers(0, 10, 512)

    def model() -> kiln.Model:
        m = kiln.Sequential([kiln.Input((256,)), layers.Dense(256, activation="relu"),
                             layers.Dense(10)])
        m.compile(optimizer="sgd", loss=kiln.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        return m

    parent = model()
    parent.train_on_batch(x, y)
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            parent.train_on_batch(x, y)

    t = threading.Thread(target=train, daemon=True)
    t.start()
    try:
        time.sleep(0.2)

        def child() -> bool:
            m = model()
            loss = m.train_on_batch(x[:64], y[:64])
            return bool(np.isfinite(np.asarray(loss)).all())

        _in_child(child, 120, "a child forked during a training step hung")
    finally:
        stop.set()
        t.join(120)
