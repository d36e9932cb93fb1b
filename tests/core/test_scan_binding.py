"""A scan body's step inputs and outputs are bound (the kernels read ``xs[t]`` and write
``ys[t]`` in place) only where every kernel argument viewing them can be rebuilt.

Regression for p51 (keras.io conv_lstm): a Winograd pipeline step of the ConvLSTM2D gradient
body holds its arrays inside a list argument; ``loop.binding`` looked at array arguments and
closures only, so the step input ``h[t-1]`` was marked bound and never copied into the body's
feed buffer, which that step went on reading uninitialised. The kernel gradient was then
garbage: NaN losses that came and went with what the memory held before (more often with a
cold kernel cache or a busy machine, hence first blamed on a cache race). Here the
uninitialised memory is made NaN on purpose (``np.empty`` filled with NaN bytes), so the bug
shows every time.
"""

from __future__ import annotations

import contextlib
import io
import runpy
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.core.backends.cpu.runtime import loop
from kiln.core.backends.cpu.runtime.program import Step

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def _poisoned_empty(monkeypatch) -> None:
    real = np.empty

    def empty(shape, dtype=float, order="C", **kw):
        a = real(shape, dtype, order, **kw)
        a.reshape(-1).view(np.uint8)[...] = 0xFF  # NaN in every float: unwritten shows
        return a

    monkeypatch.setattr(np, "empty", empty)


def _step(fn, args):
    return Step(fn, tuple(args), "test", "elementwise", None)


def test_binding_refuses_an_input_held_inside_a_list_argument():
    target = np.zeros(12, np.float32)
    direct = _step(np.copyto, (np.zeros(6, np.float32), target[:6]))
    assert loop.binding([direct], target) == [(0, 1, 0, (6,), (4,))]
    # the pipeline's shape: a list of (kernel, arrays, params) chunk calls
    nested = _step(lambda calls: None, ([(np.copyto, (target[6:], target[:6]), None)],))
    assert loop.binding([direct, nested], target) is None
    other = _step(lambda calls: None, ([(np.copyto, (np.zeros(3), np.ones(3)), None)],))
    assert loop.binding([direct, other], target) == [(0, 1, 0, (6,), (4,))]


def test_p51_conv_lstm_trains_finite_with_uninitialised_memory_poisoned(monkeypatch):
    # the keras.io program itself (tests/programs/p51_conv_lstm.py: three ConvLSTM2D with
    # BatchNormalization, 36 videos of 9 frames of 16x16, one epoch): its second layer's
    # gradient body runs the Winograd pipelines that read h[t-1]
    _poisoned_empty(monkeypatch)
    np.random.seed(4)
    kiln.utils.set_random_seed(4)
    with contextlib.redirect_stdout(io.StringIO()):
        g = runpy.run_path(str(PROGRAMS / "p51_conv_lstm.py"))
    history = g["history"].history
    assert np.isfinite(history["loss"][-1]) and np.isfinite(history["val_loss"][-1]), history
    bad = [w.path for w in g["model"].weights if not np.all(np.isfinite(w.numpy()))]
    assert not bad, f"weights with NaN after fit: {bad}"


if __name__ == "__main__":
    pytest.main([__file__, "-q"])


@pytest.mark.parametrize("width", [1, 3, 64])
def test_scalar_steps_are_bound_to_views_not_copies(width):
    # a map whose steps read or write one scalar each (``xs[t]``, ``ys[t]`` of 1-D arrays):
    # the bound arguments must view the scan's arrays. ``a[t]`` of a 1-D array is a NumPy
    # scalar, a copy: each step's sum was written into it and lost (the result was whatever
    # memory held: 1e+28, 0, 2e-10), and a step input kept its first call's value
    import kiln.ops as K

    p = kiln.placeholder((6, width))
    sums = kiln.function([p], K.map(lambda r: K.sum(r * r), p))
    q = kiln.placeholder((6,))
    doubled = kiln.function([q], K.map(lambda v: v * 2.0 + 1.0, q))
    for seed in range(3):  # new values each call: bound arguments built once per plan
        x = np.random.default_rng(seed).normal(size=(6, width)).astype(np.float32)
        np.testing.assert_allclose(sums(x), (x.astype(np.float64) ** 2).sum(1), rtol=1e-5)
        v = x[:, 0].copy()
        np.testing.assert_allclose(doubled(v), v * 2.0 + 1.0, rtol=1e-6)
