"""``keras.ops.image``'s warps: ``perspective_transform`` (a homography from four point pairs,
solved in the graph) and ``elastic_transform`` (blurred random displacements), both sampling
with ``map_coordinates``' taps and fill modes (graph and eager: see ``kiln.ops``).
"""

from __future__ import annotations

import itertools

import numpy as np

from kiln.ops import _G, _dual, random_normal
from kiln.ops import image_more as _im
from kiln.ops import linalg as _linalg

_N = _G.as_node
_ORDERS = {"nearest": 0, "bilinear": 1}


def _sample(x, ys, xs, order, fill_mode, fill_value):
    """``x`` (B, H, W, C) sampled at rows ``ys`` and columns ``xs`` (B or 1, H', W')."""
    b, h, w, c = x.shape
    per_image = ys.shape[0] != 1
    if per_image and b is None:
        raise ValueError(f"a warp with one transform per image needs a static batch, received "
                         f"images {x.shape}")
    table = _G.reshape(x, (-1, c) if per_image else (-1, h * w, c))
    taps = []
    for coord in (ys, xs):
        if order == 0:
            taps.append([(_G.round(coord), None)])
        else:
            lo = _G.floor(coord)
            frac = coord - lo
            taps.append([(lo, _im._c(1.0, frac) - frac), (lo + _im._c(1.0, lo), frac)])
    fill = _im._c(fill_value, x)
    out = None
    for (iy, wy), (ix, wx) in itertools.product(*taps):
        jy, oky = _im._fix(iy, h, fill_mode)
        jx, okx = _im._fix(ix, w, fill_mode)
        idx = _G.cast(jy, "int32") * _G.constant(np.asarray(w, "int32")) + _G.cast(jx, "int32")
        if per_image:
            base = np.arange(b, dtype="int32").reshape(b, 1, 1) * (h * w)
            val = _G.take(table, idx + _G.constant(base), 0)  # (B, H', W', C)
        else:
            val = _G.take(table, _G.squeeze(idx, 0), 1)  # (B, H', W', C)
        if oky is not None:
            ok = _G.expand_dims(_G.logical_and(oky, okx), -1)
            val = _G.where(ok if per_image else _G.squeeze(ok, 0), val, fill)
        if wy is not None:
            wgt = _G.expand_dims(wy * wx, -1)
            val = val * (wgt if per_image else _G.squeeze(wgt, 0))
        out = val if out is None else out + val
    return out


def _points(op, p, dtype):
    p = _G.cast(_N(p), dtype)
    if p.ndim not in (2, 3) or tuple(p.shape[-2:]) != (4, 2):
        raise ValueError(f"{op}: points must have shape (4, 2) or (batch, 4, 2), received "
                         f"{p.shape}")
    return p if p.ndim == 3 else _G.expand_dims(p, 0)


def _homography(start, end):
    """The 8 coefficients mapping output pixels (end points) to input pixels (start points)."""
    def pt(p, i, j):
        return _G.squeeze(_G.slice(p, ((None, None, 1), (i, i + 1, 1), (j, j + 1, 1))), (1, 2))
    rows, rhs = [], []
    for i in range(4):
        ex, ey, sx, sy = pt(end, i, 0), pt(end, i, 1), pt(start, i, 0), pt(start, i, 1)
        one, zero = _G.ones_like(ex), _G.zeros_like(ex)
        rows.append(_G.stack([ex, ey, one, zero, zero, zero, _G.neg(sx * ex),
                              _G.neg(sx * ey)], -1))
        rows.append(_G.stack([zero, zero, zero, ex, ey, one, _G.neg(sy * ex),
                              _G.neg(sy * ey)], -1))
        rhs += [sx, sy]
    return _linalg._solve(_G.stack(rows, 1), _G.stack(rhs, -1))  # (B, 8)


