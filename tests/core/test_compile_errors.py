"""A compiler failure is never swallowed; KILN_DEBUG=1 names the graph it failed on."""

import numpy as np
import pytest

import kiln
import kiln.ops as K
from kiln.core.backends import cpu


def _broken(graph, updates=None):
    raise RuntimeError("planner bug")


def test_a_backend_failure_propagates_without_debug(monkeypatch):
    monkeypatch.delenv("KILN_DEBUG", raising=False)
    monkeypatch.setattr(cpu, "compile_graph", _broken)
    x = kiln.placeholder((None, 3))
    with pytest.raises(RuntimeError, match="planner bug") as info:
        kiln.function([x], K.relu(x), name="f")
    assert not getattr(info.value, "__notes__", [])


def test_kiln_debug_adds_the_graph(monkeypatch):
    monkeypatch.setenv("KILN_DEBUG", "1")
    monkeypatch.setattr(cpu, "compile_graph", _broken)
    x = kiln.placeholder((None, 3))
    with pytest.raises(RuntimeError, match="planner bug") as info:
        kiln.function([x], K.exp(x), name="step")
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "compiling 'step' for the cpu backend failed" in notes and "exp" in notes


def test_constant_fold_leaves_a_rejected_value_to_run_time():
    # take with a constant out-of-range index: an IndexError when it runs, not when compiled
    c = K.constant(np.arange(3, dtype=np.float32))
    x = kiln.placeholder((None,))
    f = kiln.function([x], x + K.take(c, K.constant(np.array([5], np.int32)), axis=0))
    with pytest.raises(IndexError, match="take"):
        f(np.zeros(1, np.float32))
