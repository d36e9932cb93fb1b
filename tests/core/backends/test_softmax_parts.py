"""softmax / log_softmax rows over the runtime's parts (kernels/nn/nn.py ``_rows``). Oracles:
the NumPy reference in float64, and one part's bits (each row is computed by one part, in
the same order)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.runtime import threads

pytestmark = pytest.mark.skipif(not native.enabled(), reason="needs the native path")


def _reference(x: np.ndarray, log: bool) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # the row of infinities: NaN, as kiln's
        z = x.astype(np.float64)
        z = z - z.max(axis=-1, keepdims=True)
        lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
        return z - lse if log else np.exp(z - lse)


def _run(x: np.ndarray, log: bool) -> tuple[np.ndarray, list[str]]:
    p = kiln.placeholder(x.shape)
    op = kiln.ops.log_softmax if log else kiln.ops.softmax
    f = kiln.function([p], op(p, axis=-1), backend="cpu")
    got = f(x)
    plan = f.program.plan([x])
    return got, [type(s.fn).__name__ for s in plan.steps]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 33, 64), (101, 16), (7, 3000), (5, 3)])
@pytest.mark.parametrize("parts", [2, 3])
def test_rows_split_over_parts_give_one_parts_bits(shape, log, parts, monkeypatch,
                                                    cpu_options):
    rng = np.random.default_rng(sum(shape))
    x = (rng.normal(size=shape) * 4).astype(np.float32)
    x.reshape(-1, shape[-1])[1, :2] = np.inf, -np.inf  # a row of NaN, as the reference
    monkeypatch.setattr(threads, "kernel_threads", lambda: 1)
    one, kinds = _run(x, log)
    assert "SplitCall" not in kinds
    monkeypatch.setattr(threads, "kernel_threads", lambda: parts)
    cpu_options(serial_work=0)  # split even the small ones
    split, kinds = _run(x, log)
    rows = int(np.prod(shape[:-1]))
    assert ("SplitCall" in kinds) == (rows > 1), kinds
    np.testing.assert_array_equal(split, one)
    want = _reference(x, log)
    assert np.isnan(split.reshape(rows, -1)[1]).all()
    np.testing.assert_allclose(split, want, rtol=2e-6, atol=1e-6)


def test_a_small_softmax_is_one_step(monkeypatch):
    monkeypatch.setattr(threads, "kernel_threads", lambda: 2)
    x = np.random.default_rng(0).normal(size=(8, 10)).astype(np.float32)
    got, kinds = _run(x, False)
    assert kinds and "SplitCall" not in kinds
    np.testing.assert_allclose(got, _reference(x, False), rtol=2e-6, atol=1e-7)
