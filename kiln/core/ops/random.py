"""Counter-based random numbers: a pure function of (seed, counter, salt, element index).

The generator's state is the graph input ``key = [seed, counter]`` (int64), so a compiled
step is a pure function: the same key gives the same numbers on every backend, and saving the
key is all an exact resume needs. ``salt`` separates the streams of different layers.
The hash is SplitMix64's finalizer over a Weyl sequence; CPU and CUDA kernels reproduce it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, require_float
from kiln.core.ops.registry import RANDOM, Example, OpDef, apply, register

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)
SEED_MUL = np.uint64(0xD1B54A32D192ED03)
SALT_MUL = np.uint64(0x8CB92BA72F3D8DD7)


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer (uint64 in, uint64 out; wraps modulo 2**64)."""
    z = (z ^ (z >> np.uint64(30))) * M1
    z = (z ^ (z >> np.uint64(27))) * M2
    return z ^ (z >> np.uint64(31))


def stream_base(key: np.ndarray, salt: int) -> np.uint64:
    k = np.asarray(key).astype(np.uint64).reshape(-1)
    with np.errstate(over="ignore"):
        base = mix64(np.array([k[0] * SEED_MUL + np.uint64(salt) * SALT_MUL], np.uint64))
        base = mix64(base ^ (np.array([k[1]], np.uint64) * GOLDEN))
    return base[0]


def uniform_bits(key: np.ndarray, salt: int, n: int, offset: int = 0) -> np.ndarray:
    """n uniform floats in [0, 1) with 24 random bits each, as float64."""
    base = stream_base(key, salt)
    idx = np.arange(offset, offset + n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = mix64(base + (idx + np.uint64(1)) * GOLDEN)
    return (h >> np.uint64(40)).astype(np.float64) * (1.0 / 16777216.0)


def _uniform_ref(key, like, *, salt, dtype):
    shape = np.shape(like)
    n = int(np.prod(shape, dtype=np.int64))
    return uniform_bits(key, salt, n).reshape(shape).astype(dtype)


def _normal_ref(key, like, *, salt, dtype):
    shape = np.shape(like)
    n = int(np.prod(shape, dtype=np.int64))
    u = uniform_bits(key, salt, 2 * n).reshape(n, 2)
    u1 = 1.0 - u[:, 0]  # in (0, 1]
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u[:, 1])
    return z.reshape(shape).astype(dtype)


def _infer(name: str):
    def infer(key: TensorType, like: TensorType, *, salt: int, dtype: str) -> TensorType:
        if key.dtype != "int64" or key.shape != (2,):
            raise TypeError(f"{name}: key must be int64 of shape (2,) = [seed, counter], "
                            f"received {key}")
        t = TensorType(like.shape, dtype)
        require_float(name, t)
        return t
    return infer


def _examples(rng, dt):
    return [Example((np.array([7, 3], np.int64), np.zeros((3, 4), dt)), {"salt": 1, "dtype": dt}),
            Example((np.array([7, 4], np.int64), np.zeros((5,), dt)), {"salt": 2, "dtype": dt})]


for _name, _ref in [("random_uniform", _uniform_ref), ("random_normal", _normal_ref)]:
    register(OpDef(_name, RANDOM, _infer(_name), _ref, differentiable=False, examples=_examples,
                   nondiff_reason="a random draw does not depend differentiably on its inputs",
                   shape_only=frozenset({1})))


def random_uniform(key: Any, like: Any, salt: int = 0, dtype: str | None = None) -> Node:
    """Uniform [0, 1) numbers shaped like ``like`` (a tensor, or a static shape tuple)."""
    like = _like(like, dtype)
    return apply("random_uniform", as_node(key), like, salt=int(salt),
                 dtype=dtype or like.dtype)


def random_normal(key: Any, like: Any, salt: int = 0, dtype: str | None = None) -> Node:
    """Standard normal numbers shaped like ``like`` (a tensor, or a static shape tuple)."""
    like = _like(like, dtype)
    return apply("random_normal", as_node(key), like, salt=int(salt), dtype=dtype or like.dtype)


def _like(like: Any, dtype: str | None) -> Node:
    if isinstance(like, tuple | list):
        from kiln.core.ops.movement import broadcast_to

        return broadcast_to(as_node(np.zeros((), dtype or "float32")), tuple(like))
    like = as_node(like)
    if like.dtype not in ("float32", "float64"):
        like = apply("cast", like, dtype=dtype or "float32")
    return like


def dropout(x: Any, rate: float, key: Any, salt: int = 0) -> Node:
    """Inverted dropout: zeroes each element with probability ``rate`` and scales the rest by
    ``1 / (1 - rate)``, so the expectation is unchanged."""
    from kiln.core.ops.elementwise import _c

    x = as_node(x)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1), received {rate}")
    if rate == 0.0:
        return x
    keep = apply("greater_equal", random_uniform(key, x, salt), _c(rate, x))
    return apply("where", keep, x * _c(1.0 / (1.0 - rate), x), _c(0, x))
