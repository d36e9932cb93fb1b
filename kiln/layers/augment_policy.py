"""RandAugment (Keras 3.15 arguments, defaults and policy): ``num_ops`` augmentations, each
picked per batch among eleven, applied in turn during training."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.layers.augment_color import (
    AutoContrast,
    RandomColorDegeneration,
    RandomPosterization,
    RandomSharpness,
    Solarization,
    keras_factor,
)
from kiln.layers.augment_geometric import RandomShear
from kiln.layers.augment_more import Equalization
from kiln.layers.preprocessing._base import RandomLayer, check_value_range
from kiln.layers.preprocessing.augment import (
    RandomBrightness,
    RandomContrast,
    RandomRotation,
    RandomTranslation,
)


def apply_augmentation(layer: Any, x: Node, key: Node) -> Node:
    """One augmentation layer's training transform of a rank-4 float batch."""
    if isinstance(layer, AutoContrast):
        return layer.call(x)
    if isinstance(layer, Equalization):
        return layer._equalize(x)
    return layer._augment(x, key)


class RandAugment(RandomLayer):
    """RandAugment (Keras' ``RandAugment``): during training, ``num_ops`` times, one of
    RandomShear, RandomTranslation, RandomRotation, RandomBrightness,
    RandomColorDegeneration, RandomContrast, RandomSharpness, RandomPosterization,
    Solarization, AutoContrast and Equalization is picked for the batch (uniformly) and
    applied; each uses ``factor`` as its strength (RandomPosterization keeps ``max(1, int(8
    factor))`` bits at most).

    Args:
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        num_ops: augmentations applied in turn (default 2).
        factor: a number or pair in [0, 1], the augmentations' strength (default 0.5).
        interpolation: "bilinear" (default) or "nearest", for the geometric ones.
        seed: optional int selecting the random streams.
        data_format: None or "channels_last".
    """

    def __init__(self, value_range: Any = (0, 255), num_ops: int = 2, factor: Any = 0.5,
                 interpolation: str = "bilinear", seed: int | None = None,
                 data_format: Any = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.value_range = check_value_range("RandAugment", value_range)
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"RandAugment: num_ops must be an int >= 0, received "
                             f"num_ops={num_ops!r}")
        self.num_ops = num_ops
        self.factor = keras_factor("RandAugment", factor, (0.0, 1.0))
        self.interpolation = interpolation
        f, vr, d = list(self.factor), list(self.value_range), self.dtype
        seeds = iter((self.salt + 7919 * (i + 1)) % 2**32 for i in range(16))
        common = {"dtype": d}
        self._ops = [
            RandomShear(f, f, interpolation=interpolation, seed=next(seeds), **common),
            RandomTranslation(f, f, interpolation=interpolation, seed=next(seeds), **common),
            RandomRotation(f, interpolation=interpolation, seed=next(seeds), **common),
            RandomBrightness(f, value_range=vr, seed=next(seeds), **common),
            RandomColorDegeneration(f, value_range=vr, seed=next(seeds), **common),
            RandomContrast(f, value_range=vr, seed=next(seeds), **common),
            RandomSharpness(f, value_range=vr, seed=next(seeds), **common),
            RandomPosterization(max(1, int(8 * self.factor[1])), value_range=vr,
                                seed=next(seeds), **common),
            Solarization(f, f, value_range=vr, seed=next(seeds), **common),
            AutoContrast(value_range=vr, **common),
            Equalization(value_range=vr, **common),
        ]

    def _sublayers(self) -> list:
        return []

    def _augment(self, x: Node, key: Node) -> Node:
        n = len(self._ops)
        picks = K.random_uniform(key, (max(self.num_ops, 1),), self.salt, dtype=x.dtype)
        for i in range(self.num_ops):
            pick = K.floor(K.reshape(K.slice(picks, [(i, i + 1, 1)], None), ()) * K.constant(
                float(n), x.dtype))
            out = x
            for k, layer in enumerate(self._ops):
                out = K.where(K.equal(pick, K.constant(float(k), x.dtype)),
                              apply_augmentation(layer, x, key), out)
            x = out
        return x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"value_range": list(self.value_range), "num_ops": self.num_ops,
                       "factor": list(self.factor), "interpolation": self.interpolation})
        return config


