"""More of ``keras.ops.image``: color conversions, filters (``gaussian_blur``, ``sobel_edges``,
``ssim``), cropping and padding, patches and ``map_coordinates``, as composites of kiln ops
(graph and eager: see ``kiln.ops``). Images are rank 4 (or 3: one image), channels last unless
``data_format="channels_first"``; sizes, kernels and sigmas are static Python values.
"""

from __future__ import annotations

import itertools

import numpy as np

from kiln.ops import _G, _dual
from kiln.ops import nn as _nn

_N = _G.as_node


def _c(value, like):
    return _G.constant(np.asarray(value, like.dtype))


def _float(x):
    x = _N(x)
    return x if x.dtype in ("float32", "float64") else _G.cast(x, "float32")


def _rank34(op, x):
    if x.ndim not in (3, 4):
        raise ValueError(f"{op}: expected images of rank 3 (single image) or 4 (batch), "
                         f"received shape {x.shape}")


def _first(op, data_format):
    if data_format in (None, "channels_last"):
        return False
    if data_format == "channels_first":
        return True
    raise ValueError(f"{op}: data_format must be 'channels_last' or 'channels_first', received "
                     f"{data_format!r}")


def _channels(op, images, data_format):
    """``(x, axis)``: the images and their channel axis."""
    x = _N(images)
    _rank34(op, x)
    return x, (x.ndim - 3 if _first(op, data_format) else x.ndim - 1)


def _planes(x, axis):
    return [_G.squeeze(_G.slice(x, _spec(x.ndim, axis, i, i + 1)), axis) for i in range(3)]


def _spec(ndim, axis, lo, hi, step=1):
    spec = [(None, None, 1)] * ndim
    spec[axis] = (lo, hi, step)
    return spec


# ---- colors --------------------------------------------------------------------------------------
def _rgb_to_grayscale(images, data_format=None):
    x, ax = _channels("rgb_to_grayscale", images, data_format)
    if x.shape[ax] not in (1, 3):
        raise ValueError(f"rgb_to_grayscale: expected 3 (RGB) or 1 (grayscale) channels, "
                         f"received shape {x.shape}")
    if x.shape[ax] == 1:
        return x
    f = _float(x)
    r, g, b = _planes(f, ax)
    gray = _c(0.2989, f) * r + _c(0.5870, f) * g + _c(0.1140, f) * b
    gray = _G.expand_dims(gray, ax)
    return gray if x.dtype == f.dtype else _G.cast(gray, x.dtype)


def _require_float(op, x):
    if x.dtype not in ("float32", "float64"):
        raise ValueError(f"{op}: expected float images, received dtype {x.dtype}")


def _rgb_to_hsv(images, data_format=None):
    x, ax = _channels("rgb_to_hsv", images, data_format)
    _require_float("rgb_to_hsv", x)
    zero, one = _c(0.0, x), _c(1.0, x)
    eps = _c(np.finfo(x.dtype).eps, x)
    x = _G.where(_G.less(_G.abs(x), eps), zero, x)
    r, g, b = _planes(x, ax)
    value = _G.maximum(_G.maximum(r, g), b)
    rng = value - _G.minimum(_G.minimum(r, g), b)
    safe_value = _G.where(_G.greater(value, zero), value, one)
    safe_range = _G.where(_G.greater(rng, zero), rng, one)
    sat = _G.where(_G.greater(value, zero), rng / safe_value, zero)
    norm = one / (_c(6.0, x) * safe_range)
    hue = _G.where(_G.equal(value, g), norm * (b - r) + _c(2.0 / 6.0, x),
                   norm * (r - g) + _c(4.0 / 6.0, x))
    hue = _G.where(_G.equal(value, r), norm * (g - b), hue)
    hue = _G.where(_G.greater(rng, zero), hue, zero) + _G.cast(_G.less(hue, zero), x.dtype)
    return _G.stack([hue, sat, value], ax)


def _hsv_to_rgb(images, data_format=None):
    x, ax = _channels("hsv_to_rgb", images, data_format)
    _require_float("hsv_to_rgb", x)
    h, s, v = _planes(x, ax)
    zero, one = _c(0.0, x), _c(1.0, x)
    dh = (h - _G.floor(h)) * _c(6.0, x)
    dr = _G.clip(_G.abs(dh - _c(3.0, x)) - one, zero, one)
    dg = _G.clip(_c(2.0, x) - _G.abs(dh - _c(2.0, x)), zero, one)
    db = _G.clip(_c(2.0, x) - _G.abs(dh - _c(4.0, x)), zero, one)
    rest = one - s
    return _G.stack([v * (rest + s * dr), v * (rest + s * dg), v * (rest + s * db)], ax)


