"""Image ops (channels-last ``(batch, height, width, channels)``): ``resize`` and
``affine_transform``, with their scatter gradients w.r.t. the pixels.

Both sample the input at computed coordinates, Keras' ``ops.image`` semantics:

* ``resize`` uses half-pixel centers (``src = (dst + 0.5) * in / out - 0.5``), the convention
  of Keras (JAX/TF backends) and of ``torch.nn.functional.interpolate(align_corners=False,
  antialias=False)``: bilinear interpolation with the taps clamped to the edge, or nearest
  (``floor((dst + 0.5) * in / out)``, torch's ``nearest-exact``);
* ``affine_transform`` maps each output pixel ``(x, y)`` to the input point
  ``((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k)``, ``k = c0 x + c1 y + 1``, from one row
  ``[a0, a1, a2, b0, b1, b2, c0, c1]`` per image (TF's projective transform, Keras'
  ``ops.image.affine_transform``), sampled like ``jax.scipy.ndimage.map_coordinates``:
  nearest rounds half away from zero, bilinear weighs the 4 neighbours; an index outside the
  image is fixed by ``fill_mode`` (``constant``: the tap reads ``fill_value``; ``nearest``:
  clamped; ``wrap``: periodic; ``mirror``: reflected about the edge pixel (d c b | a b c d ->
  c b | a b c d); ``reflect``: reflected about the edge (d c b a | a b c d)).

Both are linear in the image, so the image gradient is the transposed sampling (a scatter-add:
``resize_grad``, ``affine_transform_grad``). The transform rows are not differentiated: in
every use (the random augmentation layers) they are data drawn at random, and the bilinear
sampling is only piecewise differentiable in them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, fmt, require_float
from kiln.core.ops.registry import NN, Example, OpDef, apply, register

INTERPOLATIONS = ("nearest", "bilinear")
FILL_MODES = ("constant", "nearest", "wrap", "mirror", "reflect")
_BIG = 1e9  # sampling coordinates are clamped to +-_BIG (and NaN to -_BIG) before indexing


def _check_images(op: str, x: TensorType) -> None:
    require_float(op, x)
    if x.ndim != 4:
        raise ValueError(f"{op}: expected images of rank 4 (batch, height, width, channels), "
                         f"received shape {fmt(x.shape)}")


def _check_choice(op: str, name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{op}: {name} must be one of {', '.join(map(repr, allowed))}, "
                         f"received {name}={value!r}")


# ---- resize -------------------------------------------------------------------------------------
def resize_taps(n_in: int, n_out: int, interpolation: str
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 1-D resize from ``n_in`` to ``n_out`` samples (half-pixel centers) as two taps per
    output sample: ``out[i] = (1 - w[i]) * in[lo[i]] + w[i] * in[hi[i]]`` (int64, int64,
    float64; nearest has ``w = 0``)."""
    scale = n_in / n_out
    rows = np.arange(n_out, dtype=np.float64)
    if interpolation == "nearest":
        lo = np.minimum(np.floor((rows + 0.5) * scale).astype(np.int64), n_in - 1)
        return lo, lo.copy(), np.zeros(n_out)
    src = (rows + 0.5) * scale - 0.5
    lo_f = np.floor(src)
    w = src - lo_f
    lo = lo_f.astype(np.int64)
    return np.clip(lo, 0, n_in - 1), np.clip(lo + 1, 0, n_in - 1), w


def resize_matrix(n_in: int, n_out: int, interpolation: str) -> np.ndarray:
    """The ``(n_out, n_in)`` float64 matrix of a 1-D resize (half-pixel centers)."""
    lo, hi, w = resize_taps(n_in, n_out, interpolation)
    m = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(m, (rows, lo), 1.0 - w)
    np.add.at(m, (rows, hi), w)
    return m


def _resize_infer(x: TensorType, *, size: tuple, interpolation: str) -> TensorType:
    _check_images("resize", x)
    _check_choice("resize", "interpolation", interpolation, INTERPOLATIONS)
    if len(size) != 2 or any(int(s) < 1 for s in size):
        raise ValueError(f"resize: size must be two positive ints (height, width), "
                         f"received size={size!r}")
    if x.shape[1] is None or x.shape[2] is None:
        raise ValueError(f"resize: needs a known height and width, received images of shape "
                         f"{fmt(x.shape)}")
    if x.shape[1] == 0 or x.shape[2] == 0:
        raise ValueError(f"resize: an image needs at least one pixel, received images of shape "
                         f"{fmt(x.shape)}")
    return TensorType((x.shape[0], int(size[0]), int(size[1]), x.shape[3]), x.dtype)


