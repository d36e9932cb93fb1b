"""More of ``keras.ops.nn``: ``conv_transpose``, ``separable_conv``, adaptive pooling and
``unfold``/``fold`` (im2col / col2im), as composites of kiln's convolutions, slices, pads and
reductions (graph and eager: see ``kiln.ops``). Spatial sizes must be static.
"""

from __future__ import annotations

from kiln.ops import _G, _dual
from kiln.ops import nn as _nn

_N = _G.as_node


def _tuple(op, name, v, n):
    t = (int(v),) * n if isinstance(v, int) or hasattr(v, "__index__") else tuple(int(a) for a in v)
    if len(t) != n:
        raise ValueError(f"{op}: {name} must be an int or {n} ints, received {v!r}")
    return t


# ---- conv_transpose, separable_conv --------------------------------------------------------------
def _conv_transpose(inputs, kernel, strides=1, padding="valid", output_padding=None,
                    data_format=None, dilation_rate=1):
    x, back = _nn._channels_last(_nn._float(inputs), data_format)
    k = _N(kernel, x.dtype)
    rank = x.ndim - 2
    if rank not in (1, 2) or k.ndim != rank + 2:
        raise ValueError(f"conv_transpose: expected a 1-D or 2-D input (rank 3 or 4) and a "
                         f"kernel of rank input-rank, received {x.shape} and {k.shape}")
    if rank == 2:
        y = _G.conv2d_transpose(x, k, strides=strides, padding=padding,
                                output_padding=output_padding, dilation_rate=dilation_rate)
    else:
        s = _tuple("conv_transpose", "strides", strides, 1)[0]
        d = _tuple("conv_transpose", "dilation_rate", dilation_rate, 1)[0]
        op = None if output_padding is None else \
            (0, _tuple("conv_transpose", "output_padding", output_padding, 1)[0])
        y = _G.conv2d_transpose(_G.expand_dims(x, 1), _G.expand_dims(k, 0), strides=(1, s),
                                padding=padding, output_padding=op, dilation_rate=(1, d))
        y = _G.squeeze(y, 1)
    return y if back is None else _G.transpose(y, back)


def _separable_conv(inputs, depthwise_kernel, pointwise_kernel, strides=1, padding="valid",
                    data_format=None, dilation_rate=1):
    y = _nn._depthwise_conv(inputs, depthwise_kernel, strides, padding, data_format,
                            dilation_rate)
    return _nn._conv(y, pointwise_kernel, 1, "valid", data_format, 1)


# ---- adaptive pooling ----------------------------------------------------------------------------
def _bins(n, out):
    """PyTorch's / Keras' adaptive windows: ``[floor(i n / out), ceil((i + 1) n / out))``."""
    return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]


def _adaptive(op, mode):
    def f(inputs, output_size, data_format=None):
        x, back = _nn._channels_last(_nn._float(inputs), data_format)
        rank = x.ndim - 2
        if rank not in (1, 2):
            raise ValueError(f"{op}: expected a 1-D or 2-D input (rank 3 or 4), received "
                             f"{x.shape}")
        size = _tuple(op, "output_size", output_size, rank)
        reduce = _G.mean if mode == "average" else _G.max
        for ax, out in zip(range(1, rank + 1), size):
            n = x.shape[ax]
            if n is None:
                raise ValueError(f"{op}: spatial dims must be static, received {x.shape}")
            parts = []
            for lo, hi in _bins(n, out):
                spec = [(None, None, 1)] * x.ndim
                spec[ax] = (lo, hi, 1)
                parts.append(reduce(_G.slice(x, spec), axis=ax, keepdims=True))
            x = parts[0] if len(parts) == 1 else _G.concatenate(parts, ax)
        return x if back is None else _G.transpose(x, back)
    f.__name__ = op
    return f


# ---- unfold / fold (channels first, as Keras and PyTorch) ----------------------------------------
def _geometry(op, kernel_size, dilation, padding, stride):
    return (_tuple(op, "kernel_size", kernel_size, 2), _tuple(op, "dilation", dilation, 2),
            _tuple(op, "padding", padding, 2), _tuple(op, "stride", stride, 2))


