"""Image files and arrays (``keras.utils.load_img``, ``img_to_array``, ``array_to_img``,
``save_img``), with Pillow, kiln's optional ``images`` extra (``pip install
"kiln-nn[images]"``): it is imported only when one of these functions runs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import kiln.config

_INSTALL = 'pip install "kiln-nn[images]"'


def pil_image() -> Any:
    """``PIL.Image``, or an ImportError that says how to install it."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise ImportError(f"kiln's image utilities need Pillow: {_INSTALL} (or pip install "
                          "Pillow)") from exc
    return Image


def resample(interpolation: str) -> Any:
    """Pillow's resampling filter of a Keras interpolation name."""
    Image = pil_image()
    filters = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR,
               "bicubic": Image.BICUBIC, "lanczos": Image.LANCZOS, "box": Image.BOX,
               "hamming": Image.HAMMING}
    if interpolation not in filters:
        raise ValueError(f"interpolation must be one of {sorted(filters)}, received "
                         f"{interpolation!r}")
    return filters[interpolation]


_MODES = {"grayscale": "L", "rgb": "RGB", "rgba": "RGBA"}


def load_img(path: str | os.PathLike[str] | Any, color_mode: str = "rgb",
             target_size: tuple[int, int] | None = None, interpolation: str = "nearest",
             keep_aspect_ratio: bool = False) -> Any:
    """Loads an image file as a PIL image, like ``keras.utils.load_img``.

    Args:
        path: File path (or a binary file object).
        color_mode: ``"grayscale"``, ``"rgb"`` or ``"rgba"``.
        target_size: ``(height, width)`` to resize to, or None to keep the size.
        interpolation: Resampling filter (``"nearest"``, ``"bilinear"``, ``"bicubic"``,
            ``"lanczos"``, ``"box"``, ``"hamming"``).
        keep_aspect_ratio: Center-crop to the target's aspect ratio before resizing.

    Returns:
        A ``PIL.Image.Image``.

    Raises:
        ImportError: Pillow is not installed (names ``pip install "kiln-nn[images]"``).
        ValueError: A bad ``color_mode`` or ``interpolation``.

    Example:
        >>> img = kiln.utils.load_img("cat.png", target_size=(64, 64))  # doctest: +SKIP
        >>> kiln.utils.img_to_array(img).shape  # doctest: +SKIP
        (64, 64, 3)
    """
    Image = pil_image()
    if color_mode not in _MODES:
        raise ValueError(f"load_img: color_mode must be one of {sorted(_MODES)}, received "
                         f"{color_mode!r}")
    if isinstance(path, str | os.PathLike):
        with open(path, "rb") as f:
            img = Image.open(f)
            img.load()
    else:
        img = Image.open(path)
    if img.mode != _MODES[color_mode]:
        img = img.convert(_MODES[color_mode])
    if target_size is not None:
        height, width = (int(d) for d in target_size)
        if (img.size[0], img.size[1]) != (width, height):
            if keep_aspect_ratio:
                img = img.crop(crop_box(img.size[0], img.size[1], height, width))
            img = img.resize((width, height), resample(interpolation))
    return img


def crop_box(w: int, h: int, target_h: int, target_w: int) -> tuple[int, int, int, int]:
    """The centered ``(left, top, right, bottom)`` box of a ``w x h`` image with the aspect
    ratio of ``target_w x target_h``."""
    crop_w = min(w, round(h * target_w / target_h))
    crop_h = min(h, round(w * target_h / target_w))
    left, top = (w - crop_w) // 2, (h - crop_h) // 2
    return left, top, left + crop_w, top + crop_h


def _data_format(data_format: str | None) -> str:
    data_format = data_format or "channels_last"
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', received "
                         f"{data_format!r}")
    return data_format


def img_to_array(img: Any, data_format: str | None = None, dtype: str | None = None
                 ) -> np.ndarray:
    """A PIL image as an array of shape ``(height, width, channels)`` (``channels_first``:
    ``(channels, height, width)``), like ``keras.utils.img_to_array``.

    Args:
        img: A PIL image.
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        dtype: Result dtype (default ``kiln.config.floatx()``); values stay 0-255.

    Returns:
        A 3-D array.
    """
    data_format = _data_format(data_format)
    x = np.asarray(img, dtype=dtype or kiln.config.floatx())
    if x.ndim == 2:
        x = x[:, :, None]
    elif x.ndim != 3:
        raise ValueError(f"img_to_array: unsupported image shape {x.shape}")
    return np.ascontiguousarray(x.transpose(2, 0, 1)) if data_format == "channels_first" else x


def array_to_img(x: Any, data_format: str | None = None, scale: bool = True,
                 dtype: str | None = None) -> Any:
    """An array ``(height, width, channels)`` with 1, 3 or 4 channels as a PIL image, like
    ``keras.utils.array_to_img``.

    Args:
        x: The array (channels last unless ``data_format="channels_first"``).
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        scale: Rescale the values to 0-255 (``x - min``, then ``* 255 / max``).
        dtype: Ignored (Keras' argument, kept for compatibility).

    Returns:
        A ``PIL.Image.Image`` (mode ``L``, ``RGB`` or ``RGBA``; ``I`` for one channel of
        values above 255 without ``scale``).

    Raises:
        ValueError: Not a 3-D array, or a channel count other than 1, 3 or 4.
    """
    Image = pil_image()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 3:
        raise ValueError(f"array_to_img: expected an image array of rank 3, received shape "
                         f"{a.shape}")
    if _data_format(data_format) == "channels_first":
        a = a.transpose(1, 2, 0)
    if scale:
        a = a - np.min(a)
        peak = np.max(a)
        if peak != 0:
            a = a / peak
        a = a * 255
    channels = a.shape[2]
    if channels in (3, 4):
        return Image.fromarray(a.astype(np.uint8), "RGB" if channels == 3 else "RGBA")
    if channels == 1:
        if np.max(a) > 255:
            return Image.fromarray(a[:, :, 0].astype(np.int32), "I")
        return Image.fromarray(a[:, :, 0].astype(np.uint8), "L")
    raise ValueError(f"array_to_img: unsupported channel number {channels} (shape {a.shape}); "
                     "expected 1, 3 or 4")


def save_img(path: str | os.PathLike[str], x: Any, data_format: str | None = None,
             file_format: str | None = None, scale: bool = True, **kwargs: Any) -> None:
    """Saves an image array to a file (written to a temp file, then renamed), like
    ``keras.utils.save_img``.

    Args:
        path: Destination file.
        x: Image array (see :func:`array_to_img`).
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        file_format: Pillow format name; None infers it from the extension.
        scale: Rescale the values to 0-255.
        **kwargs: Passed to ``PIL.Image.Image.save``.
    """
    img = array_to_img(x, data_format=data_format, scale=scale)
    path = Path(path)
    fmt = file_format or pil_image().registered_extensions().get(path.suffix.lower())
    if img.mode == "RGBA" and (fmt or "").upper() in ("JPEG", "JPG"):
        img = img.convert("RGB")  # JPEG has no alpha channel
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.",
                               suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            img.save(f, format=fmt, **kwargs)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
