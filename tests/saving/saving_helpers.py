"""Helpers for the saving tests: small layers with weights, defined here so the weight store
can be tested on plain ``Layer`` subclasses."""

from __future__ import annotations

import os

import numpy as np

from kiln.layers.base import Layer

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras")


class Affine(Layer):
    """``x @ w + b`` with an int64 counter and a float64 non-trainable statistic."""

    def __init__(self, units: int = 3, in_dim: int = 4, **kwargs):
        super().__init__(**kwargs)
        self.units, self.in_dim = units, in_dim

    def build(self, input_shape=None):
        self.w = self.add_weight("w", (self.in_dim, self.units), "glorot_uniform")
        self.b = self.add_weight("b", (self.units,), "zeros")
        self.stat = self.add_weight("stat", (self.units,), "zeros", trainable=False,
                                    dtype="float64")
        self.count = self.add_weight("count", (), "zeros", trainable=False, dtype="int64")
        self.built = True

    def call(self, x):
        return x @ self.w + self.b


class Stack(Layer):
    """A container layer whose sublayers are attributes (like a subclassed model)."""

    def __init__(self, sizes=(4, 3, 2), names=None, **kwargs):
        super().__init__(**kwargs)
        names = names or [None] * (len(sizes) - 1)
        self.blocks = [Affine(o, i, name=n) for i, o, n in zip(sizes[:-1], sizes[1:], names)]
        for block in self.blocks:
            block.build()
        self.built = True

    @property
    def layers(self):
        return list(self.blocks)


def randomize(layer, seed=0):
    rng = np.random.default_rng(seed)
    for w in layer.weights:
        if w.dtype.startswith("int"):
            w.assign(rng.integers(0, 1000, size=w.shape))
        else:
            w.assign(rng.normal(size=w.shape))


def values(layer):
    return [w.numpy() for w in layer.weights]