# ---- filters -------------------------------------------------------------------------------------
def _nhwc(op, images, data_format):
    """Batched channels-last float images and the function restoring the input's layout."""
    x = _N(images)
    _rank34(op, x)
    first = _first(op, data_format)
    single = x.ndim == 3
    if single:
        x = _G.expand_dims(x, 0)
    if first:
        x = _G.transpose(x, (0, 2, 3, 1))

    def back(y, extra=0):
        if first:
            y = _G.transpose(y, (0, 3, 1, 2) + tuple(range(4, 4 + extra)))
        return _G.squeeze(y, 0) if single else y
    return x, back


def _gauss1d(size, sigma):
    t = np.arange(size, dtype=np.float64) - (size - 1) / 2
    k = np.exp(-0.5 * (t / sigma) ** 2)
    return k / k.sum()


def _depthwise(x, kernel2d):
    """Each channel of NHWC ``x`` correlated with ``kernel2d`` (valid)."""
    c = x.shape[-1]
    k = np.repeat(np.asarray(kernel2d)[:, :, None, None], c, axis=2)
    return _nn._depthwise_conv(x, _G.constant(k.astype(x.dtype)))


def _gaussian_blur(images, kernel_size=(3, 3), sigma=(1.0, 1.0), data_format=None):
    x, back = _nhwc("gaussian_blur", images, data_format)
    dtype = x.dtype
    x = _float(x)
    ks = (int(kernel_size),) * 2 if np.ndim(kernel_size) == 0 else tuple(int(k) for k in
                                                                         kernel_size)
    sg = (float(sigma),) * 2 if np.ndim(sigma) == 0 else tuple(float(s) for s in sigma)
    # Keras' kernel: rows from kernel_size[1] / sigma[1], columns from kernel_size[0] / sigma[0]
    kernel = np.outer(_gauss1d(ks[1], sg[1]), _gauss1d(ks[0], sg[0]))
    kh, kw = kernel.shape
    x = _G.pad(x, ((0, 0), ((kh - 1) // 2, kh - 1 - (kh - 1) // 2),
                   ((kw - 1) // 2, kw - 1 - (kw - 1) // 2), (0, 0)))
    y = _depthwise(x, kernel[::-1, ::-1])
    return back(y if y.dtype == dtype else _G.cast(y, dtype))


def _edge_pad(x, axis):
    n = x.shape[axis]
    first = _G.slice(x, _spec(x.ndim, axis, 0, 1))
    last = _G.slice(x, _spec(x.ndim, axis, n - 1, n))
    return _G.concatenate([first, x, last], axis)


def _sobel_edges(images, data_format=None):
    x, back = _nhwc("sobel_edges", images, data_format)
    x = _float(x)
    h, w = x.shape[1], x.shape[2]
    p = _edge_pad(_edge_pad(x, 1), 2)  # scipy.ndimage's "reflect" at one pixel: the edge

    def at(i, j):
        return _G.slice(p, ((None, None, 1), (i, i + h, 1), (j, j + w, 1), (None, None, 1)))
    # ndimage.sobel(axis=0): [-1, 0, 1] down the rows, [1, 2, 1] across; axis=1 the transpose
    two = _c(2.0, x)
    dy = (at(2, 0) + two * at(2, 1) + at(2, 2)) - (at(0, 0) + two * at(0, 1) + at(0, 2))
    dx = (at(0, 2) + two * at(1, 2) + at(2, 2)) - (at(0, 0) + two * at(1, 0) + at(2, 0))
    return back(_G.stack([dy, dx], -1), extra=1)


def _ssim(image1, image2, max_val=1.0, filter_size=11, filter_sigma=1.5, k1=0.01, k2=0.03,
          data_format=None):
    a, _ = _nhwc("ssim", image1, data_format)
    b, _ = _nhwc("ssim", image2, data_format)
    single = _N(image1).ndim == 3
    a = _float(a)
    b = _G.cast(_N(b), a.dtype)
    _, h, w, c = a.shape
    k = _gauss1d(int(filter_size), float(filter_sigma))
    kernel = np.outer(k, k)

    def per_channel(t):
        return _G.reshape(_G.transpose(t, (0, 3, 1, 2)), (-1, h, w, 1))

    def blur(t):
        return _depthwise(t, kernel)
    a, b = per_channel(a), per_channel(b)
    mu1, mu2 = blur(a), blur(b)
    c1 = _c((k1 * max_val) ** 2, a)
    c2 = _c((k2 * max_val) ** 2, a)
    s1 = blur(a * a) - mu1 * mu1
    s2 = blur(b * b) - mu2 * mu2
    s12 = blur(a * b) - mu1 * mu2
    two = _c(2.0, a)
    smap = ((two * mu1 * mu2 + c1) * (two * s12 + c2)) / (
        (mu1 * mu1 + mu2 * mu2 + c1) * (s1 + s2 + c2))
    per = _G.reshape(_G.mean(smap, axis=(1, 2, 3)), (-1, c))
    out = _G.mean(per, axis=-1)
    return _G.squeeze(out, 0) if single else out


# ---- crop, pad, patches --------------------------------------------------------------------------
def _exactly_two(op, names, values):
    if list(values).count(None) != 1:
        raise ValueError(f"{op}: must specify exactly two of {', '.join(names)}. Received: "
                         + ", ".join(f"{n}={v}" for n, v in zip(names, values)))
    for n, v in zip(names, values):
        if v is not None and v < 0:
            raise ValueError(f"{op}: {n} must be >= 0. Received: {n}={v}")


def _hw_axes(x, data_format, op):
    first = _first(op, data_format)
    return (x.ndim - 2, x.ndim - 1) if first else (x.ndim - 3, x.ndim - 2)


def _crop_images(images, top_cropping=None, left_cropping=None, bottom_cropping=None,
                 right_cropping=None, target_height=None, target_width=None, data_format=None):
    op = "crop_images"
    x = _N(images)
    _rank34(op, x)
    _exactly_two(op, ("top_cropping", "bottom_cropping", "target_height"),
                 (top_cropping, bottom_cropping, target_height))
    _exactly_two(op, ("left_cropping", "right_cropping", "target_width"),
                 (left_cropping, right_cropping, target_width))
    hax, wax = _hw_axes(x, data_format, op)
    h, w = x.shape[hax], x.shape[wax]
    top = h - target_height - bottom_cropping if top_cropping is None else top_cropping
    th = h - bottom_cropping - top if target_height is None else target_height
    left = w - target_width - right_cropping if left_cropping is None else left_cropping
    tw = w - right_cropping - left if target_width is None else target_width
    if top < 0 or th < 0 or left < 0 or tw < 0 or top + th > h or left + tw > w:
        raise ValueError(f"{op}: the crop (top {top}, height {th}, left {left}, width {tw}) "
                         f"does not fit images of shape {x.shape}")
    spec = [(None, None, 1)] * x.ndim
    spec[hax], spec[wax] = (top, top + th, 1), (left, left + tw, 1)
    return _G.slice(x, spec)


def _pad_images(images, top_padding=None, left_padding=None, bottom_padding=None,
                right_padding=None, target_height=None, target_width=None, data_format=None):
    op = "pad_images"
    x = _N(images)
    _rank34(op, x)
    _exactly_two(op, ("top_padding", "bottom_padding", "target_height"),
                 (top_padding, bottom_padding, target_height))
    _exactly_two(op, ("left_padding", "right_padding", "target_width"),
                 (left_padding, right_padding, target_width))
    hax, wax = _hw_axes(x, data_format, op)
    h, w = x.shape[hax], x.shape[wax]
    top = target_height - bottom_padding - h if top_padding is None else top_padding
    bottom = target_height - top - h if bottom_padding is None else bottom_padding
    left = target_width - right_padding - w if left_padding is None else left_padding
    right = target_width - left - w if right_padding is None else right_padding
    if min(top, bottom, left, right) < 0:
        raise ValueError(f"{op}: the target size is smaller than images of shape {x.shape} "
                         f"(padding top {top}, bottom {bottom}, left {left}, right {right})")
    pads = [(0, 0)] * x.ndim
    pads[hax], pads[wax] = (top, bottom), (left, right)
    return _G.pad(x, pads)


def _extract_patches(images, size, strides=None, dilation_rate=1, padding="valid",
                     data_format=None):
    if not isinstance(size, int) and len(size) == 3:
        return _extract_patches_3d(images, size, strides, dilation_rate, padding, data_format)
    if isinstance(size, int):
        size = (size, size)
    if len(size) != 2:
        raise TypeError(f"extract_patches: size must be an int or 2 ints, received {size!r}")
    x = _N(images)
    _rank34("extract_patches", x)
    first = _first("extract_patches", data_format)
    c = x.shape[x.ndim - 3 if first else -1]
    out_dim = size[0] * size[1] * c
    kernel = np.eye(out_dim).reshape(size[0], size[1], c, out_dim)
    single = x.ndim == 3
    x = _G.expand_dims(x, 0) if single else x
    x = _float(x)
    y = _nn._conv(x, _G.constant(kernel.astype(x.dtype)), strides or tuple(size), padding,
                  data_format, dilation_rate)
    return _G.squeeze(y, 0) if single else y


def _same_pads(n, k, s, d):
    keff = (k - 1) * d + 1
    total = max((-(-n // s) - 1) * s + keff - n, 0)
    return total // 2, total - total // 2


def _extract_patches_3d(volumes, size, strides=None, dilation_rate=1, padding="valid",
                        data_format=None):
    op = "extract_patches_3d"
    x = _float(volumes)
    if x.ndim not in (4, 5):
        raise ValueError(f"{op}: expected volumes of rank 4 or 5, received shape {x.shape}")
    single = x.ndim == 4
    x = _G.expand_dims(x, 0) if single else x
    if _first(op, data_format):
        x = _G.transpose(x, (0, 2, 3, 4, 1))
    k = (int(size),) * 3 if isinstance(size, int) else tuple(int(v) for v in size)
    s = k if not strides else ((int(strides),) * 3 if isinstance(strides, int)
                               else tuple(int(v) for v in strides))
    d = (int(dilation_rate),) * 3 if isinstance(dilation_rate, int) else \
        tuple(int(v) for v in dilation_rate)
    if padding.lower() == "same":
        x = _G.pad(x, [(0, 0)] + [_same_pads(x.shape[1 + i], k[i], s[i], d[i])
                                  for i in range(3)] + [(0, 0)])
    elif padding.lower() != "valid":
        raise ValueError(f"{op}: padding must be 'valid' or 'same', received {padding!r}")
    outs = [(x.shape[1 + i] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(3)]
    taps = []
    for idx in itertools.product(*(range(v) for v in k)):
        spec = [(None, None, 1)] + [(idx[i] * d[i], idx[i] * d[i] + (outs[i] - 1) * s[i] + 1,
                                     s[i]) for i in range(3)] + [(None, None, 1)]
        taps.append(_G.slice(x, spec))
    y = _G.stack(taps, 4)  # (B, od, oh, ow, taps, C)
    y = _G.reshape(y, (-1, *outs, len(taps) * x.shape[-1]))
    if _first(op, data_format):
        y = _G.transpose(y, (0, 4, 1, 2, 3))
    return _G.squeeze(y, 0) if single else y


# ---- map_coordinates -----------------------------------------------------------------------------
_FILL_MODES = ("constant", "nearest", "wrap", "mirror", "reflect")


def _fix(i, n, mode):
    """Float tap indices ``i`` into ``[0, n)`` by ``mode``, and where they are valid."""
    zero, top = _c(0.0, i), _c(n - 1.0, i)
    inside = _G.logical_and(_G.greater_equal(i, zero), _G.less_equal(i, top))
    if mode in ("constant", "nearest"):
        return _G.clip(i, zero, top), (inside if mode == "constant" else None)

    def mod(a, m):
        return a - _c(m, a) * _G.floor(a / _c(m, a))
    if mode == "wrap":
        return mod(i, n), None
    if mode == "mirror":
        if n == 1:
            return _G.zeros_like(i), None
        j = mod(i, 2 * n - 2)
        return _G.where(_G.greater_equal(j, _c(n, j)), _c(2 * n - 2, j) - j, j), None
    j = mod(i, 2 * n)
    return _G.where(_G.greater_equal(j, _c(n, j)), _c(2 * n - 1, j) - j, j), None


def _map_coordinates(inputs, coordinates, order, fill_mode="constant", fill_value=0):
    op = "map_coordinates"
    x = _N(inputs)
    coords = _float(coordinates)
    if coords.ndim < 2 or coords.shape[0] != x.ndim:
        raise ValueError(f"{op}: coordinates must have rank >= 2 and one leading entry per "
                         f"axis of inputs {x.shape}, received {coords.shape}")
    if fill_mode not in _FILL_MODES:
        raise ValueError(f"{op}: fill_mode must be one of {_FILL_MODES}, received "
                         f"{fill_mode!r}")
    if order not in (0, 1):
        raise ValueError(f"{op}: order must be 0 or 1, received {order!r}")
    if None in x.shape:
        raise ValueError(f"{op}: inputs need a static shape, received {x.shape}")
    xf = _float(x)
    if xf.dtype != coords.dtype:
        coords = _G.cast(coords, xf.dtype)
    flat = _G.reshape(xf, (-1,))
    strides = np.cumprod((1,) + x.shape[::-1][:-1])[::-1]
    per_axis = []
    for k in range(x.ndim):
        ck = _G.squeeze(_G.slice(coords, _spec(coords.ndim, 0, k, k + 1)), 0)
        if order == 0:
            per_axis.append([(_G.round(ck), None)])
        else:
            lo = _G.floor(ck)
            w1 = ck - lo
            per_axis.append([(lo, _c(1.0, w1) - w1), (lo + _c(1.0, lo), w1)])
    fill = _c(fill_value, xf)
    out = None
    for combo in itertools.product(*per_axis):
        idx, valid, weight = None, None, None
        for (i, wgt), n, st in zip(combo, x.shape, strides):
            j, ok = _fix(i, n, fill_mode)
            term = _G.cast(j, "int32") * _G.constant(np.asarray(st, "int32"))
            idx = term if idx is None else idx + term
            if ok is not None:
                valid = ok if valid is None else _G.logical_and(valid, ok)
            if wgt is not None:
                weight = wgt if weight is None else weight * wgt
        val = _G.take(flat, idx, 0)
        if valid is not None:
            val = _G.where(valid, val, fill)
        if weight is not None:
            val = val * weight
        out = val if out is None else out + val
    return out if x.dtype == xf.dtype else _G.cast(_G.round(out) if x.dtype != "bool" else out,
                                                   x.dtype)


rgb_to_grayscale = _dual(_rgb_to_grayscale, "rgb_to_grayscale")
rgb_to_grayscale.__doc__ = "Luma ``0.2989 R + 0.5870 G + 0.1140 B`` in one channel."
rgb_to_hsv = _dual(_rgb_to_hsv, "rgb_to_hsv")
rgb_to_hsv.__doc__ = "RGB in [0, 1] to HSV in [0, 1] (hue 0 red, 1/3 green, 2/3 blue)."
hsv_to_rgb = _dual(_hsv_to_rgb, "hsv_to_rgb")
hsv_to_rgb.__doc__ = "HSV in [0, 1] to RGB."
gaussian_blur = _dual(_gaussian_blur, "gaussian_blur")
gaussian_blur.__doc__ = "Per-channel Gaussian blur, zero padding, output of the input's size."
sobel_edges = _dual(_sobel_edges, "sobel_edges")
sobel_edges.__doc__ = ("Sobel gradients ``[dy, dx]`` in a new last axis (edges repeated at the "
                       "border, as scipy.ndimage).")
ssim = _dual(_ssim, "ssim")
ssim.__doc__ = "Structural similarity per image (Gaussian window, valid filtering)."
crop_images = _dual(_crop_images, "crop_images")
crop_images.__doc__ = "Crops images; give exactly two of each (top, bottom, height) triple."
pad_images = _dual(_pad_images, "pad_images")
pad_images.__doc__ = "Zero-pads images; give exactly two of each (top, bottom, height) triple."
extract_patches = _dual(_extract_patches, "extract_patches")
extract_patches.__doc__ = ("Patches of ``size`` flattened into the channel axis "
                           "(``(kh, kw, C)`` order), as a convolution with an identity kernel.")
extract_patches_3d = _dual(_extract_patches_3d, "extract_patches_3d")
extract_patches_3d.__doc__ = "Patches of volumes, flattened ``(kd, kh, kw, C)``."
map_coordinates = _dual(_map_coordinates, "map_coordinates")
map_coordinates.__doc__ = ("Samples ``inputs`` at ``coordinates`` (one row per axis), order 0 "
                           "(nearest) or 1 (linear), scipy's fill modes.")

__all__ = ["rgb_to_grayscale", "rgb_to_hsv", "hsv_to_rgb", "gaussian_blur", "sobel_edges",
           "ssim", "crop_images", "pad_images", "extract_patches", "extract_patches_3d",
           "map_coordinates"]
