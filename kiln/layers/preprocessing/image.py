"""Deterministic image layers: Resizing, CenterCrop (channels last; Keras 3 arguments)."""

from __future__ import annotations

from typing import Any

import kiln.ops as K
from kiln.core import Node
from kiln.layers.preprocessing._base import ImageLayer, check_choice, check_size

RESIZE_INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "lanczos3", "lanczos5", "area")


def aspect_crop_box(h: int, w: int, th: int, tw: int) -> tuple[int, int, int, int]:
    """The largest centered window of an ``h x w`` image with the aspect ratio ``th : tw``:
    ``(top, left, height, width)`` (Keras' ``crop_to_aspect_ratio`` / ``smart_resize``)."""
    ch = max(min(h, int(float(w * th) / tw)), 1)
    cw = max(min(w, int(float(h * tw) / th)), 1)
    return int(float(h - ch) / 2), int(float(w - cw) / 2), ch, cw


def crop(x: Node, top: int, left: int, height: int, width: int) -> Node:
    """``x[:, top:top+height, left:left+width, :]``."""
    return K.slice(x, [(None, None, 1), (top, top + height, 1), (left, left + width, 1),
                       (None, None, 1)], None)


def smart_resize(x: Node, h: int, w: int, th: int, tw: int, interpolation: str,
                 antialias: bool = False) -> Node:
    """Center-crops to the target aspect ratio, then resizes to ``(th, tw)``."""
    top, left, ch, cw = aspect_crop_box(h, w, th, tw)
    if (ch, cw) != (h, w):
        x = crop(x, top, left, ch, cw)
    return x if (ch, cw) == (th, tw) else K.resize(x, (th, tw), interpolation,
                                                    antialias=antialias)


class Resizing(ImageLayer):
    """Resizes images to ``(height, width)`` (Keras' ``Resizing``).

    Sampling uses half-pixel centers, as Keras does (and ``torch.nn.functional.interpolate``
    with ``align_corners=False``); the result is differentiable w.r.t. the pixels, so the
    layer may sit in the middle of a model.

    Args:
        height, width: the output size.
        interpolation: ``"bilinear"`` (default), ``"nearest"``, ``"bicubic"``,
            ``"lanczos3"``, ``"lanczos5"`` or ``"area"`` (``kiln.ops.image.resize``).
        crop_to_aspect_ratio: first crop the largest centered window with the target aspect
            ratio (no distortion).
        pad_to_aspect_ratio: first pad the image evenly on both sides with ``fill_value`` to
            the target aspect ratio (no distortion).
        fill_mode: ``"constant"`` (the only mode, as in Keras).
        fill_value: the padding value (default 0.0).
        antialias: widen the kernel when downsampling (Keras' JAX/NumPy antialiasing).
        data_format: ``"channels_last"`` or None.

    Example:
        >>> y = kiln.layers.Resizing(64, 64, crop_to_aspect_ratio=True)(images)
    """

    def __init__(self, height: int, width: int, interpolation: str = "bilinear",
                 crop_to_aspect_ratio: bool = False, pad_to_aspect_ratio: bool = False,
                 fill_mode: str = "constant", fill_value: float = 0.0, antialias: bool = False,
                 data_format: Any = None, **kwargs: Any):
        super().__init__(data_format=data_format, **kwargs)
        self.height = check_size("Resizing", "height", height)
        self.width = check_size("Resizing", "width", width)
        self.interpolation = check_choice("Resizing", "interpolation", interpolation,
                                          RESIZE_INTERPOLATIONS)
        if crop_to_aspect_ratio and pad_to_aspect_ratio:
            raise ValueError("Resizing: only one of crop_to_aspect_ratio and "
                             "pad_to_aspect_ratio can be True")
        self.crop_to_aspect_ratio = bool(crop_to_aspect_ratio)
        self.pad_to_aspect_ratio = bool(pad_to_aspect_ratio)
        self.fill_mode = check_choice("Resizing", "fill_mode", fill_mode, ("constant",))
        self.fill_value = float(fill_value)
        self.antialias = bool(antialias)

    def call(self, inputs: Node) -> Node:
        x, added = self._images(inputs)
        h, w = self._static_hw(x)
        th, tw = self.height, self.width
        if self.crop_to_aspect_ratio:
            x = smart_resize(x, h, w, th, tw, self.interpolation, self.antialias)
        else:
            if self.pad_to_aspect_ratio:
                ph = max(h, int(float(w * th) / tw))
                pw = max(w, int(float(h * tw) / th))
                top, left = int(float(ph - h) / 2), int(float(pw - w) / 2)
                if top or left:  # Keras pads the same amount on both sides
                    x = K.pad(x, [(0, 0), (top, top), (left, left), (0, 0)], self.fill_value)
                    h, w = h + 2 * top, w + 2 * left
            if (h, w) != (th, tw):
                x = K.resize(x, (th, tw), self.interpolation, antialias=self.antialias)
        return K.squeeze(x, 0) if added else x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"height": self.height, "width": self.width,
                       "interpolation": self.interpolation,
                       "crop_to_aspect_ratio": self.crop_to_aspect_ratio,
                       "pad_to_aspect_ratio": self.pad_to_aspect_ratio,
                       "fill_mode": self.fill_mode, "fill_value": self.fill_value,
                       "antialias": self.antialias})
        return config


class CenterCrop(ImageLayer):
    """Crops the central ``(height, width)`` window of images (Keras' ``CenterCrop``); an
    image smaller than the target in either dimension is instead cropped to the target aspect
    ratio and resized (bilinear), as Keras does.

    Args:
        height, width: the output size.
        data_format: ``"channels_last"`` or None.

    Example:
        >>> y = kiln.layers.CenterCrop(24, 24)(images)
    """

    def __init__(self, height: int, width: int, data_format: Any = None, **kwargs: Any):
        super().__init__(data_format=data_format, **kwargs)
        self.height = check_size("CenterCrop", "height", height)
        self.width = check_size("CenterCrop", "width", width)

    def call(self, inputs: Node) -> Node:
        x, added = self._images(inputs)
        h, w = self._static_hw(x)
        if h >= self.height and w >= self.width:
            x = crop(x, (h - self.height) // 2, (w - self.width) // 2, self.height,
                     self.width)
        else:
            x = smart_resize(x, h, w, self.height, self.width, "bilinear")
        return K.squeeze(x, 0) if added else x

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"height": self.height, "width": self.width})
        return config
