"""kiln.random's Keras 3.15 distributions: gamma, beta, binomial, truncated_normal,
categorical, shuffle.

Oracles: closed-form moments (tolerances of five standard errors over 20,000 samples),
softmax(logits) for the class frequencies, a sort for the permutation, the truncation bounds.
Eagerly (NumPy arrays) and in a compiled graph (a symbolic batch dimension)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.random as R

N = 20_000


def _check_moments(x, mean, var, var_of_var):
    x = np.asarray(x, np.float64).ravel()
    n = x.size
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / n), (x.mean(), mean)
    assert abs(x.var() - var) < 5 * math.sqrt(var_of_var / n), (x.var(), var)


@pytest.mark.parametrize("alpha", [0.4, 1.0, 2.5, 9.0])
def test_gamma_moments(alpha):
    x = R.gamma((N,), alpha, seed=11)
    assert x.shape == (N,) and x.dtype == np.float32 and np.all(x > 0)
    # Gamma(a, 1): mean a, variance a, fourth central moment 3a^2 + 6a
    _check_moments(x, alpha, alpha, 3 * alpha**2 + 6 * alpha - alpha**2)


@pytest.mark.parametrize("a, b", [(2.0, 5.0), (0.5, 0.5), (3.0, 1.0)])
def test_beta_moments(a, b):
    x = R.beta((N,), a, b, seed=12)
    assert np.all((x >= 0) & (x <= 1))
    var = a * b / ((a + b) ** 2 * (a + b + 1))
    _check_moments(x, a / (a + b), var, var)  # in [0, 1]: mu4 <= variance


@pytest.mark.parametrize("n, p", [(10, 0.3), (1, 0.2), (25, 0.9)])
def test_binomial_moments(n, p):
    x = R.binomial((N,), n, p, seed=13)
    assert x.dtype == np.float32
    assert np.array_equal(x, np.round(x)) and x.min() >= 0 and x.max() <= n
    var = n * p * (1 - p)
    mu4 = var * (1 + 3 * (n - 2) * p * (1 - p))
    _check_moments(x, n * p, var, mu4 - var**2)


def test_binomial_with_counts_and_probabilities_per_element():
    counts, probs = np.array([0, 1, 5, 40]), np.array([0.5, 1.0, 0.0, 0.25])
    x = R.binomial((N // 4, 4), counts, probs, seed=14)
    np.testing.assert_array_equal(x[:, 0], 0)
    np.testing.assert_array_equal(x[:, 1], 1)
    np.testing.assert_array_equal(x[:, 2], 0)
    _check_moments(x[:, 3], 10.0, 7.5, 7.5 * (1 + 3 * 38 * 0.1875) - 7.5**2)


def _truncated_var():
    phi = math.exp(-2.0) / math.sqrt(2 * math.pi)
    mass = math.erf(2 / math.sqrt(2))
    return 1 - 4 * phi / mass


def test_truncated_normal_bounds_and_moments():
    x = R.truncated_normal((N,), mean=1.0, stddev=2.0, seed=15)
    assert x.min() >= 1.0 - 4.0 and x.max() <= 1.0 + 4.0
    assert x.min() < -2.5 and x.max() > 4.5  # the tails reach the bounds
    var = 4 * _truncated_var()
    _check_moments(x, 1.0, var, 2 * var**2)  # a bounded, near-normal tail: mu4 < 3 var^2


def test_categorical_frequencies_follow_the_softmax():
    logits = np.array([[0.0, 1.0, 2.0, -1.0], [3.0, 0.0, 0.0, 0.0]], "float32")
    draws = R.categorical(logits, N, seed=16)
    assert draws.shape == (2, N) and draws.dtype == np.int32
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    for row in range(2):
        freq = np.bincount(draws[row], minlength=4) / N
        np.testing.assert_array_less(np.abs(freq - p[row]), 5 * np.sqrt(p[row] * (1 - p[row]) / N))
    assert R.categorical(logits, 3, dtype="int64", seed=1).dtype == np.int64


def test_shuffle_is_a_permutation_along_the_axis():
    x = np.arange(40, dtype="float32").reshape(20, 2)
    y = R.shuffle(x, seed=17)
    assert not np.array_equal(x, y)
    np.testing.assert_array_equal(np.sort(y[:, 0]), x[:, 0])
    np.testing.assert_array_equal(y[:, 1], y[:, 0] + 1)  # rows move whole
    z = R.shuffle(x.T, axis=1, seed=17)
    np.testing.assert_array_equal(np.sort(z, axis=1), x.T)


def test_same_seed_same_values_and_generators_advance():
    for fn in (lambda s: R.gamma((50,), 2.0, seed=s), lambda s: R.beta((50,), 2.0, 3.0, seed=s),
               lambda s: R.binomial((50,), 7, 0.4, seed=s),
               lambda s: R.truncated_normal((50,), seed=s),
               lambda s: R.categorical(np.zeros((2, 5)), 30, seed=s),
               lambda s: R.shuffle(np.arange(50), seed=s)):
        np.testing.assert_array_equal(fn(5), fn(5))
        assert not np.array_equal(fn(5), fn(6))
        gen = R.SeedGenerator(3)
        assert not np.array_equal(fn(gen), fn(gen))
        np.testing.assert_array_equal(fn(R.SeedGenerator(3)), fn(R.SeedGenerator(3)))


def test_gamma_with_alpha_per_column_and_float64():
    alpha = np.array([0.5, 2.0, 6.0])
    x = R.gamma((N // 2, 3), alpha, dtype="float64", seed=18)
    assert x.dtype == np.float64
    for j, a in enumerate(alpha):
        _check_moments(x[:, j], a, a, 2 * a**2 + 6 * a)


def test_draws_in_a_compiled_graph_with_a_symbolic_batch():
    p = kiln.placeholder((None, 4))
    shape = kiln.ops.shape(p)
    outs = [R.gamma(shape, 3.0, seed=1), R.beta(shape, 2.0, 2.0, seed=2),
            R.binomial(shape, 6, 0.5, seed=3), R.truncated_normal(shape, seed=4),
            R.shuffle(p, seed=5), R.categorical(p, 8, seed=6)]
    assert all(kiln.backend.is_keras_tensor(o) for o in outs)
    feed = np.tile(np.log(np.array([[0.1, 0.2, 0.3, 0.4]], "float32")), (N // 4, 1))
    gamma, beta, binom, trunc, shuffled, cats = kiln.function([p], outs)(feed)
    assert gamma.shape == (N // 4, 4) and cats.shape == (N // 4, 8)
    _check_moments(gamma, 3.0, 3.0, 2 * 9.0 + 18.0)
    _check_moments(beta, 0.5, 0.05, 0.05)
    _check_moments(binom, 3.0, 1.5, 1.5 * (1 + 3 * 4 * 0.25) - 1.5**2)
    assert np.abs(trunc).max() <= 2.0
    _check_moments(trunc, 0.0, _truncated_var(), 2 * _truncated_var() ** 2)
    np.testing.assert_array_equal(np.sort(shuffled, axis=0), feed)  # all rows equal
    freq = np.bincount(cats.ravel(), minlength=4) / cats.size
    np.testing.assert_array_less(np.abs(freq - [0.1, 0.2, 0.3, 0.4]), 0.01)


@pytest.mark.parametrize("call, error, match", [
    (lambda: R.gamma((3,), 0.0), ValueError, "gamma: alpha must be positive"),
    (lambda: R.beta((3,), 1.0, -1.0), ValueError, "beta: beta must be positive"),
    (lambda: R.binomial((3,), -1, 0.5), ValueError, "counts must be non-negative integers"),
    (lambda: R.binomial((3,), 2.5, 0.5), ValueError, "counts must be non-negative integers"),
    (lambda: R.binomial((3,), 4, 1.5), ValueError, r"probabilities must be in \[0, 1\]"),
    (lambda: R.binomial((3,), kiln.placeholder((3,)), 0.5), TypeError, "counts must be a"),
    (lambda: R.categorical(np.zeros(4), 2), ValueError, r"logits must be 2D .* shape \(4,\)"),
    (lambda: R.categorical(np.zeros((2, 4)), 0), ValueError, "num_samples must be a positive"),
    (lambda: R.shuffle(np.zeros((3, 2)), axis=2), ValueError, "axis 2 is out of range"),
    (lambda: R.truncated_normal((3,), dtype="int32"), TypeError, "a float dtype is needed"),
])
def test_bad_arguments_are_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()
