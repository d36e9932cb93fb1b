"""Random numbers, Keras 3 style: ``kiln.random.normal(shape, seed=...)`` with
:class:`SeedGenerator` (docs/features.md, "Custom steps").

kiln's generator is counter-based: a draw is a pure function of a key ``[seed, counter]`` and a
salt. Eagerly (static shapes, outside a traced step) the functions return NumPy arrays; a
:class:`SeedGenerator` advances its counter at every draw. Inside a traced step (a layer's
``call``, a custom ``train_step``) they build graph nodes keyed by the step's random key,
which fit advances every step: a ``SeedGenerator`` (or ``seed=None``) gives new numbers at
every training step; an integer seed gives the same numbers at every call, as in Keras.
Inference graphs (predict, evaluate) get no per-step key: their draws are fixed per compiled
graph (the same noise at every call), unlike Keras, which draws anew.

Example:
    >>> gen = kiln.random.SeedGenerator(1337)
    >>> z = kiln.random.normal((batch, 16), seed=gen)    # inside train_step
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

import kiln.config
from kiln import ops
from kiln.layers.context import current
from kiln.random_state import next_seed


class SeedGenerator:
    """A random stream: a seed and a counter of draws (Keras' ``keras.random.SeedGenerator``).

    Args:
        seed: an int; None draws one from kiln's seeded generator
            (``kiln.utils.set_random_seed``).
    """

    def __init__(self, seed: int | None = None, name: str | None = None, **kwargs: Any):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
            raise TypeError(f"SeedGenerator: seed must be an int or None, received {seed!r}")
        self.seed = int(next_seed() if seed is None else seed)
        self.name = name or "seed_generator"
        self.draws = 0

    def next(self, ordered: bool = True) -> np.ndarray:
        """The key ``[seed, counter]`` of the next eager draw (advances the counter)."""
        key = np.array([self.seed, self.draws], np.int64)
        self.draws += 1
        return key

    def get_config(self) -> dict:
        return {"seed": self.seed, "name": self.name}

    def __repr__(self) -> str:
        return f"SeedGenerator(seed={self.seed})"


_GLOBAL: dict[str, SeedGenerator | None] = {"gen": None}


def _global() -> SeedGenerator:
    if _GLOBAL["gen"] is None:
        _GLOBAL["gen"] = SeedGenerator()
    return _GLOBAL["gen"]


def _draw(kind: str, shape: Any, dtype: str, seed: Any) -> Any:
    """Standard uniform [0, 1) or normal draws of ``shape``: a NumPy array eagerly, a node
    inside a traced step or for a symbolic shape."""
    shape = tuple(shape)
    ctx = current()
    like = ops.like_shape(shape, dtype)
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        key = np.array([int(seed), 0], np.int64)  # the same numbers at every call
        salt = 0
        if like is None and ctx is None:
            return ops._eager_random(kind, key, shape, salt, dtype)
        return _node(kind, ops.constant(key), like, shape, salt, dtype)
    gen = _global() if seed is None else seed
    if not isinstance(gen, SeedGenerator):
        raise TypeError("kiln.random: seed must be an int, a kiln.random.SeedGenerator or None, "
                        f"received {type(seed).__name__}")
    if ctx is not None and ctx.rng_key is not None:
        # in a traced step: the step's key (new at every step); the salt separates the
        # generators and the draws of one trace
        index = ctx.random_draws.get(id(gen), 0)
        ctx.random_draws[id(gen)] = index + 1
        salt = zlib.crc32(f"{gen.seed}/{index}".encode()) & 0x7FFFFFFF
        return _node(kind, ctx.rng_key, like, shape, salt, dtype)
    if like is not None or ctx is not None:
        # a graph without a per-step key: a functional model being defined (its layers are
        # called again when a step is traced) or an inference graph (predict/evaluate),
        # where the draws are fixed per compiled graph (the same noise at every call)
        return _node(kind, ops.constant(gen.next()), like, shape, 0, dtype)
    return ops._eager_random(kind, gen.next(), shape, 0, dtype)


def _node(kind: str, key: Any, like: Any, shape: tuple, salt: int, dtype: str) -> Any:
    target = like if like is not None else tuple(int(d) for d in shape)
    builder = ops.random_normal if kind == "normal" else ops.random_uniform
    return builder(key, target, salt=salt, dtype=dtype)


def _float_dtype(dtype: Any) -> str:
    dtype = str(np.dtype(dtype or kiln.config.floatx()))
    if dtype not in ("float32", "float64"):
        raise TypeError(f"kiln.random: a float dtype is needed, received {dtype}")
    return dtype


def normal(shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = None,
           seed: Any = None) -> Any:
    """Normal draws of ``shape`` (ints and :class:`kiln.ops.SymbolicDim`)."""
    dtype = _float_dtype(dtype)
    z = _draw("normal", shape, dtype, seed)
    if isinstance(z, np.ndarray):
        return (z * np.asarray(stddev, dtype) + np.asarray(mean, dtype)).astype(dtype)
    return z * stddev + mean


def uniform(shape: Any, minval: float = 0.0, maxval: float = 1.0, dtype: Any = None,
            seed: Any = None) -> Any:
    """Uniform draws in ``[minval, maxval)``."""
    dtype = _float_dtype(dtype)
    u = _draw("uniform", shape, dtype, seed)
    if isinstance(u, np.ndarray):
        return (u * np.asarray(maxval - minval, dtype) + np.asarray(minval, dtype)).astype(dtype)
    return u * (maxval - minval) + minval


def randint(shape: Any, minval: int, maxval: int, dtype: Any = "int32", seed: Any = None) -> Any:
    """Integers uniform in ``[minval, maxval)``."""
    if maxval <= minval:
        raise ValueError(f"kiln.random.randint: maxval ({maxval}) must exceed minval ({minval})")
    u = _draw("uniform", shape, "float64" if maxval - minval > 2**24 else "float32", seed)
    if isinstance(u, np.ndarray):
        return (np.floor(u * (maxval - minval)) + minval).astype(dtype)
    return ops.cast(ops.floor(u * float(maxval - minval)) + float(minval), str(np.dtype(dtype)))


def dropout(inputs: Any, rate: float, noise_shape: Any = None, seed: Any = None) -> Any:
    """Inverted dropout of ``inputs`` (every element kept with probability ``1 - rate`` and
    scaled by ``1 / (1 - rate)``)."""
    if noise_shape is not None:
        raise NotImplementedError("kiln.random.dropout: noise_shape is not supported yet")
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"kiln.random.dropout: rate must be in [0, 1), received {rate}")
    x = inputs
    u = uniform(ops.shape(x), dtype=_float_dtype(getattr(x, "dtype", None)), seed=seed)
    if isinstance(u, np.ndarray) and isinstance(x, np.ndarray):
        return np.where(u >= rate, x / (1.0 - rate), 0).astype(x.dtype)
    keep = ops.greater_equal(u, rate)
    return ops.where(keep, x * (1.0 / (1.0 - rate)), ops.zeros_like(ops.convert_to_tensor(x)))


__all__ = ["SeedGenerator", "normal", "uniform", "randint", "dropout"]
