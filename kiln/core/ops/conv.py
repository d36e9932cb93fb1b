"""Convolution, channels-last (NHWC) like Keras, with TensorFlow padding (see ``window.py``).

Registered ops (on 4-D tensors; ``conv1d`` is a builder over ``conv2d``):

* ``conv2d(x, w)``: x (N, H, W, Cin), w (kh, kw, Cin / groups, Cout) -> (N, OH, OW, Cout).
* ``conv2d_backprop_input(ct, w)``: the transpose of ``conv2d`` in ``x`` (the input gradient,
  and the transposed convolution); its static ``input_shape=(H, W, Cin)`` is an attribute.
* ``conv2d_backprop_filter(x, ct)``: the transpose of ``conv2d`` in ``w``; ``kernel_size`` is an
  attribute.

The three ops are bilinear and each one's VJP is built from the other two, with the same
strides, padding, dilation and groups, so gradients of any order are exact.

Grouped convolution (``groups`` attribute, absent when 1, as TensorFlow and Keras define it):
the input channels and the output channels are split into ``groups`` consecutive blocks, and
output block g sees only input block g, through ``w[..., g * Cout/g:(g + 1) * Cout/g]`` of
shape (kh, kw, Cin / groups, Cout / groups). ``groups == Cin`` is a depthwise convolution.
The references loop over the groups.

The NumPy references use an im2col over the ``kh * kw`` kernel positions (each a strided slice
of the padded input) and one GEMM, so they are usable as the fallback kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.ir import Node, TensorType
from kiln.core.ops._rules import as_node, fmt, require_float, same_dtype
from kiln.core.ops.conv_dynamic import dynamic_input_grad
from kiln.core.ops.registry import NN, Example, OpDef, apply, register
from kiln.core.ops.window import (
    PADDINGS,
    Pair,
    check_attrs,
    check_rank,
    col2im,
    dim_pair,
    im2col,
    int_pair,
    int_tuple,
    pad_hw,
    padding_arg,
    rank4,
    same,
    window,
    window2d,
)

__all__ = ["conv2d", "conv1d", "conv2d_transpose"]


# ---- conv2d -------------------------------------------------------------------------------------
def _check_groups(op: str, groups: Any, cout: int | None, what: str) -> None:
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, received groups={groups!r}")
    if cout is not None and cout % groups:
        raise ValueError(f"{op}: the {what} has {cout} output channels, not a multiple of "
                         f"groups={groups}")


def _in_channels(w: TensorType | Node, groups: int) -> int | None:
    return None if w.shape[2] is None else w.shape[2] * groups


def _conv_infer(x: TensorType, w: TensorType, *, strides: Pair, padding: str,
                dilation: Pair, groups: int = 1) -> TensorType:
    op = "conv2d"
    require_float(op, x, w)
    dtype = same_dtype(op, x, w)
    rank4(op, "input", x)
    rank4(op, "kernel", w)
    check_attrs(op, strides, padding, dilation)
    _check_groups(op, groups, w.shape[3], f"kernel of shape {fmt(w.shape)}")
    if not same(x.shape[3], _in_channels(w, groups)):
        extra = "" if groups == 1 else f" (in_channels / groups with groups={groups})"
        raise ValueError(f"{op}: input of shape {fmt(x.shape)} has {x.shape[3]} channels but the "
                         f"kernel of shape {fmt(w.shape)} expects {_in_channels(w, groups)}"
                         f"{extra}")
    if w.shape[0] is None or w.shape[1] is None:
        raise ValueError(f"{op}: the kernel's spatial size must be static, received "
                         f"{fmt(w.shape)}")
    try:
        (oh, ow), _ = window2d(dim_pair(x.shape[1:3]), int_pair(w.shape[:2], op), strides,
                               dilation, padding, op=op)
    except ValueError as exc:
        raise ValueError(f"{exc}; input {fmt(x.shape)}, kernel {fmt(w.shape)}") from None
    return TensorType((x.shape[0], oh, ow, w.shape[3]), dtype)


def _split_ref(fn, a, b, groups):
    """Applies ``fn`` per group to the channel blocks of ``a`` and ``b`` (their last axes) and
    concatenates the results along their last axis."""
    ga, gb = a.shape[3] // groups, b.shape[3] // groups
    parts = [fn(a[..., g * ga:(g + 1) * ga], b[..., g * gb:(g + 1) * gb])
             for g in range(groups)]
    return np.concatenate(parts, axis=-1)


def _conv_ref(x, w, *, strides, padding, dilation, groups=1):
    x, w = np.asarray(x), np.asarray(w)
    if groups != 1:
        attrs = {"strides": strides, "padding": padding, "dilation": dilation}
        return _split_ref(lambda xg, wg: _conv_ref(xg, wg, **attrs), x, w, groups)
    k = w.shape[:2]
    (oh, ow), pads = window2d(x.shape[1:3], k, strides, dilation, padding)
    cols = im2col(pad_hw(x, pads), oh, ow, k, strides, dilation)
    out = cols.reshape(-1, cols.shape[-1]) @ w.reshape(-1, w.shape[3])
    return out.reshape(x.shape[0], oh, ow, w.shape[3]).astype(x.dtype, copy=False)


def _groups_attr(groups: int) -> dict:
    """The ``groups`` attribute as nodes carry it: absent when 1 (ungrouped nodes stay equal to
    the ones built before grouped convolution existed)."""
    return {} if groups == 1 else {"groups": groups}


def _static_input_shape(op: str, x: Node, w: Node, groups: int = 1
                        ) -> tuple[int, int, int]:
    h, wd = x.shape[1], x.shape[2]
    c = x.shape[3] if x.shape[3] is not None else _in_channels(w, groups)
    if h is None or wd is None or c is None:
        raise ValueError(f"{op}: the gradient needs static spatial dims and channels, received "
                         f"input {fmt(x.shape)}")
    return (h, wd, c)


def _conv_vjp(ct, out, x, w, *, strides, padding, dilation, groups=1):
    attrs = {"strides": strides, "padding": padding, "dilation": dilation,
             **_groups_attr(groups)}
    if x.shape[1] is None or x.shape[2] is None:  # a sequence of unknown length (Conv1D)
        dx = dynamic_input_grad(ct, x, w, strides=strides, padding=padding, dilation=dilation,
                                groups=groups)
    else:
        dx = apply("conv2d_backprop_input", ct, w,
                   input_shape=_static_input_shape("conv2d", x, w, groups), **attrs)
    return [dx, apply("conv2d_backprop_filter", x, ct, kernel_size=w.shape[:2], **attrs)]


# ---- conv2d_backprop_input: the transpose in x --------------------------------------------------
def _bpi_infer(ct: TensorType, w: TensorType, *, input_shape: tuple[int, int, int],
               strides: Pair, padding: str, dilation: Pair, groups: int = 1) -> TensorType:
    op = "conv2d_backprop_input"
    require_float(op, ct, w)
    dtype = same_dtype(op, ct, w)
    rank4(op, "cotangent", ct)
    rank4(op, "kernel", w)
    check_attrs(op, strides, padding, dilation)
    if (not isinstance(input_shape, tuple) or len(input_shape) != 3
            or not all(isinstance(i, int) and i >= 1 for i in input_shape)):
        raise ValueError(f"{op}: input_shape must be a static (H, W, Cin), received "
                         f"{input_shape!r}")
    if w.shape[0] is None or w.shape[1] is None:
        raise ValueError(f"{op}: the kernel's spatial size must be static, received "
                         f"{fmt(w.shape)}")
    _check_groups(op, groups, w.shape[3], f"kernel of shape {fmt(w.shape)}")
    if not same(_in_channels(w, groups), input_shape[2]):
        raise ValueError(f"{op}: input_shape {input_shape} has {input_shape[2]} channels but the "
                         f"kernel of shape {fmt(w.shape)} with groups={groups} has "
                         f"{_in_channels(w, groups)} input channels")
    if not same(ct.shape[3], w.shape[3]):
        raise ValueError(f"{op}: cotangent of shape {fmt(ct.shape)} has {ct.shape[3]} channels "
                         f"but the kernel of shape {fmt(w.shape)} has {w.shape[3]} output "
                         "channels")
    try:
        (oh, ow), _ = window2d(input_shape[:2], int_pair(w.shape[:2], op), strides, dilation,
                               padding, op=op)
    except ValueError as exc:
        raise ValueError(f"{exc}; input_shape {input_shape}, kernel {fmt(w.shape)}") from None
    if not (same(ct.shape[1], oh) and same(ct.shape[2], ow)):
        raise ValueError(f"{op}: a conv2d of an input of spatial size {input_shape[:2]} with "
                         f"kernel {fmt(w.shape)}, strides {strides}, dilation {dilation} and "
                         f"padding {padding!r} has spatial size ({oh}, {ow}), but the cotangent "
                         f"has shape {fmt(ct.shape)}")
    return TensorType((ct.shape[0],) + tuple(input_shape), dtype)


def _bpi_ref(ct, w, *, input_shape, strides, padding, dilation, groups=1):
    ct, w = np.asarray(ct), np.asarray(w)
    if groups != 1:
        shape = tuple(input_shape[:2]) + (input_shape[2] // groups,)
        attrs = {"input_shape": shape, "strides": strides, "padding": padding,
                 "dilation": dilation}
        return _split_ref(lambda cg, wg: _bpi_ref(cg, wg, **attrs), ct, w, groups)
    k = w.shape[:2]
    (oh, ow), pads = window2d(input_shape[:2], k, strides, dilation, padding)
    cols = ct.reshape(-1, w.shape[3]) @ w.reshape(-1, w.shape[3]).T
    cols = cols.reshape(ct.shape[0], oh, ow, k[0], k[1], w.shape[2])
    padded = (input_shape[0] + sum(pads[0]), input_shape[1] + sum(pads[1]))
    dx = col2im(cols, padded, pads, oh, ow, k, strides, dilation)
    return dx.astype(ct.dtype, copy=False)


def _bpi_vjp(g, out, ct, w, *, input_shape, strides, padding, dilation, groups=1):
    attrs = {"strides": strides, "padding": padding, "dilation": dilation,
             **_groups_attr(groups)}
    return [apply("conv2d", g, w, **attrs),
            apply("conv2d_backprop_filter", g, ct, kernel_size=w.shape[:2], **attrs)]


# ---- conv2d_backprop_filter: the transpose in w -------------------------------------------------
def _bpf_infer(x: TensorType, ct: TensorType, *, kernel_size: Pair, strides: Pair, padding: str,
               dilation: Pair, groups: int = 1) -> TensorType:
    op = "conv2d_backprop_filter"
    require_float(op, x, ct)
    dtype = same_dtype(op, x, ct)
    rank4(op, "input", x)
    rank4(op, "cotangent", ct)
    check_attrs(op, strides, padding, dilation)
    if (not isinstance(kernel_size, tuple) or len(kernel_size) != 2
            or not all(isinstance(i, int) and i >= 1 for i in kernel_size)):
        raise ValueError(f"{op}: kernel_size must be a pair of positive ints, received "
                         f"{kernel_size!r}")
    if not same(x.shape[0], ct.shape[0]):
        raise ValueError(f"{op}: input {fmt(x.shape)} and cotangent {fmt(ct.shape)} have "
                         "different batch sizes")
    _check_groups(op, groups, ct.shape[3], f"cotangent of shape {fmt(ct.shape)}")
    if x.shape[3] is not None and x.shape[3] % groups:
        raise ValueError(f"{op}: the input of shape {fmt(x.shape)} has {x.shape[3]} channels, "
                         f"not a multiple of groups={groups}")
    try:
        (oh, ow), _ = window2d(dim_pair(x.shape[1:3]), kernel_size, strides, dilation, padding,
                               op=op)
    except ValueError as exc:
        raise ValueError(f"{exc}; input {fmt(x.shape)}, kernel_size {kernel_size}") from None
    if not (same(ct.shape[1], oh) and same(ct.shape[2], ow)):
        raise ValueError(f"{op}: a conv2d of input {fmt(x.shape)} with kernel_size "
                         f"{kernel_size}, strides {strides}, dilation {dilation} and padding "
                         f"{padding!r} has spatial size ({oh}, {ow}), but the cotangent has "
                         f"shape {fmt(ct.shape)}")
    cin = None if x.shape[3] is None else x.shape[3] // groups
    return TensorType(tuple(kernel_size) + (cin, ct.shape[3]), dtype)


def _bpf_ref(x, ct, *, kernel_size, strides, padding, dilation, groups=1):
    x, ct = np.asarray(x), np.asarray(ct)
    if groups != 1:
        attrs = {"kernel_size": kernel_size, "strides": strides, "padding": padding,
                 "dilation": dilation}
        return _split_ref(lambda xg, cg: _bpf_ref(xg, cg, **attrs), x, ct, groups)
    (oh, ow), pads = window2d(x.shape[1:3], kernel_size, strides, dilation, padding)
    cols = im2col(pad_hw(x, pads), oh, ow, kernel_size, strides, dilation)
    rows = cols.shape[0] * oh * ow  # explicit: a -1 is ambiguous for zero-size arrays
    dw = cols.reshape(rows, cols.shape[-1]).T @ ct.reshape(rows, ct.shape[3])
    return dw.reshape(kernel_size[0], kernel_size[1], x.shape[3], ct.shape[3]).astype(
        x.dtype, copy=False)


def _bpf_vjp(g, out, x, ct, *, kernel_size, strides, padding, dilation, groups=1):
    attrs = {"strides": strides, "padding": padding, "dilation": dilation,
             **_groups_attr(groups)}
    return [apply("conv2d_backprop_input", ct, g,
                  input_shape=_static_input_shape("conv2d_backprop_filter", x, g, groups),
                  **attrs),
            apply("conv2d", x, g, **attrs)]


# ---- conv examples (tiny: gradients are checked by finite differences) --------------------------
_CONV_CASES = [  # x shape, kernel (kh, kw, cin / groups, cout), strides, padding, dilation, groups
    ((2, 5, 5, 2), (3, 3, 2, 3), (1, 1), "valid", (1, 1), 1),
    ((2, 5, 5, 2), (3, 3, 2, 2), (2, 2), "same", (1, 1), 1),
    ((1, 5, 6, 2), (2, 2, 2, 3), (1, 2), "same", (2, 1), 1),
    ((1, 6, 5, 3), (2, 3, 3, 2), (2, 1), "valid", (2, 2), 1),
    ((1, 4, 5, 4), (3, 2, 2, 4), (1, 1), "same", (1, 1), 2),     # grouped
    ((2, 5, 4, 3), (2, 2, 1, 6), (2, 1), "valid", (1, 2), 3),    # depthwise, multiplier 2
    ((2, 6, 5, 4), (3, 3, 1, 4), (1, 1), "same", (1, 1), 4),     # depthwise, multiplier 1
    ((1, 7, 6, 3), (3, 2, 1, 3), (2, 1), "valid", (2, 1), 3),    # ... strided, dilated
    ((2, 4, 3, 5), (1, 1, 5, 3), (1, 1), "same", (1, 1), 1),     # pointwise (1x1, stride 1)
    # float32 register-blocked grouped kernels (4 and 8 output channels per group: vectors of
    # 4 and 8 lanes; rows wider than a block of pixels) and depthwise channel vectors
    ((1, 5, 9, 4), (3, 3, 2, 8), (1, 2), "same", (1, 1), 2),
    ((1, 4, 10, 8), (2, 3, 4, 16), (1, 1), "valid", (1, 2), 2),
    ((1, 4, 5, 17), (3, 3, 1, 17), (1, 1), "same", (1, 1), 17),  # a vector and a tail
]


def _conv_cases(rng, dt):
    for xs, ws, strides, padding, dilation, groups in _CONV_CASES:
        attrs = {"strides": strides, "padding": padding, "dilation": dilation,
                 **_groups_attr(groups)}
        x = rng.normal(size=xs).astype(dt)
        w = rng.normal(size=ws).astype(dt)
        ct = rng.normal(size=_conv_ref(x, w, **attrs).shape).astype(dt)
        yield x, w, ct, attrs


def _conv_examples(rng, dt):
    return [Example((x, w), attrs) for x, w, _, attrs in _conv_cases(rng, dt)]


def _bpi_examples(rng, dt):
    return [Example((ct, w), dict(attrs, input_shape=x.shape[1:]))
            for x, w, ct, attrs in _conv_cases(rng, dt)]


def _bpf_examples(rng, dt):
    return [Example((x, ct), dict(attrs, kernel_size=w.shape[:2]))
            for x, w, ct, attrs in _conv_cases(rng, dt)]


register(OpDef("conv2d", NN, _conv_infer, _conv_ref, _conv_vjp, examples=_conv_examples,
               doc="2-D convolution (cross-correlation), NHWC input, (kh, kw, Cin, Cout) kernel"))
register(OpDef("conv2d_backprop_input", NN, _bpi_infer, _bpi_ref, _bpi_vjp,
               examples=_bpi_examples,
               doc="transpose of conv2d in its input (input gradient, transposed convolution)"))
register(OpDef("conv2d_backprop_filter", NN, _bpf_infer, _bpf_ref, _bpf_vjp,
               examples=_bpf_examples, doc="transpose of conv2d in its kernel (kernel gradient)"))


# ---- builders -----------------------------------------------------------------------------------
def _float_operands(op: str, x: Any, kernel: Any) -> tuple[Node, Node]:
    x = as_node(x)
    k = as_node(kernel, x.dtype)
    return x, k


def _groups_arg(op: str, groups: Any) -> int:
    if isinstance(groups, bool) or not isinstance(groups, int | np.integer) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, received groups={groups!r}")
    return int(groups)


def conv2d(x: Any, kernel: Any, strides: Any = 1, padding: str = "valid",
           dilation_rate: Any = 1, groups: int = 1) -> Node:
    """2-D convolution (cross-correlation, like Keras), channels-last.

    Args:
        x: input of shape (batch, height, width, in_channels).
        kernel: shape (kernel_h, kernel_w, in_channels / groups, out_channels).
        strides: int or pair.
        padding: "valid" or "same" (TensorFlow semantics: out = ceil(in / stride), the odd
            padding pixel goes at the bottom/right).
        dilation_rate: int or pair.
        groups: grouped convolution: the channels split into ``groups`` consecutive blocks,
            output block g computed from input block g only (``groups == in_channels``:
            depthwise). Both channel counts must be multiples of it.

    Returns:
        A tensor of shape (batch, out_h, out_w, out_channels).

    Example:
        >>> y = kiln.ops.conv2d(x, w, strides=2, padding="same")  # (None,28,28,1) -> (None,14,14,8)
    """
    x, k = _float_operands("conv2d", x, kernel)
    return apply("conv2d", x, k, strides=int_tuple("conv2d", "strides", strides, 2),
                 padding=padding_arg("conv2d", padding),
                 dilation=int_tuple("conv2d", "dilation_rate", dilation_rate, 2),
                 **_groups_attr(_groups_arg("conv2d", groups)))


def conv1d(x: Any, kernel: Any, strides: Any = 1, padding: str = "valid",
           dilation_rate: Any = 1, groups: int = 1) -> Node:
    """1-D convolution, channels-last (built on conv2d).

    Args:
        x: input of shape (batch, length, in_channels).
        kernel: shape (kernel_size, in_channels / groups, out_channels).
        strides: int (or a 1-sequence).
        padding: "valid", "same" or "causal" (left padding by ``(k - 1) * dilation``, as in
            Keras' Conv1D).
        dilation_rate: int (or a 1-sequence).
        groups: grouped convolution, as in ``conv2d``.

    Returns:
        A tensor of shape (batch, out_length, out_channels).

    Example:
        >>> y = kiln.ops.conv1d(x, w, padding="causal", dilation_rate=2)
    """
    from kiln.core.ops.movement import expand_dims, pad, squeeze

    x, k = _float_operands("conv1d", x, kernel)
    check_rank("conv1d", "input", x, 3)
    check_rank("conv1d", "kernel", k, 3)
    (s,) = int_tuple("conv1d", "strides", strides, 1)
    (d,) = int_tuple("conv1d", "dilation_rate", dilation_rate, 1)
    p = padding_arg("conv1d", padding, PADDINGS + ("causal",))
    g = _groups_arg("conv1d", groups)
    if p == "causal":
        if k.shape[0] is None:
            raise ValueError(f"conv1d: causal padding needs a static kernel size, received "
                             f"{fmt(k.shape)}")
        x = pad(x, ((0, 0), ((k.shape[0] - 1) * d, 0), (0, 0)))
        p = "valid"
    y = apply("conv2d", expand_dims(x, 1), expand_dims(k, 0), strides=(1, s), padding=p,
              dilation=(1, d), **_groups_attr(g))
    return squeeze(y, 1)


def _transpose_length(op: str, size: int, k: int, s: int, d: int, padding: str,
                      output_padding: int | None) -> int:
    """Keras' ``compute_conv_transpose_output_length``."""
    keff = (k - 1) * d + 1
    if output_padding is None:
        return size * s + (max(keff - s, 0) if padding == "valid" else 0)
    pad = keff // 2 if padding == "same" else 0
    return (size - 1) * s + keff - 2 * pad + output_padding


def conv2d_transpose(x: Any, kernel: Any, strides: Any = 1, padding: str = "valid",
                     output_padding: Any = None, dilation_rate: Any = 1) -> Node:
    """Transposed 2-D convolution, as Keras' Conv2DTranspose computes it (TensorFlow semantics).

    It is the gradient of ``conv2d`` with respect to its input, for the output size given by
    Keras' rule: ``in * stride (+ max(k_eff - stride, 0) for "valid")`` without
    ``output_padding``, else ``(in - 1) * stride + k_eff - 2 * pad + output_padding`` with
    ``pad = k_eff // 2`` for "same" and 0 for "valid".

    Args:
        x: input of shape (batch, height, width, in_channels), static height and width.
        kernel: shape (kernel_h, kernel_w, out_channels, in_channels) (Keras' layout).
        strides: int or pair.
        padding: "valid" or "same".
        output_padding: None, int or pair; each must be smaller than the stride.
        dilation_rate: int or pair.

    Returns:
        A tensor of shape (batch, out_h, out_w, out_channels).

    Example:
        >>> y = kiln.ops.conv2d_transpose(x, w, strides=2, padding="same")  # 7x7 -> 14x14
    """
    op = "conv2d_transpose"
    x, k = _float_operands(op, x, kernel)
    check_rank(op, "input", x, 4)
    check_rank(op, "kernel", k, 4)
    st = int_tuple(op, "strides", strides, 2)
    dil = int_tuple(op, "dilation_rate", dilation_rate, 2)
    p = padding_arg(op, padding)
    if output_padding is None:
        opad: tuple[int | None, ...] = (None, None)
    else:
        given = (int(output_padding),) * 2 if isinstance(output_padding, int | np.integer) \
            else tuple(int(v) for v in output_padding)
        opad = given
        if len(given) != 2 or any(o < 0 or o >= s for o, s in zip(given, st)):
            raise ValueError(f"{op}: output_padding {output_padding!r} must be non-negative "
                             f"and smaller than the strides {st}")
    if x.shape[1] is None or x.shape[2] is None or None in k.shape:
        raise ValueError(f"{op}: needs static spatial dims and a static kernel, received input "
                         f"{fmt(x.shape)} and kernel {fmt(k.shape)}")
    if not same(x.shape[3], k.shape[3]):
        raise ValueError(f"{op}: input of shape {fmt(x.shape)} has {x.shape[3]} channels but the "
                         f"kernel of shape {fmt(k.shape)} expects {k.shape[3]} (the kernel is "
                         "(kh, kw, out_channels, in_channels))")
    in_hw, k_hw = int_pair(x.shape[1:3], op), int_pair(k.shape[:2], op)
    out_hw = tuple(_transpose_length(op, in_hw[i], k_hw[i], st[i], dil[i], p, opad[i])
                   for i in range(2))
    for i in range(2):
        back, _, _ = window(out_hw[i], k_hw[i], st[i], dil[i], p, op=op)
        if back != x.shape[1 + i]:
            raise ValueError(f"{op}: output size {out_hw} from input {fmt(x.shape)}, kernel "
                             f"{fmt(k.shape)}, strides {st}, padding {p!r} and output_padding "
                             f"{output_padding!r} does not convolve back to the input size; "
                             "choose another output_padding")
    return apply("conv2d_backprop_input", x, k, input_shape=out_hw + (k.shape[2],), strides=st,
                 padding=p, dilation=dil)