def _perspective_transform(images, start_points, end_points, interpolation="bilinear",
                           fill_value=0, data_format=None):
    op = "perspective_transform"
    if interpolation not in _ORDERS:
        raise ValueError(f"{op}: interpolation must be 'nearest' or 'bilinear', received "
                         f"{interpolation!r}")
    x, back = _im._nhwc(op, images, data_format)
    dtype = x.dtype
    x = _im._float(x)
    start, end = _points(op, start_points, x.dtype), _points(op, end_points, x.dtype)
    if start.shape != end.shape:
        raise ValueError(f"{op}: start_points {start.shape} and end_points {end.shape} differ")
    coef = _homography(start, end)
    _, h, w, _ = x.shape
    gx, gy = np.meshgrid(np.arange(w), np.arange(h), indexing="xy")
    gx, gy = _G.constant(gx[None].astype(x.dtype)), _G.constant(gy[None].astype(x.dtype))

    def a(k):
        return _G.reshape(_G.slice(coef, ((None, None, 1), (k, k + 1, 1))), (-1, 1, 1))
    denom = a(6) * gx + a(7) * gy + _im._c(1.0, x)
    x_in = (a(0) * gx + a(1) * gy + a(2)) / denom
    y_in = (a(3) * gx + a(4) * gy + a(5)) / denom
    y = _sample(x, y_in, x_in, _ORDERS[interpolation], "constant", fill_value)
    return back(y if y.dtype == dtype else _G.cast(y, dtype))


def _elastic_graph(images, key, alpha=20.0, sigma=5.0, interpolation="bilinear",
                   fill_mode="reflect", fill_value=0.0, data_format=None):
    op = "elastic_transform"
    if interpolation not in _ORDERS:
        raise ValueError(f"{op}: interpolation must be 'nearest' or 'bilinear', received "
                         f"{interpolation!r}")
    if fill_mode not in _im._FILL_MODES:
        raise ValueError(f"{op}: fill_mode must be one of {_im._FILL_MODES}, received "
                         f"{fill_mode!r}")
    x, back = _im._nhwc(op, images, data_format)
    dtype = x.dtype
    x = _im._float(x)
    b, h, w, _ = x.shape
    if b is None:
        raise ValueError(f"{op}: needs a static batch, received images {x.shape}")
    size = int(6 * sigma) | 1
    fields = []
    for salt in (0, 1):
        d = random_normal(key, (b, h, w, 1), salt=salt, dtype=x.dtype) * _im._c(sigma, x)
        d = _im._gaussian_blur(d, (size, size), (sigma, sigma))
        fields.append(_G.squeeze(d, -1) * _im._c(alpha, x))
    gx, gy = np.meshgrid(np.arange(w), np.arange(h), indexing="xy")
    xs = _G.constant(gx[None].astype(x.dtype)) + fields[0]
    ys = _G.constant(gy[None].astype(x.dtype)) + fields[1]
    y = _sample(x, ys, xs, _ORDERS[interpolation], fill_mode, fill_value)
    return back(y if y.dtype == dtype else _G.cast(y, dtype))


_elastic = _dual(_elastic_graph, "elastic_transform")


def elastic_transform(images, alpha=20.0, sigma=5.0, interpolation="bilinear",
                      fill_mode="reflect", fill_value=0.0, seed=None, data_format=None):
    """Elastic deformation: every pixel moves by ``alpha`` times a Gaussian-blurred (``sigma``)
    standard normal field of ``sigma``-scaled draws (Keras' recipe). An int ``seed`` gives the
    same field at every call; None draws a new one per call (kiln's generator, so the numbers
    differ from Keras' own)."""
    if seed is None:
        seed = int(np.random.default_rng().integers(0, 2**31 - 1))
    if not isinstance(seed, int | np.integer):
        raise TypeError(f"elastic_transform: seed must be an int or None, received "
                        f"{type(seed).__name__}")
    key = np.array([int(seed), 7], np.int64)
    return _elastic(images, key, alpha=alpha, sigma=sigma, interpolation=interpolation,
                    fill_mode=fill_mode, fill_value=fill_value, data_format=data_format)


# ---- scale_and_translate (JAX's, as Keras' backends compute it) ----------------------------------
_METHODS = {"linear": "linear", "bilinear": "linear", "trilinear": "linear", "triangle": "linear",
            "cubic": "cubic", "bicubic": "cubic", "tricubic": "cubic", "lanczos3": "lanczos3",
            "lanczos5": "lanczos5"}


