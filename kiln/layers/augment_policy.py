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
            pick = K.floor(K.reshape(K.slice(picks, [(i, i + 1, 1)]), ()) * K.constant(
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