def _resize_ref(x, *, size, interpolation):
    x = np.asarray(x)
    my = resize_matrix(x.shape[1], size[0], interpolation)
    mx = resize_matrix(x.shape[2], size[1], interpolation)
    return np.einsum("yh,bhwc,xw->byxc", my, x, mx).astype(x.dtype)


def _resize_grad_infer(ct: TensorType, x: TensorType, *, interpolation: str) -> TensorType:
    _check_images("resize_grad", x)
    _check_images("resize_grad", ct)
    for i, what in ((0, "batch size"), (3, "channels")):
        if ct.shape[i] is not None and x.shape[i] is not None and ct.shape[i] != x.shape[i]:
            raise ValueError(f"resize_grad: the cotangent of shape {fmt(ct.shape)} and the "
                             f"images of shape {fmt(x.shape)} differ in {what}")
    if 0 in (x.shape[1], x.shape[2], ct.shape[1], ct.shape[2]):
        raise ValueError(f"resize_grad: an image needs at least one pixel, received images of "
                         f"shape {fmt(x.shape)} and a cotangent of shape {fmt(ct.shape)}")
    return TensorType(x.shape, ct.dtype)


def _resize_grad_ref(ct, x, *, interpolation):
    ct = np.asarray(ct)
    shape = np.shape(x)
    my = resize_matrix(shape[1], ct.shape[1], interpolation)
    mx = resize_matrix(shape[2], ct.shape[2], interpolation)
    return np.einsum("yh,byxc,xw->bhwc", my, ct, mx).astype(ct.dtype)


def _resize_examples(rng, dt):
    x = rng.normal(size=(2, 4, 5, 3)).astype(dt)
    return [Example((x,), {"size": (6, 3), "interpolation": "bilinear"}),
            Example((x,), {"size": (3, 7), "interpolation": "nearest"}),
            Example((x,), {"size": (2, 2), "interpolation": "bilinear"})]


def _resize_grad_examples(rng, dt):
    return [Example((rng.normal(size=(2, 6, 3, 3)).astype(dt), np.zeros((2, 4, 5, 3), dt)),
                    {"interpolation": "bilinear"}, wrt=(0,)),
            Example((rng.normal(size=(1, 3, 7, 2)).astype(dt), np.zeros((1, 4, 5, 2), dt)),
                    {"interpolation": "nearest"}, wrt=(0,))]


register(OpDef("resize", NN, _resize_infer, _resize_ref,
               lambda ct, out, x, *, size, interpolation: [
                   apply("resize_grad", ct, x, interpolation=interpolation)],
               examples=_resize_examples,
               doc="resize images (half-pixel centers, Keras/torch align_corners=False)"))
register(OpDef("resize_grad", NN, _resize_grad_infer, _resize_grad_ref,
               lambda ct, out, g, x, *, interpolation: [
                   apply("resize", ct, size=tuple(g.shape[1:3]), interpolation=interpolation),
                   None],
               examples=_resize_grad_examples, shape_only=frozenset({1})))


# ---- affine_transform ---------------------------------------------------------------------------
def _check_transforms(op: str, x: TensorType, t: TensorType) -> None:
    require_float(op, t)
    ok = t.ndim == 2 and t.shape[1] == 8 and (
        t.shape[0] in (1, None) or x.shape[0] is None or t.shape[0] == x.shape[0])
    if not ok:
        raise ValueError(f"{op}: transforms must have shape (batch, 8) or (1, 8) for images of "
                         f"shape {fmt(x.shape)}, received {fmt(t.shape)}")


def _affine_infer(x: TensorType, t: TensorType, *, interpolation: str, fill_mode: str,
                  fill_value: float) -> TensorType:
    _check_images("affine_transform", x)
    _check_transforms("affine_transform", x, t)
    _check_choice("affine_transform", "interpolation", interpolation, INTERPOLATIONS)
    _check_choice("affine_transform", "fill_mode", fill_mode, FILL_MODES)
    return x


