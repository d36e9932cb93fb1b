"""Initializers: statistics against their closed forms, Keras' fan rule for conv kernels,
orthogonality, reproducibility with set_random_seed, and get/serialize/deserialize."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import kiln
from kiln import initializers as I
from kiln import layers as L

# A big sample makes the statistical tolerances tight and still fast.
SHAPE = (400, 600)          # fan_in 400, fan_out 600
CONV = (3, 3, 40, 60)       # receptive field 9: fan_in 360, fan_out 540


def test_compute_fans_like_keras() -> None:
    assert I.compute_fans(()) == (1, 1)
    assert I.compute_fans((7,)) == (7, 7)
    assert I.compute_fans((4, 5)) == (4, 5)
    assert I.compute_fans(CONV) == (360, 540)
    assert I.compute_fans((5, 3, 8)) == (15, 40)  # Conv1D kernel


@pytest.mark.parametrize("shape", [SHAPE, CONV])
@pytest.mark.parametrize("cls,scale,mode,uniform", [
    (I.GlorotUniform, 1.0, "fan_avg", True), (I.GlorotNormal, 1.0, "fan_avg", False),
    (I.HeUniform, 2.0, "fan_in", True), (I.HeNormal, 2.0, "fan_in", False),
    (I.LecunUniform, 1.0, "fan_in", True), (I.LecunNormal, 1.0, "fan_in", False)])
def test_variance_scaling_family(shape, cls, scale, mode, uniform) -> None:
    w = cls(seed=1)(shape)
    assert w.shape == shape and w.dtype == np.float32
    fan_in, fan_out = I.compute_fans(shape)
    n = {"fan_in": fan_in, "fan_avg": (fan_in + fan_out) / 2}[mode]
    std = math.sqrt(scale / n)
    assert abs(w.mean()) < 0.02 * std
    assert abs(w.std() / std - 1) < 0.02
    if uniform:
        limit = math.sqrt(3 * scale / n)
        assert np.abs(w).max() <= limit and np.abs(w).max() > 0.99 * limit
    else:  # truncated at two (pre-truncation) standard deviations
        assert np.abs(w).max() <= 2 * std / 0.87962566103423978


def test_glorot_uniform_limit_dense() -> None:
    w = I.GlorotUniform(seed=0)((784, 512))
    limit = math.sqrt(6 / (784 + 512))
    assert -limit <= w.min() < -0.99 * limit and 0.99 * limit < w.max() <= limit


def test_variance_scaling_modes() -> None:
    w = I.VarianceScaling(scale=3.0, mode="fan_out", distribution="untruncated_normal",
                          seed=2)(SHAPE)
    assert abs(w.std() / math.sqrt(3.0 / 600) - 1) < 0.02
    assert np.abs(w).max() > 3 * math.sqrt(3.0 / 600)  # not truncated
    assert I.VarianceScaling(distribution="normal").distribution == "truncated_normal"
    with pytest.raises(ValueError, match="mode"):
        I.VarianceScaling(mode="fan_sideways")
    with pytest.raises(ValueError, match="scale"):
        I.VarianceScaling(scale=0.0)


def test_random_normal_uniform_truncated() -> None:
    w = I.RandomNormal(mean=1.0, stddev=2.0, seed=3)(SHAPE)
    assert abs(w.mean() - 1) < 0.02 and abs(w.std() - 2) < 0.02
    u = I.RandomUniform(seed=3)(SHAPE)
    assert -0.05 <= u.min() and u.max() < 0.05 and abs(u.std() - 0.1 / math.sqrt(12)) < 1e-3
    t = I.TruncatedNormal(mean=0.5, stddev=0.1, seed=3)(SHAPE)
    assert np.all(np.abs(t - 0.5) <= 0.2)
    assert abs(t.std() - 0.1 * 0.87962566103423978) < 1e-3


def test_constant_zeros_ones_identity() -> None:
    np.testing.assert_array_equal(I.Zeros()((2, 3)), np.zeros((2, 3)))
    np.testing.assert_array_equal(I.Ones()((2,), dtype="float64"), np.ones(2))
    np.testing.assert_array_equal(I.Constant(2.5)((2, 2)), np.full((2, 2), 2.5))
    np.testing.assert_array_equal(I.Identity(gain=3.0)((2, 3)), 3 * np.eye(2, 3))


@pytest.mark.parametrize("shape", [(6, 6), (8, 5), (5, 8), (3, 3, 4, 6)])
def test_orthogonal(shape) -> None:
    gain = 1.5
    w = I.Orthogonal(gain=gain, seed=4)(shape, dtype="float64")
    flat = w.reshape(-1, shape[-1])
    rows, cols = flat.shape
    gram = flat.T @ flat if rows >= cols else flat @ flat.T
    np.testing.assert_allclose(gram, gain**2 * np.eye(min(rows, cols)), atol=1e-12)
    with pytest.raises(ValueError, match="rank >= 2"):
        I.Orthogonal()((5,))


def test_set_random_seed_makes_layers_reproducible() -> None:
    def build() -> list[np.ndarray]:
        kiln.utils.set_random_seed(123)
        dense, conv = L.Dense(5), L.Conv2D(3, 3, kernel_initializer="he_normal")
        dense(kiln.placeholder((None, 4)))
        conv(kiln.placeholder((None, 5, 5, 2)))
        return dense.get_weights() + conv.get_weights()

    first, second = build(), build()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    kiln.utils.set_random_seed(124)
    other = L.Dense(5)
    other(kiln.placeholder((None, 4)))
    assert not np.array_equal(other.get_weights()[0], first[0])


def test_seeded_initializer_repeats_unseeded_does_not() -> None:
    seeded = I.HeUniform(seed=9)
    np.testing.assert_array_equal(seeded((4, 4)), seeded((4, 4)))
    unseeded = I.HeUniform()
    assert not np.array_equal(unseeded((4, 4)), unseeded((4, 4)))


ALL = [I.Zeros(), I.Ones(), I.Constant(0.3), I.Identity(2.0), I.RandomNormal(0.1, 0.2, seed=1),
       I.RandomUniform(-1.0, 1.0), I.TruncatedNormal(stddev=0.3), I.GlorotUniform(seed=5),
       I.GlorotNormal(), I.HeNormal(), I.HeUniform(), I.LecunNormal(), I.LecunUniform(),
       I.Orthogonal(gain=2.0), I.VarianceScaling(2.0, "fan_avg", "uniform", seed=3)]


@pytest.mark.parametrize("init", ALL, ids=lambda i: type(i).__name__)
def test_serialize_round_trip(init) -> None:
    config = I.serialize(init)
    assert config["class_name"] == type(init).__name__
    assert config["module"] == "keras.initializers"
    again = I.deserialize(json.loads(json.dumps(config)))
    assert type(again) is type(init) and again.get_config() == init.get_config()
    # a Keras 2 style dict without module
    assert type(I.get({"class_name": config["class_name"], "config": config["config"]})) \
        is type(init)


def test_get_names_and_aliases() -> None:
    assert isinstance(I.get("glorot_uniform"), I.GlorotUniform)
    assert isinstance(I.get("GlorotUniform"), I.GlorotUniform)
    assert isinstance(I.get("he_normal"), I.HeNormal)
    assert isinstance(I.get("uniform"), I.RandomUniform)
    assert isinstance(I.get("normal"), I.RandomNormal)
    assert isinstance(I.get("orthogonal"), I.Orthogonal)
    assert isinstance(I.get("zeros"), I.Zeros) and isinstance(I.get("ones"), I.Ones)
    assert isinstance(I.get(I.HeNormal), I.HeNormal)
    assert I.get(None) is None
    fn = lambda shape, dtype=None: np.zeros(shape)  # noqa: E731
    assert I.get(fn) is fn
    assert I.get("OrthogonalInitializer").__class__ is I.Orthogonal


def test_unknown_initializer_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"Unknown initializer 'glorot'.*glorot_uniform"):
        I.get("glorot")
    with pytest.raises(ValueError, match="valid names"):
        L.Dense(2, kernel_initializer="xavier")
