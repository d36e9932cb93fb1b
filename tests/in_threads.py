"""Runs a test's ``work(k)`` on ``n`` threads at once (the concurrency tests of the CPU
backend): starts them all, joins them, and fails where one has not finished in ``timeout``
seconds (a hang) instead of waiting for ever."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_in_threads(work: Callable[[int], None], n: int = 4, timeout: float = 120.0) -> None:
    ts = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    hung = [k for k, t in enumerate(ts) if t.is_alive()]
    assert not hung, f"threads {hung} did not finish in {timeout} s (a hang)"
