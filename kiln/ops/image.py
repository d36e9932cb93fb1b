"""``kiln.ops.image``: Keras 3's image ops ``resize`` and ``affine_transform`` (graph and
eager: see ``kiln.ops``). Batched (rank 4) or single (rank 3) images, channels last unless
``data_format="channels_first"``."""

from __future__ import annotations

from kiln.ops import _G, _dual
from kiln.ops.image_resize import MATRIX_METHODS, matrix_resize


def _batched(op, images, data_format):
    x = _G.as_node(images)
    single = x.ndim == 3
    if single:
        x = _G.expand_dims(x, 0)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected images of rank 4 (or 3: one image), received "
                         f"{x.shape}")
    first = data_format == "channels_first"
    if data_format not in (None, "channels_last", "channels_first"):
        raise ValueError(f"data_format must be 'channels_last' or 'channels_first', received "
                         f"{data_format!r}")
    if first:
        x = _G.transpose(x, (0, 2, 3, 1))

    def back(y):
        if first:
            y = _G.transpose(y, (0, 3, 1, 2))
        return _G.squeeze(y, 0) if single else y
    return x, back


def _resize(images, size, interpolation="bilinear", antialias=False,
            crop_to_aspect_ratio=False, pad_to_aspect_ratio=False, fill_mode="constant",
            fill_value=0.0, data_format=None):
    if crop_to_aspect_ratio or pad_to_aspect_ratio:
        raise ValueError("resize: crop_to_aspect_ratio and pad_to_aspect_ratio are not "
                         f"supported, received crop_to_aspect_ratio={crop_to_aspect_ratio!r}, "
                         f"pad_to_aspect_ratio={pad_to_aspect_ratio!r}")
    if interpolation not in ("nearest", "bilinear") + MATRIX_METHODS:
        raise ValueError(f"resize: interpolation must be one of 'nearest', 'bilinear', "
                         f"{', '.join(map(repr, MATRIX_METHODS))}, received "
                         f"interpolation={interpolation!r}")
    x, back = _batched("resize", images, data_format)
    if interpolation in MATRIX_METHODS or (antialias and interpolation == "bilinear"):
        return back(matrix_resize(x, tuple(size), interpolation, bool(antialias)))
    return back(_G.resize(x, tuple(size), interpolation))


def _affine_transform(images, transform, interpolation="bilinear", fill_mode="constant",
                      fill_value=0, data_format=None):
    x, back = _batched("affine_transform", images, data_format)
    t = _G.as_node(transform, x.dtype)
    if t.ndim == 1:
        t = _G.expand_dims(t, 0)
    return back(_G.affine_transform(x, t, interpolation, fill_mode, fill_value))


resize = _dual(_resize, "resize")
resize.__doc__ = _G.resize.__doc__
affine_transform = _dual(_affine_transform, "affine_transform")
affine_transform.__doc__ = _G.affine_transform.__doc__

__all__ = ["resize", "affine_transform"]
