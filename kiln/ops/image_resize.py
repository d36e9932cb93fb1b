"""The resize methods of Keras' ``ops.image.resize`` beyond the core's two-tap ``resize`` op
(nearest and bilinear): ``"bicubic"``, ``"lanczos3"``, ``"lanczos5"``, ``"area"``, and
bilinear with ``antialias=True``.

Keras' JAX and NumPy backends compute these with ``scale_and_translate`` (half-pixel centers,
the kernel weights of every input sample normalized to sum 1, JAX's antialiasing), which
``kiln.ops.image.scale_and_translate`` already is: a resize is that op with the scale
``out / in`` and no translation, over the axes whose size changes. ``"area"`` (Keras'
TensorFlow backend: ``tf.image.resize(method="area")``) averages the input pixels each output
pixel's footprint overlaps, weighted by the overlap: a constant ``(out, in)`` matrix per axis,
applied with ``einsum``. All of them are linear in the image, so their gradients are the
transposed weights (from the ops' own rules).
"""

from __future__ import annotations

import numpy as np

from kiln.ops import _G

MATRIX_METHODS = ("bicubic", "lanczos3", "lanczos5", "area")


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """The ``(n_out, n_in)`` float64 matrix of TensorFlow's area resize along one axis.

    Example:
        >>> area_weights(4, 2)
        array([[0.5, 0.5, 0. , 0. ],
               [0. , 0. , 0.5, 0.5]])
    """
    scale = n_in / n_out
    lo = np.arange(n_out)[:, None] * scale
    cells = np.arange(n_in)[None, :]
    overlap = np.minimum(lo + scale, cells + 1) - np.maximum(lo, cells)
    return np.clip(overlap, 0.0, None) / scale


def matrix_resize(x, size: tuple[int, int], interpolation: str, antialias: bool):
    """Channels-last images ``x`` (a rank-4 node) resized to ``size`` (two ints)."""
    from kiln.ops.image_warp import _scale_and_translate  # image_warp imports kiln.ops.image

    h, w = x.shape[1], x.shape[2]
    if h is None or w is None:
        raise ValueError(f"resize: interpolation={interpolation!r} needs a known height and "
                         f"width, received images of shape {x.shape}")
    th, tw = (int(v) for v in size)
    if min(th, tw) < 1:
        raise ValueError(f"resize: size must be two positive ints (height, width), received "
                         f"{tuple(size)}")
    if interpolation == "area":
        if th != h:
            x = _G.einsum("Hh,bhwc->bHwc", _G.constant(area_weights(h, th).astype(x.dtype)), x)
        if tw != w:
            x = _G.einsum("Ww,bhwc->bhWc", _G.constant(area_weights(w, tw).astype(x.dtype)), x)
        return x
    dims = tuple(d for d, (n, m) in ((1, (h, th)), (2, (w, tw))) if n != m)
    if not dims:
        return x
    scale = np.array([(th / h, tw / w)[d - 1] for d in dims], "float32")
    return _scale_and_translate(x, (x.shape[0] or 1, th, tw, x.shape[3]), scale,
                                np.zeros(len(dims), "float32"), dims, interpolation, antialias)