def _kernel(method, x):
    c = _im._c
    zero, one = c(0.0, x), c(1.0, x)
    if method == "linear":
        return _G.maximum(zero, one - _G.abs(x))
    if method == "cubic":
        out = (c(1.5, x) * x - c(2.5, x)) * x * x + one
        far = ((c(-0.5, x) * x + c(2.5, x)) * x - c(4.0, x)) * x + c(2.0, x)
        out = _G.where(_G.greater_equal(x, one), far, out)
        return _G.where(_G.greater_equal(x, c(2.0, x)), zero, out)
    radius = 3.0 if method == "lanczos3" else 5.0
    y = c(radius, x) * _G.sin(c(np.pi, x) * x) * _G.sin(c(np.pi / radius, x) * x)
    small = _G.less_equal(x, c(1e-3, x))
    safe = _G.where(small, one, x)
    out = _G.where(small, one, y / (c(np.pi ** 2, x) * safe * safe))
    return _G.where(_G.greater(x, c(radius, x)), zero, out)


def _weights(m, n, scale, translation, method, antialias):
    """The (m, n) matrix taking an axis of length ``m`` to ``n`` samples (graph nodes: scale and
    translation may be symbolic, and are differentiable)."""
    c = _im._c
    inv = c(1.0, scale) / scale
    ks = _G.maximum(inv, c(1.0, inv)) if antialias else c(1.0, inv)
    sample = (_G.constant(np.arange(n, dtype=scale.dtype) + 0.5) * inv - translation * inv
              - c(0.5, inv))
    grid = _G.constant(np.arange(m, dtype=scale.dtype)[:, None])
    w = _kernel(method, _G.abs(_G.expand_dims(sample, 0) - grid) / ks)
    total = _G.sum(w, axis=0, keepdims=True)
    ok = _G.greater(_G.abs(total), c(1000.0 * np.finfo(np.float32).eps, total))
    w = _G.where(ok, w / _G.where(_G.equal(total, c(0.0, total)), c(1.0, total), total),
                 c(0.0, w))
    inside = _G.logical_and(_G.greater_equal(sample, c(-0.5, sample)),
                            _G.less_equal(sample, c(m - 0.5, sample)))
    return _G.where(_G.expand_dims(inside, 0), w, c(0.0, w))


def _scale_and_translate(images, output_shape, scale, translation, spatial_dims, method,
                         antialias=True):
    op = "scale_and_translate"
    if method not in _METHODS:
        raise ValueError(f"{op}: method must be one of {sorted(_METHODS)}, received "
                         f"{method!r}")
    x = _N(images)
    integer = x.dtype not in ("float32", "float64")
    out = _G.cast(x, "float32") if integer else x
    sc = _N(scale)
    tr = _N(translation)
    dtype = "float64" if "float64" in (sc.dtype, tr.dtype) else "float32"
    sc, tr = _G.cast(sc, dtype), _G.cast(tr, dtype)
    for i, d in enumerate(spatial_dims):
        d = d % x.ndim
        m, n = x.shape[d], int(output_shape[d])
        if m is None:
            raise ValueError(f"{op}: spatial dim {d} of {x.shape} must be static")
        pick = ((i, i + 1, 1),)
        w = _weights(m, n, _G.squeeze(_G.slice(sc, pick), 0),
                     _G.squeeze(_G.slice(tr, pick), 0), _METHODS[method], antialias)
        w = _G.cast(w, out.dtype)
        perm = [a for a in range(out.ndim) if a != d] + [d]
        moved = _G.matmul(_G.transpose(out, perm), w)
        out = _G.transpose(moved, [int(v) for v in np.argsort(perm)])
    if integer:
        lo = _G.cast(_G.min(x), "float32")
        hi = _G.cast(_G.max(x), "float32")
        out = _G.cast(_G.minimum(_G.maximum(_G.round(out), lo), hi), x.dtype)
    return out


scale_and_translate = _dual(_scale_and_translate, "scale_and_translate")
scale_and_translate.__doc__ = ("Resamples ``spatial_dims`` to ``output_shape`` with a "
                               "``scale`` and ``translation`` per dim (JAX's kernels and "
                               "antialiasing); scale and translation may be tensors.")
perspective_transform = _dual(_perspective_transform, "perspective_transform")
perspective_transform.__doc__ = ("Warps images so that ``start_points`` move to ``end_points`` "
                                 "(four (x, y) corners per image), zero fill.")

__all__ = ["perspective_transform", "elastic_transform", "scale_and_translate"]
