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


# ---- distributions built from uniform and normal draws (Keras 3.15's other names) ----------------
# Each is written once against a namespace ``xp``: NumPy when the draws are arrays (eager),
# kiln.ops when they are graph nodes (in a traced step or for symbolic shapes). Rejection
# samplers run a fixed number of rounds and take each element's first accepted candidate
# (a graph has no data-dependent loop); the chance that no round accepts is below 1e-10 per
# element, and such an element keeps its last candidate, made valid.
_ROUNDS = 8


def _is_node(x: Any) -> bool:
    return not isinstance(x, np.ndarray | np.generic | int | float | list | tuple)


def _subseeds(seed: Any, n: int) -> list[Any]:
    """``n`` seeds for ``n`` independent draws: distinct ints from an int seed (so the same
    seed gives the same numbers), else the generator itself (which advances per draw)."""
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        return [zlib.crc32(f"{int(seed)}/{i}".encode()) & 0x7FFFFFFF for i in range(n)]
    if seed is None:
        seed = _global()
    return [seed] * n


def _xp(*values: Any) -> Any:
    return ops if any(_is_node(v) for v in values) else np


def _cast(xp: Any, x: Any, dtype: str) -> Any:
    return ops.cast(x, dtype) if xp is ops else np.asarray(x).astype(dtype)


def _first_accepted(xp: Any, candidates: list, accepted: list, fallback: Any) -> Any:
    out = fallback
    for cand, ok in zip(reversed(candidates), reversed(accepted)):
        out = xp.where(ok, cand, out)
    return out


def truncated_normal(shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = None,
                     seed: Any = None) -> Any:
    """Normal draws of ``shape`` redrawn until within two standard deviations of ``mean``
    (Keras' rule: the result lies in ``[mean - 2 stddev, mean + 2 stddev]``)."""
    dtype = _float_dtype(dtype)
    zs = [_draw("normal", shape, dtype, s) for s in _subseeds(seed, _ROUNDS)]
    xp = _xp(*zs)
    two = np.asarray(2.0, dtype)
    z = _first_accepted(xp, zs, [xp.less_equal(xp.abs(z), two) for z in zs],
                        xp.clip(zs[-1], -two, two))
    out = z * np.asarray(stddev, dtype) + np.asarray(mean, dtype)
    return _cast(xp, out, dtype)


def _standard_gamma(shape: Any, alpha: Any, dtype: str, seed: Any) -> Any:
    """Gamma(alpha, 1) draws: Marsaglia and Tsang's method for alpha >= 1, boosted by
    ``U ** (1 / alpha)`` for alpha < 1 (Gamma(alpha) = Gamma(alpha + 1) U^(1/alpha))."""
    seeds = _subseeds(seed, 2 * _ROUNDS + 1)
    xs = [_draw("normal", shape, dtype, s) for s in seeds[:_ROUNDS]]
    us = [_draw("uniform", shape, dtype, s) for s in seeds[_ROUNDS:2 * _ROUNDS]]
    boost_u = _draw("uniform", shape, dtype, seeds[-1])
    xp = _xp(*xs, alpha)
    a = _cast(xp, alpha, dtype) if xp is ops else np.asarray(alpha, dtype)
    one = np.asarray(1.0, dtype)
    small = xp.less(a, one)
    a1 = xp.where(small, a + one, a)
    d = a1 - np.asarray(1.0 / 3.0, dtype)
    c = one / xp.sqrt(np.asarray(9.0, dtype) * d)
    cands, oks = [], []
    for x, u in zip(xs, us):
        t = one + c * x
        v = t * t * t
        positive = xp.greater(v, np.asarray(0.0, dtype))
        v_safe = xp.where(positive, v, one)
        tiny = np.asarray(np.finfo(dtype).tiny, dtype)
        bound = np.asarray(0.5, dtype) * x * x + d - d * v_safe + d * xp.log(v_safe)
        oks.append(xp.logical_and(positive, xp.less(xp.log(xp.maximum(u, tiny)), bound)))
        cands.append(d * v_safe)
    g = _first_accepted(xp, cands, oks, d)
    tiny = np.asarray(np.finfo(dtype).tiny, dtype)
    boost = xp.exp(xp.log(xp.maximum(boost_u, tiny)) / a)
    return xp.where(small, g * boost, g), xp


def gamma(shape: Any, alpha: Any, dtype: Any = None, seed: Any = None) -> Any:
    """Gamma draws with concentration ``alpha`` (a number or an array broadcasting to
    ``shape``) and scale 1: mean ``alpha``, variance ``alpha``."""
    dtype = _float_dtype(dtype)
    _check_positive("gamma", "alpha", alpha)
    g, xp = _standard_gamma(shape, alpha, dtype, seed)
    return _cast(xp, g, dtype)


