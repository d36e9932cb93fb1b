"""benchmarks/contended.py (``bench_suite.py --contended``): the work of copies running at once,
counted over the window they all run in. Oracles: hand-computed windows and rates."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
try:
    import contended
finally:
    sys.path.pop(0)


def test_an_epoch_cut_by_the_window_counts_in_proportion():
    spans = [[0.0, 1.0], [1.0, 2.0], [2.0, 4.0]]
    assert contended.work_in(spans, 100, 0.0, 4.0) == 300
    assert contended.work_in(spans, 100, 0.5, 1.5) == 100  # half of each of the first two
    assert contended.work_in(spans, 100, 3.0, 9.0) == 50   # half of the last
    assert contended.work_in(spans, 100, 5.0, 6.0) == 0


def test_total_rate_over_the_window_all_copies_run_in():
    runs = [{"spans": [[0.0, 2.0]], "samples": 100},   # 50 samples/s
            {"spans": [[1.0, 2.0], [2.0, 3.0]], "samples": 30}]  # 30 samples/s
    rate, window = contended.total_rate(runs)
    assert window == 1.0  # from the last start (1.0) to the first end (2.0)
    assert rate == pytest.approx(80.0)


def test_copies_that_never_overlap_are_an_error():
    runs = [{"spans": [[0.0, 1.0]], "samples": 10}, {"spans": [[2.0, 3.0]], "samples": 10}]
    with pytest.raises(ValueError, match="the copies did not run at the same time"):
        contended.total_rate(runs)
