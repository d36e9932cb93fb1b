"""What the preprocessing layers share: argument checks, the image layers' handling of
single images and integer pixels, and the random augmentation layers' base class.

Random augmentation (docs/layers.md, "Preprocessing"): a ``RandomLayer`` draws its numbers
with kiln's counter-based generator (``kiln.ops.random_uniform(key, like, salt)``) from the
trace context's random key, with its own stream (``seed``, or one drawn from kiln's seeded
generator when the layer is constructed, stored in its config as ``seed``), exactly like
``Dropout``. It is active in a model's training step and the identity in ``predict`` and
``evaluate``; called directly on arrays it is active by default (``training=True``), as a
Keras augmentation layer called on data is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import normalize_data_format, random_stream
from kiln.layers.base import Layer, is_symbolic
from kiln.layers.context import current, in_training
from kiln.layers.preprocessing.tf_data import is_tf_tensor, tf_call, tf_entry


def check_choice(layer: str, name: str, value: Any, allowed: tuple) -> Any:
    """``value`` if it is one of ``allowed``, else ValueError naming the layer class."""
    if value not in allowed:
        raise ValueError(f"{layer}: {name} must be one of {', '.join(map(repr, allowed))}, "
                         f"received {name}={value!r}")
    return value


def check_size(layer: str, name: str, value: Any) -> int:
    """A positive int target size (``height``, ``width``)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{layer}: {name} must be a positive int, received {name}={value!r}")
    return int(value)


def factor_range(layer: str, name: str, factor: Any, low: float, high: float,
                 low_open: bool = False, symmetric: bool = True) -> tuple[float, float]:
    """Keras' ``factor`` argument as ``(lower, upper)``: a number ``f`` is ``(-|f|, |f|)``
    (or ``(|f|, |f|)`` with ``symmetric=False``, for the "lower, upper" amounts of
    RandomContrast), a pair is sorted; every value must lie in ``[low, high]`` (``(low,
    high]`` with ``low_open``)."""
    def ok(v: float) -> bool:
        return (v > low if low_open else v >= low) and v <= high

    bounds = f"{'(' if low_open else '['}{low}, {high}]"
    if isinstance(factor, list | tuple):
        if len(factor) != 2 or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                       for v in factor):
            raise ValueError(f"{layer}: {name} must be a number or a pair of numbers, "
                             f"received {name}={factor!r}")
        lo, hi = sorted(float(v) for v in factor)
        if not (ok(lo) and ok(hi)):
            raise ValueError(f"{layer}: {name} values must lie in {bounds}, received "
                             f"{name}={factor!r}")
        return lo, hi
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        raise ValueError(f"{layer}: {name} must be a number or a pair of numbers, received "
                         f"{name}={factor!r}")
    f = abs(float(factor))
    if not ok(f) or (symmetric and not ok(-f)):
        raise ValueError(f"{layer}: {name} must lie in {bounds}, received {name}={factor!r}")
    return (-f, f) if symmetric else (f, f)


def check_value_range(layer: str, value_range: Any) -> tuple[float, float]:
    if not isinstance(value_range, list | tuple) or len(value_range) != 2:
        raise ValueError(f"{layer}: value_range must be a pair [low, high], received "
                         f"value_range={value_range!r}")
    lo, hi = sorted(float(v) for v in value_range)
    return lo, hi


