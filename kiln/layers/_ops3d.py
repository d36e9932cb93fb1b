"""Three spatial dimensions from kiln's 2-D ops: convolution, transposed convolution and
pooling over ``(batch, depth, height, width, channels)``.

kiln's core has 1-D and 2-D conv/pool kernels; a 3-D one is composed here from them, so it
has their shape rules, references, gradients and kernels:

* ``conv3d``: the depth taps become channels. For output depth ``o`` and kernel tap ``i`` the
  input slice is ``x[:, o * s + i * d]``; the ``kd`` strided depth slices are concatenated on
  the channel axis, the batch and output depth merged, and ONE ``conv2d`` with the kernel
  ``(kh, kw, kd * C, F)`` sums over taps and channels at once (with ``groups > 1`` the taps are
  summed one ``conv2d`` each, so that each group sees only its channels).
* ``conv3d_transpose``: one ``conv2d_transpose`` per depth plane with all ``kd`` taps as
  output channels, then each tap's planes are spread ``s`` apart (zeros between) and shifted
  by ``i * d``; the sum is the full transposed convolution, cropped or padded to the output
  length with TensorFlow's padding (``pad_before = total // 2``).
* ``pool3d``: max and (real-element) average pooling over a box are separable: pool height and
  width with the 2-D op, then depth with a ``(pool_d, 1)`` 2-D pool.

Height and width must be known (static shapes). The depth may be known only at run time (Keras'
``Conv3D`` / ``Conv3DTranspose`` / pooling on videos of any number of frames): the taps are
then depth slices relative to both ends, and a transposed convolution's strided spread is
written per phase (``out[m * s + p]`` sums the taps ``i`` with ``i * d = p (mod s)``), so
every pad and crop is a constant whatever the depth, except the TensorFlow padding of
``conv3d`` with ``"same"`` and a depth stride above 1, which depends on the depth modulo the
stride: each possible padding is computed and the run-time one selected.
"""

from __future__ import annotations

import math
from typing import Any

import kiln.ops as K
from kiln.core import Node, format_shape

_ALL = (None, None, 1)


def _static(who: str, x: Node) -> tuple[int, int, int, int]:
    dims = x.shape[1:]
    if any(d is None for d in dims):
        raise ValueError(f"{who} needs known depth, height, width and channels, received "
                         f"input shape {format_shape(x.shape)}")
    return tuple(int(d) for d in dims)  # type: ignore[return-value]


