"""Oracles of the preprocessing tests, written from the documented formulas (Keras'
``ops.image`` semantics: half-pixel-center resize, ``map_coordinates`` sampling)."""

from __future__ import annotations

import math

import numpy as np


def resize_loop(x, oh, ow, interpolation):
    """Half-pixel-center resize, pixel by pixel (Keras / torch align_corners=False)."""
    b, h, w, c = x.shape
    out = np.zeros((b, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            if interpolation == "nearest":
                yi = min(int(math.floor((i + 0.5) * h / oh)), h - 1)
                xj = min(int(math.floor((j + 0.5) * w / ow)), w - 1)
                out[:, i, j] = x[:, yi, xj]
                continue
            sy = max((i + 0.5) * h / oh - 0.5, 0.0)
            sx = max((j + 0.5) * w / ow - 0.5, 0.0)
            y0, x0 = int(sy), int(sx)
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            fy, fx = sy - y0, sx - x0
            out[:, i, j] = ((1 - fy) * (1 - fx) * x[:, y0, x0] + (1 - fy) * fx * x[:, y0, x1]
                            + fy * (1 - fx) * x[:, y1, x0] + fy * fx * x[:, y1, x1])
    return out


def fix(i, n, mode):
    """map_coordinates' index rules, one index at a time (None: outside, constant mode)."""
    if mode == "constant":
        return i if 0 <= i < n else None
    if mode == "nearest":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    if mode == "mirror":  # d c b | a b c d -> reflect about the edge pixel
        if n == 1:
            return 0
        period = 2 * (n - 1)
        i = i % period
        return i if i < n else period - i
    period = 2 * n  # reflect: d c b a | a b c d
    i = i % period
    return i if i < n else period - 1 - i


def affine_loop(x, t, interpolation, fill_mode, fill_value):
    b, h, w, c = x.shape
    out = np.zeros(x.shape)
    for n in range(b):
        a0, a1, a2, b0, b1, b2, c0, c1 = t[n if len(t) > 1 else 0]
        for i in range(h):
            for j in range(w):
                k = c0 * j + c1 * i + 1.0
                xs, ys = (a0 * j + a1 * i + a2) / k, (b0 * j + b1 * i + b2) / k
                if interpolation == "nearest":
                    taps_y = [(int(math.copysign(math.floor(abs(ys) + 0.5), ys)), 1.0)]
                    taps_x = [(int(math.copysign(math.floor(abs(xs) + 0.5), xs)), 1.0)]
                else:
                    fy, fx = math.floor(ys), math.floor(xs)
                    taps_y = [(int(fy), 1 - (ys - fy)), (int(fy) + 1, ys - fy)]
                    taps_x = [(int(fx), 1 - (xs - fx)), (int(fx) + 1, xs - fx)]
                acc = np.zeros(c)
                for yi, wy in taps_y:
                    for xj, wx in taps_x:
                        fy_, fx_ = fix(yi, h, fill_mode), fix(xj, w, fill_mode)
                        val = fill_value if fy_ is None or fx_ is None else x[n, fy_, fx_]
                        acc = acc + wy * wx * val
                out[n, i, j] = acc
    return out
