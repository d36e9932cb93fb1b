"""``kiln.preprocessing.image`` (``keras.preprocessing.image``): ``load_img``,
``img_to_array``, ``array_to_img``, ``save_img`` (the functions of :mod:`kiln.utils`) and
``smart_resize``."""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.utils.image_utils import array_to_img, img_to_array, load_img, save_img


def smart_resize(x: Any, size: tuple[int, int], interpolation: str = "bilinear",
                 data_format: str | None = None, backend_module: Any = None) -> np.ndarray:
    """Resizes images to ``size`` without distorting them, like
    ``keras.preprocessing.image.smart_resize``: the largest centered window of ``size``'s
    aspect ratio is cropped, then resized to ``size``.

    Args:
        x: One image ``(height, width, channels)`` or a batch of them (rank 4), NumPy.
        size: ``(height, width)``.
        interpolation: ``"bilinear"`` (default), ``"nearest"``, ``"bicubic"`` ...
        data_format: ``"channels_last"`` (default) or ``"channels_first"``.
        backend_module: Not used (Keras' backend choice).

    Returns:
        A float NumPy array of the same rank, ``size`` on the spatial axes.

    Raises:
        ValueError: ``x`` is not of rank 3 or 4, or ``size`` is not two positive ints.

    Example:
        >>> smart_resize(np.ones((10, 20, 3)), (5, 5)).shape
        (5, 5, 3)
    """
    from kiln.layers import Resizing
    if (not isinstance(size, list | tuple) or len(size) != 2
            or not all(isinstance(s, int | np.integer) and s > 0 for s in size)):
        raise ValueError(f"smart_resize: size must be (height, width) of positive ints, "
                         f"received size={size!r}")
    arr = np.asarray(x)
    if arr.ndim not in (3, 4):
        raise ValueError(f"smart_resize: expected an image of rank 3 (height, width, channels) "
                         f"or a batch of rank 4, received shape {arr.shape}")
    layer = Resizing(int(size[0]), int(size[1]), interpolation=interpolation,
                     crop_to_aspect_ratio=True, data_format=data_format)
    return np.asarray(layer(arr.astype("float32") if arr.dtype.kind != "f" else arr))


__all__ = ["load_img", "img_to_array", "array_to_img", "save_img", "smart_resize"]