def same_pads(n: int, k_eff: int, stride: int) -> tuple[int, int, int]:
    """TensorFlow "same": output length ``ceil(n / s)``, pads ``(before, after)``."""
    out = -(-n // stride)
    total = max((out - 1) * stride + k_eff - n, 0)
    return out, total // 2, total - total // 2


def _depth_slice(x: Node, start: int, stop: int, step: int) -> Node:
    return K.slice(x, [_ALL, (start, stop, step), _ALL, _ALL, _ALL], None)


def conv3d(who: str, x: Node, kernel: Any, strides: tuple, padding: str, dilation: tuple,
           groups: int = 1) -> Node:
    """Channels-last 3-D convolution; ``kernel`` is ``(kd, kh, kw, C / groups, F)``."""
    kd = int(kernel.shape[0])
    sd, dd = strides[0], dilation[0]
    k_eff = (kd - 1) * dd + 1
    if x.shape[1] is None and None not in x.shape[2:]:
        return _conv3d_any_depth(x, kernel, strides, padding, dilation, groups)
    d, h, w, c = _static(who, x)
    if padding == "same":
        out_d, lo, hi = same_pads(d, k_eff, sd)
        if lo or hi:
            x = K.pad(x, ((0, 0), (lo, hi), (0, 0), (0, 0), (0, 0)))
    else:
        out_d = (d - k_eff) // sd + 1
        if out_d < 1:
            raise ValueError(f"{who}: the kernel's depth extent {k_eff} exceeds the input "
                             f"depth {d} (input shape {format_shape(x.shape)})")
    taps = [_depth_slice(x, i * dd, i * dd + (out_d - 1) * sd + 1, sd) for i in range(kd)]
    kw2 = dict(strides=strides[1:], padding=padding, dilation_rate=dilation[1:])
    if groups == 1:
        stacked = K.concatenate(taps, axis=-1) if kd > 1 else taps[0]
        x2 = K.reshape(stacked, (-1, h, w, kd * c))
        k2 = K.reshape(K.transpose(kernel, (1, 2, 0, 3, 4)),
                       tuple(kernel.shape[1:3]) + (kd * c, int(kernel.shape[4])))
        y = K.conv2d(x2, k2, **kw2)
    else:
        y = None
        for i, t in enumerate(taps):
            ki = K.squeeze(K.slice(kernel, [(i, i + 1, 1), _ALL, _ALL, _ALL, _ALL], None), 0)
            yi = K.conv2d(K.reshape(t, (-1, h, w, c)), ki, groups=groups, **kw2)
            y = yi if y is None else y + yi
    return K.reshape(y, (-1, out_d) + tuple(y.shape[1:]))


def _conv3d_any_depth(x: Node, kernel: Any, strides: tuple, padding: str, dilation: tuple,
                      groups: int) -> Node:
    """:func:`conv3d` of a depth known only at run time (a video of any number of frames, as
    Keras allows). Tap ``i`` reads the slice ``[i * d + ... : ... : s]`` with its stop
    relative to the end, so every tap has the output's number of planes: ``ceil((depth -
    k_eff + 1) / s)`` for "valid". "same" with stride 1 pads ``k_eff - 1`` (a constant);
    with a depth stride ``s > 1`` TensorFlow pads ``(q + k_eff - s) // 2`` planes before,
    ``q = -depth mod s``: the convolution is computed for each distinct padding and the one
    for the run-time ``q`` selected (``where``; at most ``s`` of them, usually 2)."""
    kd, dd, sd = int(kernel.shape[0]), dilation[0], strides[0]
    total = (kd - 1) * dd  # k_eff - 1: what "valid" loses, what "same" pads
    if padding == "valid":
        return _tap_convs(x, kernel, [(i * dd, i * dd - total if i * dd < total else None)
                                      for i in range(kd)], strides, padding, dilation, groups)
    if sd == 1:
        return _tap_convs(K.pad(x, ((0, 0), (total // 2, total - total // 2)) + ((0, 0),) * 3),
                          kernel, [(i * dd, i * dd - total if i * dd < total else None)
                                   for i in range(kd)], strides, padding, dilation, groups)
    before_of = {q: max(q + total + 1 - sd, 0) // 2 for q in range(sd)}
    q_now = K.mod(sd - K.mod(K.shape(x)[1].as_tensor(), sd), sd)  # -depth mod s, run time
    out = None
    for before in sorted(set(before_of.values()), reverse=True):
        after = max(total - before, 0)  # x padded to depth + before + after planes
        spans = [(i * dd, i * dd - before - after if i * dd < before + after else None)
                 for i in range(kd)]  # each tap: `depth` planes from i * d, every s-th
        y = _tap_convs(K.pad(x, ((0, 0), (before, after)) + ((0, 0),) * 3), kernel, spans,
                       strides, padding, dilation, groups)
        if out is None:
            out = y
            continue
        hit = None
        for q, b in before_of.items():
            if b == before:
                eq = K.equal(q_now, q)
                hit = eq if hit is None else K.logical_or(hit, eq)
        out = K.where(hit, y, out)
    return out


def _tap_convs(x: Node, kernel: Any, spans: list, strides: tuple, padding: str,
               dilation: tuple, groups: int) -> Node:
    """``sum_i conv2d(x[:, start_i : stop_i : s], kernel[i])`` over the depth taps, each
    depth plane a batch entry (the stacked form of :func:`conv3d` needs a static depth)."""
    h, w, c = (int(v) for v in x.shape[2:])
    kw2 = dict(strides=strides[1:], padding=padding, dilation_rate=dilation[1:])
    taps = [_depth_slice(x, start, stop, strides[0]) for start, stop in spans]
    y = None
    for i, t in enumerate(taps):
        ki = K.squeeze(K.slice(kernel, [(i, i + 1, 1), _ALL, _ALL, _ALL, _ALL], None), 0)
        yi = K.conv2d(K.reshape(t, (-1, h, w, c)), ki, groups=groups, **kw2)
        y = yi if y is None else y + yi
    batch, depth = K.shape(taps[0])[:2]
    return K.reshape(y, (batch, depth) + tuple(int(v) for v in y.shape[1:]))


def conv3d_transpose(who: str, x: Node, kernel: Any, strides: tuple, padding: str,
                     output_padding: tuple | None, dilation: tuple) -> Node:
    """Channels-last transposed 3-D convolution; ``kernel`` is ``(kd, kh, kw, F, C)``."""
    if x.shape[1] is None and None not in x.shape[2:]:  # a video of any number of frames
        return _conv3d_transpose_any_depth(x, kernel, strides, padding, output_padding,
                                           dilation)
    d, h, w, c = _static(who, x)
    kd, kh, kw, f = (int(v) for v in kernel.shape[:4])
    sd, dd = strides[0], dilation[0]
    k_eff = (kd - 1) * dd + 1
    opad = output_padding
    k2 = K.reshape(K.transpose(kernel, (1, 2, 0, 3, 4)), (kh, kw, kd * f, c))
    y = K.conv2d_transpose(K.reshape(x, (-1, h, w, c)), k2, strides=strides[1:],
                           padding=padding, dilation_rate=dilation[1:],
                           output_padding=None if opad is None else opad[1:])
    ho, wo = int(y.shape[1]), int(y.shape[2])
    y = K.reshape(y, (-1, d, ho, wo, kd, f))
    if sd > 1:  # spread the planes s apart
        gap = K.zeros_like(y)
        parts = [K.expand_dims(y, 2)] + [K.expand_dims(gap, 2)] * (sd - 1)
        y = K.reshape(K.concatenate(parts, axis=2), (-1, d * sd, ho, wo, kd, f))
        y = K.slice(y, [_ALL, (0, (d - 1) * sd + 1, 1), _ALL, _ALL, _ALL, _ALL], None)
    spread = (d - 1) * sd + 1
    full_len = spread + k_eff - 1
    full = None
    for i in range(kd):
        yi = K.squeeze(K.slice(y, [_ALL, _ALL, _ALL, _ALL, (i, i + 1, 1), _ALL], None), 4)
        yi = K.pad(yi, ((0, 0), (i * dd, full_len - spread - i * dd), (0, 0), (0, 0), (0, 0)))
        full = yi if full is None else full + yi
    before, after = _transpose_crop(d, sd, k_eff, padding, opad)
    if after > 0:
        full = K.pad(full, ((0, 0), (0, after), (0, 0), (0, 0), (0, 0)))
    return _depth_slice(full, before, full_len + after, 1)


def _transpose_crop(d: int, sd: int, k_eff: int, padding: str, opad: tuple | None
                    ) -> tuple[int, int]:
    """``(before, after)``: the transposed convolution of ``d`` planes is the full one (``(d -
    1) * sd + k_eff`` planes) cropped by ``before`` at the start and padded by ``after`` at the
    end (negative: cropped) to Keras' output length, TensorFlow's "same" offset included."""
    if opad is None:
        out_len = d * sd + (max(k_eff - sd, 0) if padding == "valid" else 0)
    else:
        pad = k_eff // 2 if padding == "same" else 0
        out_len = (d - 1) * sd + k_eff - 2 * pad + opad[0]
    before = same_pads(out_len, k_eff, sd)[1] if padding == "same" else 0
    return before, out_len + before - ((d - 1) * sd + k_eff)


def _conv3d_transpose_any_depth(x: Node, kernel: Any, strides: tuple, padding: str,
                                opad: tuple | None, dilation: tuple) -> Node:
    """:func:`conv3d_transpose` of a depth known only at run time. Tap ``i``'s planes
    ``y_i[j]`` land at ``j * s + i * d``: output phase ``p`` (planes ``m * s + p``) is the sum
    of the taps with ``i * d = p (mod s)``, each shifted by ``(i * d - p) / s`` planes; the
    phases are interleaved by one reshape, and the crop to Keras' length is a constant (it
    depends on the depth only through terms that cancel)."""
    h, w, c = (int(v) for v in x.shape[2:])
    kd, kh, kw, f = (int(v) for v in kernel.shape[:4])
    sd, dd = strides[0], dilation[0]
    k_eff = (kd - 1) * dd + 1
    k2 = K.reshape(K.transpose(kernel, (1, 2, 0, 3, 4)), (kh, kw, kd * f, c))
    y = K.conv2d_transpose(K.reshape(x, (-1, h, w, c)), k2, strides=strides[1:],
                           padding=padding, dilation_rate=dilation[1:],
                           output_padding=None if opad is None else opad[1:])
    ho, wo = int(y.shape[1]), int(y.shape[2])
    y = K.reshape(y, K.shape(x)[:2] + (ho, wo, kd, f))
    taps = [K.squeeze(K.slice(y, [_ALL, _ALL, _ALL, _ALL, (i, i + 1, 1), _ALL], None), 4)
            for i in range(kd)]
    extra = -(-k_eff // sd) - 1  # each phase has depth + extra planes
    phases = []
    for p in range(sd):
        phase = None
        for i in range(kd):
            if (i * dd - p) % sd == 0:
                q = (i * dd - p) // sd
                t = K.pad(taps[i], ((0, 0), (q, extra - q), (0, 0), (0, 0), (0, 0)))
                phase = t if phase is None else phase + t
        phases.append(phase)
    if sd == 1:
        full = phases[0]
    else:
        zero = next(t for t in phases if t is not None)
        phases = [K.zeros_like(zero) if t is None else t for t in phases]
        stacked = K.stack(phases, axis=2)  # (batch, depth + extra, s, ho, wo, f)
        # a tensor with (depth + extra) * s planes, for the interleaving reshape's shape
        column = K.slice(zero, [_ALL, _ALL, (0, 1, 1), (0, 1, 1), (0, 1, 1)], None)
        planes = K.concatenate([column] * sd, axis=1)
        full = K.reshape(stacked, (K.shape(x)[0], K.shape(planes)[1], ho, wo, f))
        excess = (extra + 1) * sd - k_eff  # beyond the last plane a tap reaches
        if excess:
            full = _depth_slice(full, 0, -excess, 1)
    before, after = _transpose_crop(2 * sd + k_eff, sd, k_eff, padding, opad)
    assert (before, after) == _transpose_crop(3 * sd + k_eff + 1, sd, k_eff, padding, opad)
    if after > 0:
        full = K.pad(full, ((0, 0), (0, after), (0, 0), (0, 0), (0, 0)))
    return _depth_slice(full, before, after if after < 0 else None, 1)


def pool3d(who: str, kind: str, x: Node, pool: tuple, strides: tuple, padding: str) -> Node:
    """Max (``kind="max"``) or average pooling over depth, height and width (the depth may be
    known only at run time)."""
    dynamic = x.shape[1] is None and None not in x.shape[2:]  # a video of any length
    if dynamic:
        h, w, c = (int(v) for v in x.shape[2:])
    else:
        d, h, w, c = _static(who, x)
    op = K.max_pool2d if kind == "max" else K.avg_pool2d
    y = op(K.reshape(x, (-1, h, w, c)), pool[1:], strides[1:], padding)
    ho, wo = int(y.shape[1]), int(y.shape[2])
    if dynamic:  # the run-time batch and depth (kiln.ops.shape)
        y = op(K.reshape(y, K.shape(x)[:2] + (ho * wo, c)), (pool[0], 1), (strides[0], 1),
               padding)
        return K.reshape(y, K.shape(y)[:2] + (ho, wo, c))
    y = op(K.reshape(y, (-1, d, ho * wo, c)), (pool[0], 1), (strides[0], 1), padding)
    return K.reshape(y, (-1, int(y.shape[1]), ho, wo, c))


def adaptive_bounds(n: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's / Keras' adaptive pooling windows: ``[floor(i n / out), ceil((i + 1) n /
    out))`` for each output index ``i``."""
    return [(i * n // out, math.ceil((i + 1) * n / out)) for i in range(out)]
