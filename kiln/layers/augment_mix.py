"""MixUp and CutMix (Keras 3.15 arguments, defaults and formulas): each image is mixed with
another image of the batch (a random permutation), and so are the labels when the layer is
called on ``{"images": ..., "labels": ...}``. Active in training and when called on data,
the identity in ``predict``/``evaluate``.

Their Beta draws use the Gamma ratio ``X / (X + Y)``; a Gamma(a) draw is Marsaglia and
Tsang's method on ``a + 1`` (eight tries with independent draws, the first accepted one;
each is accepted with probability above 0.95) times ``U^(1 / a)``.
"""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.layers.augment_color import _c, _col, keras_factor
from kiln.layers.augment_more import _box_mask
from kiln.layers.base import Layer, is_symbolic
from kiln.layers.preprocessing._base import RandomLayer

_TRIES = 8


def _column(x: Node) -> Node:
    """A ``(batch, 1)`` tensor of zeros shaped after the images' batch."""
    return K.zeros_like(K.reshape(K.slice(x, [(None, None, 1), (0, 1, 1), (0, 1, 1),
                                              (0, 1, 1)], None), (-1, 1)))


def gamma(key: Node, like: Node, salt: int, a: Any) -> Node:
    """Gamma(``a``) draws shaped like ``like`` (``a`` a number or a tensor broadcasting)."""
    a = a if isinstance(a, Node) else _c(float(a), like)
    d = a + _c(1.0 - 1.0 / 3.0, like)
    c = K.rsqrt(_c(9.0, like) * d)
    out = K.zeros_like(like)
    done = K.less(like, like)  # all False
    for k in range(_TRIES):
        z = K.random_normal(key, like, (salt + 2 * k) % 2**32)
        u = K.random_uniform(key, like, (salt + 2 * k + 1) % 2**32)
        v = K.power(K.maximum(_c(1.0, like) + c * z, _c(1e-30, like)), _c(3.0, like))
        ok = K.logical_and(K.greater(_c(1.0, like) + c * z, _c(0.0, like)),
                           K.less(K.log(K.maximum(u, _c(1e-30, like))),
                                  _c(0.5, like) * K.square(z) + d - d * v + d * K.log(v)))
        take = K.logical_and(ok, K.logical_not(done))
        out = K.where(take, d * v, out)
        done = K.logical_or(done, ok)
    out = K.where(done, out, d)  # never reached in practice: the mode's neighbourhood
    boost = K.random_uniform(key, like, (salt + 2 * _TRIES) % 2**32)
    return out * K.power(K.maximum(boost, _c(1e-30, like)), _c(1.0, like) / a)


def beta(key: Node, like: Node, salt: int, a: Any) -> Node:
    """Beta(``a``, ``a``) draws shaped like ``like``."""
    x = gamma(key, like, salt, a)
    y = gamma(key, like, salt + 4 * _TRIES, a)
    return x / K.maximum(x + y, _c(1e-30, like))


class _Mixing(RandomLayer):
    """Images (and labels) mixed with a random permutation of the batch."""

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(inputs, dict):
            extra = set(inputs) - {"images", "labels"}
            if "images" not in inputs or extra:
                raise ValueError(f"{type(self).__name__}: a dict input needs 'images' and "
                                 f"optionally 'labels', received keys {sorted(inputs)}")
            if "labels" not in inputs:
                return {"images": self(inputs["images"], *args, **kwargs)}
            pair = [inputs["images"], inputs["labels"]]
            if not any(is_symbolic(t) for t in pair):
                kwargs.setdefault("training", True)
            images, labels = Layer.__call__(self, pair, *args, **kwargs)  # a pair, not images
            return {"images": images, "labels": labels}
        return super().__call__(inputs, *args, **kwargs)

    def _check_inputs(self, inputs: Any) -> None:
        super()._check_inputs(inputs[0] if isinstance(inputs, list) else inputs)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        images, labels = (inputs[0], inputs[1]) if isinstance(inputs, list) else (inputs, None)
        key = self._key(training)
        x, added = self._images(images)
        if key is None or added:  # one image: nothing to mix with (Keras returns it)
            out = K.squeeze(x, 0) if added else x
            return out if labels is None else [out, labels]
        (order,) = self._uniform(key, x, 1, 0.0, 1.0)
        perm = K.argsort(K.reshape(order, (-1,)))
        x, weight = self._mix(x, key, perm)
        if labels is None:
            return x
        y = labels if labels.dtype == x.dtype else K.cast(labels, x.dtype)
        w = K.reshape(weight, (-1,) + (1,) * (y.ndim - 1))
        return [x, w * y + (_c(1.0, x) - w) * K.take(y, perm, axis=0)]

    def _mix(self, x: Node, key: Node, perm: Node) -> tuple[Node, Node]:
        raise NotImplementedError


