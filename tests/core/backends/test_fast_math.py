"""The float32 tanh, sigmoid and softmax of the CPU's generated loops (a rational approximation, see
``kiln/core/backends/cpu/codegen.py``) against float64 NumPy on a dense grid and the special
values; float64 keeps libm's tanh."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K


def _run(values: np.ndarray) -> np.ndarray:
    x = kiln.placeholder(values.shape, values.dtype.name)
    return kiln.function([x], K.tanh(x), backend="cpu")(values)


@pytest.mark.nojit
def test_float32_tanh_is_within_a_few_ulp_everywhere():
    grid = np.concatenate([np.linspace(-12, 12, 200001), np.linspace(-1e-3, 1e-3, 20001),
                           np.geomspace(1e-30, 1e-2, 2000), -np.geomspace(1e-30, 1e-2, 2000)])
    x = grid.astype(np.float32)
    got = _run(x)
    want = np.tanh(x.astype(np.float64))
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float32).tiny)
    assert rel.max() < 4e-7, (x[rel.argmax()], got[rel.argmax()], want[rel.argmax()])
    assert np.all(np.abs(got) <= 1.0)


@pytest.mark.nojit
def test_float32_tanh_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
    got = _run(x)
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [1.0, -1.0, 0.0, -0.0, 1.0, -1.0])


def test_float64_tanh_is_libm_accurate():
    x = np.linspace(-5, 5, 1001)
    np.testing.assert_allclose(_run(x), np.tanh(x), rtol=1e-15, atol=0)


@pytest.mark.nojit
def test_float32_sigmoid_keeps_relative_accuracy_in_the_tails():
    x = np.concatenate([np.linspace(-80, 80, 100001), [np.inf, -np.inf, 0.0]]).astype(
        np.float32)
    xp = kiln.placeholder(x.shape, "float32")
    got = kiln.function([xp], K.sigmoid(xp), backend="cpu")(x)
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    rel = np.abs(got - want) / np.maximum(want, np.finfo(np.float32).tiny)
    finite = want > np.finfo(np.float32).tiny
    assert rel[finite].max() < 4e-7
    nan = kiln.function([xp], K.sigmoid(xp), backend="cpu")(np.full(x.shape, np.nan,
                                                                    np.float32))
    assert np.isnan(nan).all()


@pytest.mark.nojit
def test_float32_softmax_rows_special_values_and_accuracy():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(64, 128)) * 10).astype(np.float32)
    x[1, :5] = -np.inf          # masked entries: exactly zero weight
    x[2, 3] = np.nan            # a NaN row stays NaN
    x[3, :] = -1e9              # a fully masked row (finite): uniform
    x[4, 7] = 1e30              # one huge logit: all the weight
    xp = kiln.placeholder(x.shape, "float32")
    got = kiln.function([xp], K.softmax(xp, axis=-1), backend="cpu")(x)
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
    ok = ~np.isnan(want).any(axis=-1)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-6, atol=1e-12)
    assert np.all(got[1, :5] == 0.0)
    assert np.isnan(got[2]).all()
    np.testing.assert_allclose(got[3], 1.0 / 128, rtol=1e-6)
    assert got[4, 7] == 1.0 and np.all(np.delete(got[4], 7) == 0.0)