class ImageLayer(Layer):
    """Base of the image layers: channels-last images ``(batch, height, width, channels)``
    or one image ``(height, width, channels)``; integer pixels are cast to the layer's float
    dtype (Keras' compute dtype)."""

    def __init__(self, data_format: Any = None, **kwargs: Any):
        boxes = kwargs.pop("bounding_box_format", None)  # Keras' boxes: not supported
        if boxes is not None:
            raise ValueError(f"{type(self).__name__}: bounding boxes are not supported by "
                             f"kiln, received bounding_box_format={boxes!r}")
        super().__init__(**kwargs)
        self.data_format = normalize_data_format(type(self).__name__, data_format)

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if is_tf_tensor(inputs):  # inside tf.data: TF ops (tf_data.py)
            return tf_call(self, inputs, *args, **kwargs)
        if not is_symbolic(inputs) and np.ndim(inputs) == 3:
            # One image: its height is not a batch axis (the eager path would make it None)
            out = super().__call__(np.asarray(inputs)[None], *args, **kwargs)
            return out[0]
        return super().__call__(inputs, *args, **kwargs)

    def _check_inputs(self, inputs: Any) -> None:
        if isinstance(inputs, Node) and inputs.ndim not in (3, 4):
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) expects images of "
                             "rank 4 (batch, height, width, channels) or 3 (height, width, "
                             f"channels), received shape {format_shape(inputs.shape)}")
        if isinstance(inputs, Node) and 0 in inputs.shape[-3:-1]:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}): an image needs at "
                             "least one pixel, received images of shape "
                             f"{format_shape(inputs.shape)}")

    def _images(self, inputs: Node) -> tuple[Node, bool]:
        """The inputs as a float rank-4 batch, and whether a batch axis was added."""
        x = inputs if inputs.dtype == self.dtype else K.cast(inputs, self.dtype)
        if x.ndim == 3:
            return K.expand_dims(x, 0), True
        return x, False

    def _static_hw(self, x: Node) -> tuple[int, int]:
        h, w = x.shape[1], x.shape[2]
        if h is None or w is None:
            raise ValueError(f"Layer '{self.name}' ({type(self).__name__}) needs a known "
                             f"height and width, received images of shape "
                             f"{format_shape(x.shape)}")
        return int(h), int(w)

    def get_config(self) -> dict:
        config = super().get_config()
        config["data_format"] = self.data_format
        return config


class RandomLayer(ImageLayer):
    """Base of the random augmentation layers (see the module docstring)."""

    def __init__(self, seed: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.seed = None if seed is None else int(seed)
        self._stream = random_stream(self.seed, True)

    @property
    def salt(self) -> int:
        """This layer's random stream."""
        return int(self._stream or 0)

    @tf_entry
    def __call__(self, inputs: Any, *args: Any, training: bool | None = None,
                 **kwargs: Any) -> Any:
        if training is None and current() is None and not is_symbolic(inputs) \
                and not is_tf_tensor(inputs):
            training = True  # called on data: augment, as Keras does
        return super().__call__(inputs, *args, training=training, **kwargs)

    def _key(self, training: bool | None) -> Node | None:
        """The random key when this call augments, else None (identity)."""
        ctx = current()
        if not in_training(training) or ctx is None or ctx.rng_key is None:
            return None
        return ctx.rng_key

    def _uniform(self, key: Node, x: Node, count: int, low: float, high: float) -> list[Node]:
        """``count`` independent uniform draws in ``[low, high)`` per image, each ``(batch,
        1)`` (one row of the generator per image)."""
        corner = K.reshape(K.slice(x, [(None, None, 1), (0, 1, 1), (0, 1, 1), (0, 1, 1)], None),
                           (-1, 1))
        like = K.concatenate([corner] * count, axis=1) if count > 1 else corner
        u = K.random_uniform(key, like, self.salt)
        u = u * K.constant(high - low, x.dtype) + K.constant(low, x.dtype)
        return [K.slice(u, [(None, None, 1), (k, k + 1, 1)], None) for k in range(count)]

    def call(self, inputs: Node, training: bool | None = None) -> Node:
        key = self._key(training)
        x, added = self._images(inputs)
        if key is not None:
            x = self._augment(x, key)
        return K.squeeze(x, 0) if added else x

    def _augment(self, x: Node, key: Node) -> Node:
        raise NotImplementedError

    def get_config(self) -> dict:
        config = super().get_config()
        config["seed"] = self.seed if self.seed is not None else self._stream
        return config


def transform_rows(parts: list[Any], like: Node) -> Node:
    """Concatenates ``(batch, 1)`` columns (nodes or Python numbers) into ``(batch, 8)``
    transform rows for ``kiln.ops.affine_transform``."""
    zero = like * K.constant(0.0, like.dtype)
    cols = [p if isinstance(p, Node) else zero + K.constant(float(p), like.dtype)
            for p in parts]
    return K.concatenate(cols, axis=1)