class MixUp(_Mixing):
    """MixUp (Keras' ``MixUp``): ``w x + (1 - w) x[perm]`` with ``w ~ Beta(alpha, alpha)``
    per image and a random permutation ``perm`` of the batch; labels (a dict input) mixed
    with the same weights.

    Args:
        alpha: the Beta distribution's parameter (default 0.2).
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.

    Example:
        >>> out = kiln.layers.MixUp(0.2)({"images": images, "labels": one_hot_labels})
    """

    def __init__(self, alpha: float = 0.2, data_format: Any = None, seed: int | None = None,
                 **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or alpha <= 0:
            raise ValueError(f"MixUp: alpha must be a positive number, received alpha={alpha!r}")
        self.alpha = float(alpha)

    def _mix(self, x: Node, key: Node, perm: Node) -> tuple[Node, Node]:
        w = beta(key, _column(x), self.salt + 1, self.alpha)
        return _col(w) * x + (_c(1.0, x) - _col(w)) * K.take(x, perm, axis=0), w

    def get_config(self) -> dict:
        config = super().get_config()
        config["alpha"] = self.alpha
        return config


class CutMix(_Mixing):
    """CutMix (Keras' ``CutMix``): a box of each image is replaced by the same box of
    another image of the batch; ``alpha`` is drawn in ``factor`` per batch, ``w ~ Beta(alpha,
    alpha)`` per image, the box's sides are ``sqrt(1 - w)`` of the image's, placed uniformly;
    labels (a dict input) are mixed by the kept area ``1 - box area / image area``.

    Args:
        factor: a number or pair in [0, 1], the range of ``alpha`` (default 1.0).
        seed: optional int selecting the random stream.
        data_format: None or "channels_last".
    """

    def __init__(self, factor: Any = 1.0, seed: int | None = None, data_format: Any = None,
                 **kwargs: Any):
        super().__init__(seed=seed, data_format=data_format, **kwargs)
        self.factor = keras_factor("CutMix", factor, (0.0, 1.0))

    def _mix(self, x: Node, key: Node, perm: Node) -> tuple[Node, Node]:
        h, w = self._static_hw(x)
        a = K.random_uniform(key, (1,), (self.salt + 1) % 2**32, dtype=x.dtype)
        a = K.reshape(a * _c(self.factor[1] - self.factor[0], x) + _c(self.factor[0] + 1e-6,
                                                                       x), ())
        weight = beta(key, _column(x), self.salt + 2, a)
        ratio = K.sqrt(_c(1.0, x) - weight)
        px, py = self._uniform(key, x, 2, 0.0, 1.0)
        bounds = []
        for pos, n in ((px, w), (py, h)):
            length = ratio * _c(float(n), x)
            start = pos * (_c(float(n), x) - length)
            bounds += [start, start + length]
        x0, x1, y0, y1 = bounds
        mask = _box_mask(x, x0, x1, y0, y1)
        kept = _c(1.0, x) - (x1 - x0) * (y1 - y0) / _c(float(h * w), x)
        return K.where(mask, K.take(x, perm, axis=0), x), kept

    def get_config(self) -> dict:
        config = super().get_config()
        config["factor"] = list(self.factor)
        return config