def _fix_index(i: np.ndarray, n: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``map_coordinates``' index fixers: (fixed index, valid)."""
    if mode == "constant":
        return i, (i >= 0) & (i < n)
    if mode == "nearest":
        i = np.clip(i, 0, n - 1)
    elif mode == "wrap":
        i = np.mod(i, n)
    elif mode == "mirror":
        i = np.zeros_like(i) if n == 1 else np.abs(np.mod(i + n - 1, 2 * n - 2) - (n - 1))
    else:  # reflect
        i = (np.abs(np.mod(2 * i + 1 + 2 * n, 4 * n) - 2 * n) - 1) // 2
    return i, np.ones(i.shape, bool)


def _taps(coord: np.ndarray, interpolation: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(index, weight) pairs of the 1-D interpolation at ``coord``."""
    coord = np.minimum(np.where(coord > -_BIG, coord, -_BIG), _BIG)
    if interpolation == "nearest":
        idx = (np.sign(coord) * np.floor(np.abs(coord) + 0.5)).astype(np.int64)
        return [(idx, np.ones(coord.shape))]
    lo = np.floor(coord)
    w_hi = coord - lo
    return [(lo.astype(np.int64), 1.0 - w_hi), (lo.astype(np.int64) + 1, w_hi)]


def _coords(t: np.ndarray, b: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Input (y, x) coordinates, each ``(b, h, w)``, of every output pixel."""
    t = np.asarray(t, np.float64)
    if t.ndim != 2 or t.shape[0] not in (1, b) or t.shape[1] != 8:
        raise ValueError(f"affine_transform: transforms must have shape (batch, 8) or (1, 8) "
                         f"for images of shape {(b, h, w)}, received {fmt(t.shape)}")
    t = np.broadcast_to(t, (b, 8))
    yy, xx = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64),
                         indexing="ij")
    a0, a1, a2, b0, b1, b2, c0, c1 = (t[:, k, None, None] for k in range(8))
    k = c0 * xx + c1 * yy + 1.0
    return (b0 * xx + b1 * yy + b2) / k, (a0 * xx + a1 * yy + a2) / k


def _affine_ref(x, t, *, interpolation, fill_mode, fill_value):
    x = np.asarray(x)
    b, h, w, _ = x.shape
    ys, xs = _coords(t, b, h, w)
    out = np.zeros(x.shape, np.float64)
    bi = np.arange(b)[:, None, None]
    for iy, wy in _taps(ys, interpolation):
        iy, vy = _fix_index(iy, h, fill_mode)
        for ix, wx in _taps(xs, interpolation):
            ix, vx = _fix_index(ix, w, fill_mode)
            valid = vy & vx
            vals = x[bi, np.where(valid, iy, 0), np.where(valid, ix, 0)].astype(np.float64)
            vals = np.where(valid[..., None], vals, fill_value)
            out += (wy * wx)[..., None] * vals
    return out.astype(x.dtype)


def _affine_grad_infer(ct: TensorType, t: TensorType, x: TensorType, *, interpolation: str,
                       fill_mode: str) -> TensorType:
    _check_images("affine_transform_grad", x)
    _check_transforms("affine_transform_grad", x, t)
    if ct.ndim != 4 or any(a is not None and b is not None and a != b
                           for a, b in zip(ct.shape, x.shape)):
        raise ValueError(f"affine_transform_grad: the cotangent of shape {fmt(ct.shape)} does "
                         f"not match the images of shape {fmt(x.shape)}")
    return TensorType(x.shape, ct.dtype)


def _affine_grad_ref(ct, t, x, *, interpolation, fill_mode):
    ct = np.asarray(ct)
    b, h, w, c = np.shape(x)
    ys, xs = _coords(t, b, h, w)
    out = np.zeros((b, h, w, c), np.float64)
    bi = np.broadcast_to(np.arange(b)[:, None, None], ys.shape)
    for iy, wy in _taps(ys, interpolation):
        iy, vy = _fix_index(iy, h, fill_mode)
        for ix, wx in _taps(xs, interpolation):
            ix, vx = _fix_index(ix, w, fill_mode)
            valid = vy & vx
            contrib = (wy * wx)[..., None] * ct
            np.add.at(out, (bi[valid], iy[valid], ix[valid]), contrib[valid])
    return out.astype(ct.dtype)


def _random_transforms(rng, b: int) -> np.ndarray:
    t = np.zeros((b, 8))
    t[:, 0] = t[:, 4] = 1.0
    t[:, :6] += rng.normal(scale=0.3, size=(b, 6))
    t[:, 2] += 0.37
    t[:, 5] -= 0.41
    t[:, 6:] = rng.normal(scale=0.02, size=(b, 2))
    return t