class AugMix(RandomLayer):
    """AugMix (Keras' ``AugMix``): during training, ``num_chains`` chains of ``chain_depth``
    steps, each step one augmentation picked per batch among the list or none (RandomShear,
    RandomTranslation, RandomRotation, RandomPosterization, Solarization, AutoContrast,
    Equalization, and with ``all_ops`` also RandomBrightness, RandomColorDegeneration,
    RandomContrast, RandomSharpness); the chains' outputs are mixed with Dirichlet(``alpha``)
    weights, and the result with the input by a Beta(``alpha``, ``alpha``) weight ``w``:
    ``w x + (1 - w) mix``, clipped to ``value_range``. One set of weights per batch, as Keras.

    Args:
        value_range: the pixels' ``[low, high]`` (default ``(0, 255)``).
        num_chains: the number of chains (default 3).
        chain_depth: the steps per chain (default 3).
        factor: a number or pair in [0, 1], the augmentations' strength (default 0.3).
        alpha: the Dirichlet and Beta parameter (default 1.0).
        all_ops: use the four colour augmentations too (default True).
        interpolation: "bilinear" (default) or "nearest".
        seed: optional int selecting the random streams.
        data_format: None or "channels_last".
    """

    def __init__(self, value_range: Any = (0, 255), num_chains: int = 3, chain_depth: int = 3,
                 factor: Any = 0.3, alpha: float = 1.0, all_ops: bool = True,
                 interpolation: str = "bilinear", seed: int | None = None,
                 data_format: Any = None, **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.value_range = check_value_range("AugMix", value_range)
        for name, v in (("num_chains", num_chains), ("chain_depth", chain_depth)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"AugMix: {name} must be a positive int, received {v!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha <= 0:
            raise ValueError(f"AugMix: alpha must be a positive number, received {alpha!r}")
        self.num_chains, self.chain_depth, self.alpha = num_chains, chain_depth, float(alpha)
        self.factor = keras_factor("AugMix", factor, (0.0, 1.0))
        self.all_ops, self.interpolation = bool(all_ops), interpolation
        f, vr = list(self.factor), list(self.value_range)
        seeds = iter((self.salt + 104729 * (i + 1)) % 2**32 for i in range(16))
        common = {"dtype": self.dtype}
        self._ops = [
            RandomShear(f, f, interpolation=interpolation, seed=next(seeds), **common),
            RandomTranslation(f, f, interpolation=interpolation, seed=next(seeds), **common),
            RandomRotation(f, interpolation=interpolation, seed=next(seeds), **common),
            RandomPosterization(max(1, int(8 * self.factor[1])), value_range=vr,
                                seed=next(seeds), **common),
            Solarization(f, f, value_range=vr, seed=next(seeds), **common),
            AutoContrast(value_range=vr, **common),
            Equalization(value_range=vr, **common),
        ]
        if self.all_ops:
            self._ops += [
                RandomBrightness(f, value_range=vr, seed=next(seeds), **common),
                RandomColorDegeneration(f, value_range=vr, seed=next(seeds), **common),
                RandomContrast(f, value_range=vr, seed=next(seeds), **common),
                RandomSharpness(f, value_range=vr, seed=next(seeds), **common),
            ]

    def _sublayers(self) -> list:
        return []

    def _augment(self, x: Node, key: Node) -> Node:
        from kiln.layers.augment_mix import beta, gamma

        n, steps = len(self._ops), self.num_chains * self.chain_depth
        picks = K.random_uniform(key, (steps,), self.salt, dtype=x.dtype)
        g = gamma(key, K.zeros((1, self.num_chains), x.dtype), self.salt + 1, self.alpha)
        weights = g / K.sum(g, axis=-1, keepdims=True)                   # Dirichlet
        w = K.reshape(beta(key, K.zeros((1, 1), x.dtype), self.salt + 101, self.alpha), ())
        mix = None
        for c in range(self.num_chains):
            y = x
            for d in range(self.chain_depth):
                s = c * self.chain_depth + d
                pick = K.floor(K.reshape(K.slice(picks, [(s, s + 1, 1)], None), ()) * K.constant(
                    float(n + 1), x.dtype))                              # n: no augmentation
                out = y
                for k, layer in enumerate(self._ops):
                    out = K.where(K.equal(pick, K.constant(float(k), x.dtype)),
                                  apply_augmentation(layer, y, key), out)
                y = out
            wc = K.reshape(K.slice(weights, [(None, None, 1), (c, c + 1, 1)], None), ())
            mix = y * wc if mix is None else mix + y * wc
        out = w * x + (K.constant(1.0, x.dtype) - w) * mix
        return K.clip(out, self.value_range[0], self.value_range[1])

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"value_range": list(self.value_range), "num_chains": self.num_chains,
                       "chain_depth": self.chain_depth, "factor": list(self.factor),
                       "alpha": self.alpha, "all_ops": self.all_ops,
                       "interpolation": self.interpolation})
        return config