def _unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    x = _N(x)
    if x.ndim != 4 or None in x.shape[1:]:
        raise ValueError(f"unfold: expected a (N, C, H, W) input with static C, H, W, received "
                         f"{x.shape}")
    k, d, p, s = _geometry("unfold", kernel_size, dilation, padding, stride)
    if p != (0, 0):
        x = _G.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    _, c, h, w = x.shape
    oh = (h - (k[0] - 1) * d[0] - 1) // s[0] + 1
    ow = (w - (k[1] - 1) * d[1] - 1) // s[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"unfold: kernel {k} (dilation {d}) does not fit the padded input "
                         f"{x.shape}")
    cols = []
    for i in range(k[0]):
        for j in range(k[1]):
            spec = ((None, None, 1), (None, None, 1),
                    (i * d[0], i * d[0] + (oh - 1) * s[0] + 1, s[0]),
                    (j * d[1], j * d[1] + (ow - 1) * s[1] + 1, s[1]))
            cols.append(_G.slice(x, spec))
    y = _G.stack(cols, 2)  # (N, C, kh * kw, oh, ow)
    return _G.reshape(y, (-1, c * k[0] * k[1], oh * ow))


def _place(y, axis, stride, before, total):
    """``y`` spread along ``axis`` with ``stride - 1`` zeros between entries, starting at
    ``before``, in an axis of length ``total``."""
    n = y.shape[axis]
    if stride > 1:
        y = _G.expand_dims(y, axis + 1)
        pads = [(0, 0)] * y.ndim
        pads[axis + 1] = (0, stride - 1)
        y = _G.pad(y, pads)
        shape = list(y.shape[:axis]) + [n * stride] + list(y.shape[axis + 2:])
        y = _G.reshape(y, tuple(-1 if v is None else v for v in shape))
    keep = min(n * stride, total - before)
    if keep < y.shape[axis]:
        spec = [(None, None, 1)] * y.ndim
        spec[axis] = (0, keep, 1)
        y = _G.slice(y, spec)
    pads = [(0, 0)] * y.ndim
    pads[axis] = (before, total - before - keep)
    return _G.pad(y, pads)


def _fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    x = _N(x)
    oh, ow = _tuple("fold", "output_size", output_size, 2)
    k, d, p, s = _geometry("fold", kernel_size, dilation, padding, stride)
    nh = (oh + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    nw = (ow + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    if x.ndim != 3 or x.shape[1] is None or x.shape[1] % (k[0] * k[1]) or x.shape[2] != nh * nw:
        raise ValueError(f"fold: expected an input (N, C * {k[0]} * {k[1]}, {nh * nw}) for "
                         f"output_size {(oh, ow)}, kernel {k}, dilation {d}, padding {p}, "
                         f"stride {s}; received {x.shape}")
    c = x.shape[1] // (k[0] * k[1])
    x = _G.reshape(x, (-1, c, k[0], k[1], nh, nw))
    hp, wp = oh + 2 * p[0], ow + 2 * p[1]
    out = None
    for i in range(k[0]):
        for j in range(k[1]):
            y = _G.slice(x, ((None, None, 1), (None, None, 1), (i, i + 1, 1), (j, j + 1, 1)))
            y = _G.reshape(y, (-1, c, nh, nw))
            y = _place(_place(y, 2, s[0], i * d[0], hp), 3, s[1], j * d[1], wp)
            out = y if out is None else out + y
    if p != (0, 0):
        out = _G.slice(out, ((None, None, 1), (None, None, 1), (p[0], p[0] + oh, 1),
                             (p[1], p[1] + ow, 1)))
    return out


conv_transpose = _dual(_conv_transpose, "conv_transpose")
conv_transpose.__doc__ = ("Transposed convolution (1-D, 2-D), Keras' kernel layout "
                          "(spatial..., out_channels, in_channels) and arguments.")
separable_conv = _dual(_separable_conv, "separable_conv")
separable_conv.__doc__ = "A depthwise convolution followed by a pointwise (1x1) one."
adaptive_average_pool = _dual(_adaptive("adaptive_average_pool", "average"),
                              "adaptive_average_pool")
adaptive_average_pool.__doc__ = ("Average pooling to ``output_size`` with PyTorch's windows "
                                 "``[floor(i n / out), ceil((i + 1) n / out))`` (1-D, 2-D).")
adaptive_max_pool = _dual(_adaptive("adaptive_max_pool", "max"), "adaptive_max_pool")
adaptive_max_pool.__doc__ = "Max pooling to ``output_size`` (adaptive windows, 1-D, 2-D)."
unfold = _dual(_unfold, "unfold")
unfold.__doc__ = ("im2col: the sliding blocks of a (N, C, H, W) input as (N, C * kh * kw, L), "
                  "PyTorch's order.")
fold = _dual(_fold, "fold")
fold.__doc__ = "col2im, the adjoint of ``unfold``: overlapping blocks are summed."

__all__ = ["conv_transpose", "separable_conv", "adaptive_average_pool", "adaptive_max_pool",
           "unfold", "fold"]