def _affine_examples(rng, dt):
    x = rng.normal(size=(2, 5, 4, 2)).astype(dt)
    t = _random_transforms(rng, 2).astype(dt)
    out = []
    for interp, mode in [("bilinear", "constant"), ("bilinear", "reflect"),
                         ("nearest", "wrap"), ("bilinear", "mirror"), ("nearest", "nearest")]:
        out.append(Example((x, t), {"interpolation": interp, "fill_mode": mode,
                                    "fill_value": 0.5}, wrt=(0,)))
    return out


def _affine_grad_examples(rng, dt):
    ct = rng.normal(size=(2, 5, 4, 2)).astype(dt)
    t = _random_transforms(rng, 2).astype(dt)
    return [Example((ct, t, np.zeros((2, 5, 4, 2), dt)),
                    {"interpolation": interp, "fill_mode": mode}, wrt=(0,))
            for interp, mode in [("bilinear", "constant"), ("nearest", "reflect"),
                                 ("bilinear", "wrap")]]


_NONDIFF_T = ("the transforms are sampling positions drawn as data (random augmentation); "
              "their gradient is not implemented (the image's is)")

register(OpDef("affine_transform", NN, _affine_infer, _affine_ref,
               lambda ct, out, x, t, *, interpolation, fill_mode, fill_value: [
                   apply("affine_transform_grad", ct, t, x, interpolation=interpolation,
                         fill_mode=fill_mode), None],
               examples=_affine_examples, nondiff_reason=_NONDIFF_T,
               doc="projective transform of images, Keras ops.image.affine_transform"))
register(OpDef("affine_transform_grad", NN, _affine_grad_infer, _affine_grad_ref,
               lambda ct, out, g, t, x, *, interpolation, fill_mode: [
                   apply("affine_transform", ct, t, interpolation=interpolation,
                         fill_mode=fill_mode, fill_value=0.0), None, None],
               examples=_affine_grad_examples, shape_only=frozenset({2}),
               nondiff_reason=_NONDIFF_T))


# ---- builders -----------------------------------------------------------------------------------
def resize(images: Any, size: Any, interpolation: str = "bilinear") -> Node:
    """Resizes ``(batch, height, width, channels)`` images to ``size = (height, width)``.

    Args:
        images: a float tensor of rank 4 (channels last) with known height and width.
        size: the output ``(height, width)``.
        interpolation: ``"bilinear"`` (default) or ``"nearest"``.

    Returns:
        The resized images, ``(batch, size[0], size[1], channels)``.

    Example:
        >>> y = kiln.ops.resize(x, (64, 64))
    """
    size = tuple(int(s) for s in size)
    return apply("resize", as_node(images), size=size, interpolation=str(interpolation))


def affine_transform(images: Any, transforms: Any, interpolation: str = "bilinear",
                     fill_mode: str = "constant", fill_value: float = 0.0) -> Node:
    """Applies one projective transform per image (Keras' ``ops.image.affine_transform``).

    Args:
        images: a float tensor ``(batch, height, width, channels)``.
        transforms: ``(batch, 8)`` or ``(1, 8)`` rows ``[a0, a1, a2, b0, b1, b2, c0, c1]``
            mapping each output pixel ``(x, y)`` to the input point
            ``((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k)``, ``k = c0 x + c1 y + 1``.
        interpolation: ``"bilinear"`` (default) or ``"nearest"``.
        fill_mode: ``"constant"`` (default), ``"nearest"``, ``"wrap"``, ``"mirror"`` or
            ``"reflect"``: how points outside the image are read.
        fill_value: the value read outside the image with ``fill_mode="constant"``.

    Returns:
        The transformed images (same shape).

    Example:
        >>> t = kiln.ops.constant(np.array([[1, 0, -2, 0, 1, 0, 0, 0]], "float32"))
        >>> y = kiln.ops.affine_transform(x, t)   # shifted 2 pixels to the right
    """
    x = as_node(images)
    t = as_node(transforms, x.dtype)
    if t.ndim == 1:
        t = apply("reshape", t, shape=(1, -1) if t.shape[0] is None else (1, t.shape[0]))
    return apply("affine_transform", x, t, interpolation=str(interpolation),
                 fill_mode=str(fill_mode), fill_value=float(fill_value))