def beta(shape: Any, alpha: Any, beta: Any, dtype: Any = None, seed: Any = None) -> Any:
    """Beta(alpha, beta) draws (``X / (X + Y)`` of Gamma(alpha) and Gamma(beta) draws): mean
    ``alpha / (alpha + beta)``."""
    dtype = _float_dtype(dtype)
    _check_positive("beta", "alpha", alpha)
    _check_positive("beta", "beta", beta)
    s1, s2 = _subseeds(seed, 2)
    x, xp1 = _standard_gamma(shape, alpha, dtype, s1)
    y, xp2 = _standard_gamma(shape, beta, dtype, s2)
    xp = ops if ops in (xp1, xp2) else np
    return _cast(xp, x / (x + y), dtype)


def binomial(shape: Any, counts: Any, probabilities: Any, dtype: Any = None,
             seed: Any = None) -> Any:
    """Binomial draws: successes in ``counts`` trials of probability ``probabilities`` (each
    a number or an array broadcasting to ``shape``); the counts must be concrete (the trials
    are drawn as ``max(counts)`` uniform draws per element). Float dtype, as Keras."""
    dtype = _float_dtype(dtype)
    if _is_node(counts):
        raise TypeError("kiln.random.binomial: counts must be a number or an array (kiln draws "
                        "max(counts) trials per element), received a symbolic tensor")
    n = np.asarray(counts)
    if n.size == 0 or np.any(n < 0) or np.any(n != np.floor(n)):
        raise ValueError(f"kiln.random.binomial: counts must be non-negative integers, "
                         f"received {counts!r}")
    if not _is_node(probabilities):
        p = np.asarray(probabilities)
        if np.any((p < 0) | (p > 1)):
            raise ValueError(f"kiln.random.binomial: probabilities must be in [0, 1], "
                             f"received {probabilities!r}")
    trials = int(n.max())
    total = None
    for i, s in enumerate(_subseeds(seed, trials)):
        u = _draw("uniform", shape, dtype, s)
        xp = _xp(u, probabilities)
        hit = xp.logical_and(xp.less(u, np.asarray(probabilities, dtype) if xp is np
                                     else _cast(xp, probabilities, dtype)), np.asarray(i) < n)
        one = _cast(xp, hit, dtype)
        total = one if total is None else total + one
    if total is None:  # counts all 0
        return _cast(np, np.zeros(tuple(shape)), dtype) if ops.like_shape(shape) is None \
            else ops.zeros_like(ops.like_shape(shape, dtype))
    return total


def categorical(logits: Any, num_samples: int, dtype: Any = "int32", seed: Any = None) -> Any:
    """Class indices drawn from the softmax of ``logits`` (``(batch, classes)``):
    ``(batch, num_samples)`` draws (the Gumbel-max method)."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int | np.integer) \
            or num_samples < 1:
        raise ValueError(f"kiln.random.categorical: num_samples must be a positive int, "
                         f"received {num_samples!r}")
    node = _is_node(logits)
    x = logits if node else np.asarray(logits)
    shape = ops.shape(x) if node else x.shape
    if len(shape) != 2:
        raise ValueError(f"kiln.random.categorical: logits must be 2D (batch, classes), "
                         f"received shape {tuple(shape)}")
    fdtype = _float_dtype(getattr(x, "dtype", None) if str(getattr(x, "dtype", "")).startswith(
        "float") else None)
    u = _draw("uniform", (shape[0], int(num_samples), shape[1]), fdtype, seed)
    xp = _xp(u, x)
    tiny = np.asarray(np.finfo(fdtype).tiny, fdtype)
    gumbel = -xp.log(-xp.log(xp.maximum(u, tiny)))
    scores = xp.expand_dims(_cast(xp, x, fdtype), 1) + gumbel
    return _cast(xp, xp.argmax(scores, axis=-1), str(np.dtype(dtype)))


def shuffle(x: Any, axis: int = 0, seed: Any = None) -> Any:
    """``x`` with its entries along ``axis`` in a random order (a permutation)."""
    node = _is_node(x)
    arr = x if node else np.asarray(x)
    shape = ops.shape(arr) if node else arr.shape
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"kiln.random.shuffle: axis {axis} is out of range for shape "
                         f"{tuple(shape)}")
    keys = _draw("uniform", (shape[axis],), "float32", seed)
    xp = _xp(keys, arr)
    order = xp.argsort(keys)
    return xp.take(arr, order, axis=axis)


def _check_positive(where: str, name: str, value: Any) -> None:
    if not _is_node(value) and np.any(np.asarray(value) <= 0):
        raise ValueError(f"kiln.random.{where}: {name} must be positive, received {value!r}")


__all__ = ["SeedGenerator", "normal", "uniform", "randint", "dropout", "truncated_normal",
           "gamma", "beta", "binomial", "categorical", "shuffle"]
