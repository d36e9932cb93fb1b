"""RandomShear (Keras 3.15 arguments, defaults and formula), on kiln's affine transform, and
MaxNumBoundingBoxes."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node
from kiln.layers.base import Layer, is_symbolic
from kiln.layers.preprocessing._base import transform_rows
from kiln.layers.preprocessing.augment import _Geometric


def _shear_factor(name: str, factor: Any) -> tuple[float, float]:
    msg = (f"RandomShear: the `{name}` argument should be a number (or a list of two numbers) "
           f"in the range [0.0, 1.0]. Received: {name}={factor!r}")
    if isinstance(factor, list | tuple):
        # a pair may be negative (the config stores (-f, f); Keras 3.15 rejects its own)
        if len(factor) != 2 or any(isinstance(v, bool) or not isinstance(v, int | float)
                                   or not -1 <= v <= 1 for v in factor):
            raise ValueError(msg)
        lo, hi = sorted(float(v) for v in factor)
        return lo, hi
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 <= factor <= 1:
        raise ValueError(msg)
    return -abs(float(factor)), abs(float(factor))


class RandomShear(_Geometric):
    """Shears each image during training (Keras' ``RandomShear``): the output pixel ``(x,
    y)`` reads the input at ``(x + s_x y, s_y x + y)``, with ``s_x`` and ``s_y`` drawn per
    image in ``x_factor`` and ``y_factor`` and both negated with probability 1/2.

    Args:
        x_factor: a number ``f`` in [0, 1] (range ``[-f, f]``) or a pair in [-1, 1]
            (default 0.0).
        y_factor: likewise for the vertical shear (default 0.0).
        interpolation: "bilinear" (default) or "nearest".
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        fill_value: the value outside the image with ``fill_mode="constant"``.
        data_format: None or "channels_last".
        seed: optional int selecting the random stream.
    """

    def __init__(self, x_factor: Any = 0.0, y_factor: Any = 0.0,
                 interpolation: str = "bilinear", fill_mode: str = "reflect",
                 fill_value: float = 0.0, data_format: Any = None, seed: int | None = None,
                 **kwargs: Any):
        super().__init__(fill_mode, interpolation, seed, fill_value, data_format, **kwargs)
        self.x_factor = _shear_factor("x_factor", x_factor)
        self.y_factor = _shear_factor("y_factor", y_factor)

    def _transforms(self, x: Node, key: Node, h: int, w: int) -> Node:
        flip, ux, uy = self._uniform(key, x, 3, 0.0, 1.0)
        sign = K.where(K.greater(flip, K.constant(0.5, x.dtype)), K.constant(-1.0, x.dtype),
                       K.constant(1.0, x.dtype))
        sx = (ux * K.constant(self.x_factor[1] - self.x_factor[0], x.dtype)
              + K.constant(self.x_factor[0], x.dtype)) * sign
        sy = (uy * K.constant(self.y_factor[1] - self.y_factor[0], x.dtype)
              + K.constant(self.y_factor[0], x.dtype)) * sign
        return transform_rows([1.0, sx, 0.0, sy, 1.0, 0.0, 0.0, 0.0], sx)

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"x_factor": list(self.x_factor), "y_factor": list(self.y_factor)})
        return config


class MaxNumBoundingBoxes(Layer):
    """Pads or truncates the bounding boxes of a batch to ``max_number`` per image (Keras'
    ``MaxNumBoundingBoxes``), so that batches of detections have one shape. Images pass
    unchanged (an array, or a symbolic tensor inside a model).

    Called on ``{"images": ..., "bounding_boxes": {"boxes": (batch, n, 4), "labels": (batch,
    n)}}`` (NumPy arrays: a data-preparation step, like the lookup layers), it returns the
    same dict with boxes and labels cut to the first ``max_number`` or padded with
    ``fill_value``.

    Args:
        max_number: boxes per image in the output.
        fill_value: the padding value (default -1).
        bounding_box_format: accepted for Keras' configs (the boxes are not read).

    Example:
        >>> out = kiln.layers.MaxNumBoundingBoxes(10, bounding_box_format="xyxy")(data)
    """

    def __init__(self, max_number: int, fill_value: int = -1, **kwargs: Any):
        self.bounding_box_format = kwargs.pop("bounding_box_format", None)
        kwargs.pop("data_format", None)
        super().__init__(**kwargs)
        if isinstance(max_number, bool) or int(max_number) < 1:
            raise ValueError(f"MaxNumBoundingBoxes: max_number must be a positive int, "
                             f"received max_number={max_number!r}")
        self.max_number, self.fill_value = int(max_number), int(fill_value)

    def _fit(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)[:, :self.max_number]
        pad = [(0, 0), (0, self.max_number - a.shape[1])] + [(0, 0)] * (a.ndim - 2)
        return np.pad(a, pad, constant_values=self.fill_value)

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(inputs, dict):
            return inputs if is_symbolic(inputs) else np.asarray(inputs)
        out = dict(inputs)
        boxes = inputs.get("bounding_boxes")
        if boxes is not None:
            extra = set(boxes) - {"boxes", "labels"}
            if extra:
                raise KeyError(f"There are unsupported keys in `bounding_boxes`: "
                               f"{sorted(extra)}. Only `boxes` and `labels` are supported.")
            if any(is_symbolic(v) for v in boxes.values()):
                raise TypeError("MaxNumBoundingBoxes: bounding boxes are prepared on the host; "
                                "pass NumPy arrays")
            out["bounding_boxes"] = {k: self._fit(v) for k, v in boxes.items()}
        return out

    def call(self, inputs: Any) -> Any:
        return inputs

    def compute_output_shape(self, input_shape: Any) -> Any:
        return input_shape

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"max_number": self.max_number, "fill_value": self.fill_value,
                       "bounding_box_format": self.bounding_box_format})
        return config


def perspective_rows(ex: list, ey: list, w: int, h: int) -> Node:
    """``(batch, 8)`` projective rows whose transform reads, at each output pixel, the input
    point that maps the quadrilateral ``(ex, ey)`` (its corners in Keras' order: top-left,
    top-right, bottom-left, bottom-right; each a ``(batch, 1)`` tensor) back onto the image's
    corners. Closed form (Heckbert's square-to-quad homography ``S``, then ``diag(w - 1, h -
    1, 1) adj(S)``), so no linear solve in the graph."""
    x0, x1, x2, x3 = ex[0], ex[1], ex[3], ex[2]     # the unit square's (0,0) (1,0) (1,1) (0,1)
    y0, y1, y2, y3 = ey[0], ey[1], ey[3], ey[2]
    dx1, dx2, dx3 = x1 - x2, x3 - x2, x0 - x1 + x2 - x3
    dy1, dy2, dy3 = y1 - y2, y3 - y2, y0 - y1 + y2 - y3
    den = dx1 * dy2 - dx2 * dy1
    g = (dx3 * dy2 - dx2 * dy3) / den
    hh = (dx1 * dy3 - dx3 * dy1) / den
    a, b, c = x1 - x0 + g * x1, x3 - x0 + hh * x3, x0
    d, e, f = y1 - y0 + g * y1, y3 - y0 + hh * y3, y0
    one = K.ones_like(g)
    adj = [[e - f * hh, c * hh - b, b * f - c * e],
           [f * g - d, a - c * g, c * d - a * f],
           [d * hh - e * g, b * g - a * hh, a * e - b * d]]
    norm = adj[2][2]
    sx, sy = K.constant(float(w - 1), g.dtype), K.constant(float(h - 1), g.dtype)
    rows = [sx * v / norm for v in adj[0]] + [sy * v / norm for v in adj[1]] + \
        [adj[2][0] / norm, adj[2][1] / norm]
    return K.concatenate([r * one for r in rows], axis=1)


class RandomPerspective(_Geometric):
    """A random perspective warp of each image with probability drawn in ``factor`` during
    training (Keras' ``RandomPerspective``): the image's corners move by ``corner * u`` with
    ``u`` drawn per image and coordinate in ``[-scale / 2, scale / 2]``, and the output
    samples the input through the homography taking the moved corners back to the image's
    corners; outside points read ``fill_value``.

    Args:
        factor: probability, a number or a pair in [0, 1] (default 1.0).
        scale: the corners' displacement range, in [0, 1] (default 1.0).
        interpolation: "bilinear" (default) or "nearest".
        fill_value: the value outside the image (default 0.0).
        seed: optional int selecting the random stream.
        data_format: None or "channels_last".
    """

    def __init__(self, factor: Any = 1.0, scale: float = 1.0, interpolation: str = "bilinear",
                 fill_value: float = 0.0, seed: int | None = None, data_format: Any = None,
                 **kwargs: Any):
        from kiln.layers.augment_color import keras_factor

        super().__init__("constant", interpolation, seed, fill_value, data_format, **kwargs)
        self.factor = keras_factor("RandomPerspective", factor, (0.0, 1.0))
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 <= scale <= 1:
            raise ValueError("RandomPerspective: the `scale` argument should be a number in "
                             f"the range [0, 1]. Received: scale={scale!r}")
        self.scale = float(scale)

    def _augment(self, x: Node, key: Node) -> Node:
        h, w = self._static_hw(x)
        p, t, *u = self._uniform(key, x, 10, -0.5 * self.scale, 0.5 * self.scale)
        corners = [(0.0, 0.0), (w - 1.0, 0.0), (0.0, h - 1.0), (w - 1.0, h - 1.0)]
        ex = [K.constant(cx, x.dtype) * (u[2 * i] + K.constant(1.0, x.dtype))
              for i, (cx, _) in enumerate(corners)]
        ey = [K.constant(cy, x.dtype) * (u[2 * i + 1] + K.constant(1.0, x.dtype))
              for i, (_, cy) in enumerate(corners)]
        rows = perspective_rows(ex, ey, w, h)
        warped = K.affine_transform(x, rows, self.interpolation, "constant", self.fill_value)
        half = K.constant(0.5 * self.scale, x.dtype)
        span = K.constant(self.scale, x.dtype) if self.scale else K.constant(1.0, x.dtype)
        p01, t01 = (p + half) / span, (t + half) / span              # back to [0, 1)
        prob = p01 * K.constant(self.factor[1] - self.factor[0], x.dtype) + K.constant(
            self.factor[0], x.dtype)
        apply = K.less(K.reshape(t01, (-1, 1, 1, 1)), K.reshape(prob, (-1, 1, 1, 1)))
        return K.where(apply, warped, x)

    def get_config(self) -> dict:
        config = super().get_config()
        for k in ("fill_mode",):
            config.pop(k, None)
        config.update({"factor": list(self.factor), "scale": self.scale})
        return config
