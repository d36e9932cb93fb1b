"""Convolution and pooling, channels-last (NHWC) like Keras, with TensorFlow padding semantics.

Registered ops (all on 4-D tensors; 1-D variants are builders over them):

* ``conv2d(x, w)``: x (N, H, W, Cin), w (kh, kw, Cin, Cout) -> (N, OH, OW, Cout).
* ``conv2d_backprop_input(ct, w)``: the transpose of ``conv2d`` in ``x`` (the input gradient,
  and the transposed convolution); its static ``input_shape=(H, W, Cin)`` is an attribute.
* ``conv2d_backprop_filter(x, ct)``: the transpose of ``conv2d`` in ``w``; ``kernel_size`` is an
  attribute.
* ``max_pool2d`` / ``avg_pool2d`` and their gradients ``max_pool2d_grad(x, out, ct)`` and
  ``avg_pool2d_grad(ct)``.

The three convolution ops are bilinear and each one's VJP is built from the other two, with the
same strides, padding and dilation, so gradients of any order are exact.

Padding follows TensorFlow: ``"valid"`` gives ``OH = (H - keff) // s + 1`` with
``keff = (k - 1) * d + 1``; ``"same"`` gives ``OH = ceil(H / s)`` with
``pad_total = max((OH - 1) * s + keff - H, 0)`` and ``pad_before = pad_total // 2`` (the odd
pixel goes after).

The NumPy references use an im2col over the ``kh * kw`` kernel positions (each a strided slice
of the padded input) and one GEMM, so they are usable as the fallback kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kiln.core.ir import Dim, Node, TensorType
from kiln.core.ops._rules import as_node, fmt, require_float, same_dtype
from kiln.core.ops.registry import NN, Example, OpDef, apply, register

__all__ = ["conv2d", "conv1d", "conv2d_transpose", "max_pool2d", "avg_pool2d", "max_pool1d",
           "avg_pool1d"]

Pair = tuple[int, int]
PADDINGS = ("valid", "same")


# ---- window arithmetic --------------------------------------------------------------------------
def _window(op: str, size: Dim, k: int, s: int, d: int, padding: str,
            what: str = "kernel") -> tuple[Dim, int, int]:
    """Output length and (before, after) padding of one spatial axis (TensorFlow rules).

    Returns ``(None, 0, 0)`` for an unknown size.
    """
    keff = (k - 1) * d + 1
    if size is None:
        return None, 0, 0
    if padding == "valid":
        if size < keff:
            dil = f" (dilated to {keff})" if d > 1 else ""
            raise ValueError(f"{op}: {what} size {k}{dil} is larger than the input size {size} "
                             "with padding 'valid'")
        return (size - keff) // s + 1, 0, 0
    out = -(-size // s)
    total = max((out - 1) * s + keff - size, 0)
    return out, total // 2, total - total // 2


def _check_attrs(op: str, strides: Any, padding: Any, dilation: Any = (1, 1)) -> None:
    for name, v in (("strides", strides), ("dilation", dilation)):
        if (not isinstance(v, tuple) or len(v) != 2
                or not all(isinstance(i, int) and i >= 1 for i in v)):
            raise ValueError(f"{op}: {name} must be a pair of positive ints, received {v!r}")
    if padding not in PADDINGS:
        raise ValueError(f"{op}: padding must be 'valid' or 'same', received {padding!r}")


def _rank4(op: str, what: str, t: TensorType) -> None:
    if t.ndim != 4:
        raise ValueError(f"{op}: {what} must have rank 4, received shape {fmt(t.shape)}")


def _same(a: Dim, b: Dim) -> bool:
    return a is None or b is None or a == b


def _out_hw(op: str, hw: tuple[Dim, Dim], k: Pair, strides: Pair, padding: str,
            dilation: Pair, what: str = "kernel") -> tuple[tuple[Dim, Dim], tuple[Pair, Pair]]:
    oh, t, b = _window(op, hw[0], k[0], strides[0], dilation[0], padding, what)
    ow, left, r = _window(op, hw[1], k[1], strides[1], dilation[1], padding, what)
    return (oh, ow), ((t, b), (left, r))


# ---- NumPy building blocks ----------------------------------------------------------------------
def _geometry(hw: tuple[int, int], k: Pair, strides: Pair, padding: str, dilation: Pair):
    (oh, ow), pads = _out_hw("conv", hw, k, strides, padding, dilation)
    return int(oh), int(ow), pads


def _pad(x: np.ndarray, pads: tuple[Pair, Pair], value: float = 0.0) -> np.ndarray:
    if pads == ((0, 0), (0, 0)):
        return x
    return np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=value)


def _slices(oh: int, ow: int, k: Pair, strides: Pair,
            dilation: Pair) -> Iterator[tuple[slice, slice, slice, slice]]:
    """For each kernel position (row-major), the slice of the padded input it reads."""
    (sh, sw), (dh, dw) = strides, dilation
    for a in range(k[0]):
        for b in range(k[1]):
            yield (slice(None), slice(a * dh, a * dh + (oh - 1) * sh + 1, sh),
                   slice(b * dw, b * dw + (ow - 1) * sw + 1, sw), slice(None))


def _im2col(xp: np.ndarray, oh: int, ow: int, k: Pair, strides: Pair,
            dilation: Pair) -> np.ndarray:
    """(N, OH, OW, kh * kw * C) patches, ordered like a (kh, kw, C, ...) kernel."""
    cols = np.stack([xp[s] for s in _slices(oh, ow, k, strides, dilation)], axis=3)
    return cols.reshape(xp.shape[0], oh, ow, -1)


def _col2im(cols: np.ndarray, padded_hw: Pair, pads: tuple[Pair, Pair], oh: int, ow: int,
            k: Pair, strides: Pair, dilation: Pair) -> np.ndarray:
    """Scatter-adds (N, OH, OW, kh, kw, C) patches back into the (cropped) input image."""
    n, c = cols.shape[0], cols.shape[-1]
    out = np.zeros((n, padded_hw[0], padded_hw[1], c), dtype=cols.dtype)
    for i, s in enumerate(_slices(oh, ow, k, strides, dilation)):
        out[s] += cols[:, :, :, i // k[1], i % k[1], :]
    (t, b), (left, r) = pads
    return out[:, t:padded_hw[0] - b, left:padded_hw[1] - r, :]


# ---- conv2d -------------------------------------------------------------------------------------
def _conv_infer(x: TensorType, w: TensorType, *, strides: Pair, padding: str,
                dilation: Pair) -> TensorType:
    op = "conv2d"
    require_float(op, x, w)
    dtype = same_dtype(op, x, w)
    _rank4(op, "input", x)
    _rank4(op, "kernel", w)
    _check_attrs(op, strides, padding, dilation)
    if not _same(x.shape[3], w.shape[2]):
        raise ValueError(f"{op}: input of shape {fmt(x.shape)} has {x.shape[3]} channels but the "
                         f"kernel of shape {fmt(w.shape)} expects {w.shape[2]}")
    if w.shape[0] is None or w.shape[1] is None:
        raise ValueError(f"{op}: the kernel's spatial size must be static, received "
                         f"{fmt(w.shape)}")
    try:
        (oh, ow), _ = _out_hw(op, x.shape[1:3], w.shape[:2], strides, padding, dilation)
    except ValueError as exc:
        raise ValueError(f"{exc}; input {fmt(x.shape)}, kernel {fmt(w.shape)}") from None
    return TensorType((x.shape[0], oh, ow, w.shape[3]), dtype)


def _conv_ref(x, w, *, strides, padding, dilation):
    x, w = np.asarray(x), np.asarray(w)
    k = w.shape[:2]
    oh, ow, pads = _geometry(x.shape[1:3], k, strides, padding, dilation)
    cols = _im2col(_pad(x, pads), oh, ow, k, strides, dilation)
    out = cols.reshape(-1, cols.shape[-1]) @ w.reshape(-1, w.shape[3])
    return out.reshape(x.shape[0], oh, ow, w.shape[3]).astype(x.dtype, copy=False)


def _static_input_shape(op: str, x: Node, w: Node) -> tuple[int, int, int]:
    h, wd, c = x.shape[1], x.shape[2], x.shape[3] if x.shape[3] is not None else w.shape[2]
    if h is None or wd is None or c is None:
        raise ValueError(f"{op}: the gradient needs static spatial dims and channels, received "
                         f"input {fmt(x.shape)}")
    return (h, wd, c)


def _conv_vjp(ct, out, x, w, *, strides, padding, dilation):
    attrs = {"strides": strides, "padding": padding, "dilation": dilation}
    return [apply("conv2d_backprop_input", ct, w,
                  input_shape=_static_input_shape("conv2d", x, w), **attrs),
            apply("conv2d_backprop_filter", x, ct, kernel_size=w.shape[:2], **attrs)]


# ---- conv2d_backprop_input: the transpose in x --------------------------------------------------
def _bpi_infer(ct: TensorType, w: TensorType, *, input_shape: tuple[int, int, int],
               strides: Pair, padding: str, dilation: Pair) -> TensorType:
    op = "conv2d_backprop_input"
    require_float(op, ct, w)
    dtype = same_dtype(op, ct, w)
    _rank4(op, "cotangent", ct)
    _rank4(op, "kernel", w)
    _check_attrs(op, strides, padding, dilation)
    if (not isinstance(input_shape, tuple) or len(input_shape) != 3
            or not all(isinstance(i, int) and i >= 1 for i in input_shape)):
        raise ValueError(f"{op}: input_shape must be a static (H, W, Cin), received "
                         f"{input_shape!r}")
    if w.shape[0] is None or w.shape[1] is None:
        raise ValueError(f"{op}: the kernel's spatial size must be static, received "
                         f"{fmt(w.shape)}")
    if not _same(w.shape[2], input_shape[2]):
        raise ValueError(f"{op}: input_shape {input_shape} has {input_shape[2]} channels but the "
                         f"kernel of shape {fmt(w.shape)} has {w.shape[2]} input channels")
    if not _same(ct.shape[3], w.shape[3]):
        raise ValueError(f"{op}: cotangent of shape {fmt(ct.shape)} has {ct.shape[3]} channels "
                         f"but the kernel of shape {fmt(w.shape)} has {w.shape[3]} output "
                         "channels")
    try:
        (oh, ow), _ = _out_hw(op, input_shape[:2], w.shape[:2], strides, padding, dilation)
    except ValueError as exc:
        raise ValueError(f"{exc}; input_shape {input_shape}, kernel {fmt(w.shape)}") from None
    if not (_same(ct.shape[1], oh) and _same(ct.shape[2], ow)):
        raise ValueError(f"{op}: a conv2d of an input of spatial size {input_shape[:2]} with "
                         f"kernel {fmt(w.shape)}, strides {strides}, dilation {dilation} and "
                         f"padding {padding!r} has spatial size ({oh}, {ow}), but the cotangent "
                         f"has shape {fmt(ct.shape)}")
    return TensorType((ct.shape[0],) + tuple(input_shape), dtype)


def _bpi_ref(ct, w, *, input_shape, strides, padding, dilation):
    ct, w = np.asarray(ct), np.asarray(w)
    k = w.shape[:2]
    oh, ow, pads = _geometry(input_shape[:2], k, strides, padding, dilation)
    cols = ct.reshape(-1, w.shape[3]) @ w.reshape(-1, w.shape[3]).T
    cols = cols.reshape(ct.shape[0], oh, ow, k[0], k[1], w.shape[2])
    padded = (input_shape[0] + sum(pads[0]), input_shape[1] + sum(pads[1]))
    dx = _col2im(cols, padded, pads, oh, ow, k, strides, dilation)
    return dx.astype(ct.dtype, copy=False)


def _bpi_vjp(g, out, ct, w, *, input_shape, strides, padding, dilation):
    attrs = {"strides": strides, "padding": padding, "dilation": dilation}
    return [apply("conv2d", g, w, **attrs),
            apply("conv2d_backprop_filter", g, ct, kernel_size=w.shape[:2], **attrs)]


# ---- conv2d_backprop_filter: the transpose in w -------------------------------------------------
def _bpf_infer(x: TensorType, ct: TensorType, *, kernel_size: Pair, strides: Pair, padding: str,
               dilation: Pair) -> TensorType:
    op = "conv2d_backprop_filter"
    require_float(op, x, ct)
    dtype = same_dtype(op, x, ct)
    _rank4(op, "input", x)
    _rank4(op, "cotangent", ct)
    _check_attrs(op, strides, padding, dilation)
    if (not isinstance(kernel_size, tuple) or len(kernel_size) != 2
            or not all(isinstance(i, int) and i >= 1 for i in kernel_size)):
        raise ValueError(f"{op}: kernel_size must be a pair of positive ints, received "
                         f"{kernel_size!r}")
    if not _same(x.shape[0], ct.shape[0]):
        raise ValueError(f"{op}: input {fmt(x.shape)} and cotangent {fmt(ct.shape)} have "
                         "different batch sizes")
    try:
        (oh, ow), _ = _out_hw(op, x.shape[1:3], kernel_size, strides, padding, dilation)
    except ValueError as exc:
        raise ValueError(f"{exc}; input {fmt(x.shape)}, kernel_size {kernel_size}") from None
    if not (_same(ct.shape[1], oh) and _same(ct.shape[2], ow)):
        raise ValueError(f"{op}: a conv2d of input {fmt(x.shape)} with kernel_size "
                         f"{kernel_size}, strides {strides}, dilation {dilation} and padding "
                         f"{padding!r} has spatial size ({oh}, {ow}), but the cotangent has "
                         f"shape {fmt(ct.shape)}")
    return TensorType(tuple(kernel_size) + (x.shape[3], ct.shape[3]), dtype)


def _bpf_ref(x, ct, *, kernel_size, strides, padding, dilation):
    x, ct = np.asarray(x), np.asarray(ct)
    oh, ow, pads = _geometry(x.shape[1:3], kernel_size, strides, padding, dilation)
    cols = _im2col(_pad(x, pads), oh, ow, kernel_size, strides, dilation)
    dw = cols.reshape(-1, cols.shape[-1]).T @ ct.reshape(-1, ct.shape[3])
    return dw.reshape(kernel_size[0], kernel_size[1], x.shape[3], ct.shape[3]).astype(
        x.dtype, copy=False)


def _bpf_vjp(g, out, x, ct, *, kernel_size, strides, padding, dilation):
    attrs = {"strides": strides, "padding": padding, "dilation": dilation}
    return [apply("conv2d_backprop_input", ct, g,
                  input_shape=_static_input_shape("conv2d_backprop_filter", x, g), **attrs),
            apply("conv2d", x, g, **attrs)]


# ---- conv examples (tiny: gradients are checked by finite differences) --------------------------
_CONV_CASES = [  # x shape, kernel (kh, kw, cin, cout), strides, padding, dilation
    ((2, 5, 5, 2), (3, 3, 2, 3), (1, 1), "valid", (1, 1)),
    ((2, 5, 5, 2), (3, 3, 2, 2), (2, 2), "same", (1, 1)),
    ((1, 5, 6, 2), (2, 2, 2, 3), (1, 2), "same", (2, 1)),
    ((1, 6, 5, 3), (2, 3, 3, 2), (2, 1), "valid", (2, 2)),
]


def _conv_cases(rng, dt):
    for xs, ws, strides, padding, dilation in _CONV_CASES:
        attrs = {"strides": strides, "padding": padding, "dilation": dilation}
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


# ---- pooling ------------------------------------------------------------------------------------
def _pool_check(op: str, x: TensorType, pool_size: Any, strides: Any, padding: Any) -> None:
    require_float(op, x)
    _rank4(op, "input", x)
    if (not isinstance(pool_size, tuple) or len(pool_size) != 2
            or not all(isinstance(i, int) and i >= 1 for i in pool_size)):
        raise ValueError(f"{op}: pool_size must be a pair of positive ints, received "
                         f"{pool_size!r}")
    _check_attrs(op, strides, padding)


def _pool_out(op: str, x_shape: tuple, pool_size: Pair, strides: Pair,
              padding: str) -> tuple[Dim, Dim]:
    try:
        (oh, ow), _ = _out_hw(op, x_shape[1:3], pool_size, strides, padding, (1, 1), "pool")
    except ValueError as exc:
        raise ValueError(f"{exc}; input {fmt(x_shape)}, pool_size {pool_size}") from None
    return oh, ow


def _pool_infer(name: str):
    def infer(x: TensorType, *, pool_size: Pair, strides: Pair, padding: str) -> TensorType:
        _pool_check(name, x, pool_size, strides, padding)
        oh, ow = _pool_out(name, x.shape, pool_size, strides, padding)
        return TensorType((x.shape[0], oh, ow, x.shape[3]), x.dtype)
    return infer


def _max_pool_ref(x, *, pool_size, strides, padding):
    x = np.asarray(x)
    oh, ow, pads = _geometry(x.shape[1:3], pool_size, strides, padding, (1, 1))
    xp = _pad(x, pads, -np.inf)
    out = None
    for s in _slices(oh, ow, pool_size, strides, (1, 1)):
        out = xp[s].copy() if out is None else np.maximum(out, xp[s])
    return out.astype(x.dtype, copy=False)


def _counts(hw: Pair, pool_size: Pair, strides: Pair, padding: str) -> np.ndarray:
    """(OH, OW, 1): the number of real (unpadded) input elements in each window."""
    oh, ow, pads = _geometry(hw, pool_size, strides, padding, (1, 1))
    ones = _pad(np.ones((1, hw[0], hw[1], 1)), pads)
    total = sum(ones[s] for s in _slices(oh, ow, pool_size, strides, (1, 1)))
    return total[0]


def _avg_pool_ref(x, *, pool_size, strides, padding):
    x = np.asarray(x)
    oh, ow, pads = _geometry(x.shape[1:3], pool_size, strides, padding, (1, 1))
    xp = _pad(x, pads)
    total = sum(xp[s] for s in _slices(oh, ow, pool_size, strides, (1, 1)))
    cnt = _counts(x.shape[1:3], pool_size, strides, padding).astype(x.dtype)
    return (total / cnt).astype(x.dtype, copy=False)


def _static_hw(op: str, x: Node) -> Pair:
    if x.shape[1] is None or x.shape[2] is None:
        raise ValueError(f"{op}: the gradient needs static spatial dims, received input "
                         f"{fmt(x.shape)}")
    return (x.shape[1], x.shape[2])


def _max_pool_vjp(ct, out, x, *, pool_size, strides, padding):
    return [apply("max_pool2d_grad", x, out, ct, pool_size=pool_size, strides=strides,
                  padding=padding)]


def _avg_pool_vjp(ct, out, x, *, pool_size, strides, padding):
    return [apply("avg_pool2d_grad", ct, input_shape=_static_hw("avg_pool2d", x),
                  pool_size=pool_size, strides=strides, padding=padding)]


def _max_grad_infer(x: TensorType, out: TensorType, ct: TensorType, *, pool_size: Pair,
                    strides: Pair, padding: str) -> TensorType:
    op = "max_pool2d_grad"
    _pool_check(op, x, pool_size, strides, padding)
    same_dtype(op, x, out, ct)
    oh, ow = _pool_out(op, x.shape, pool_size, strides, padding)
    want = (x.shape[0], oh, ow, x.shape[3])
    for what, t in (("pooled output", out), ("cotangent", ct)):
        if t.ndim != 4 or not all(_same(a, b) for a, b in zip(t.shape, want)):
            raise ValueError(f"{op}: {what} of shape {fmt(t.shape)} does not match the pooled "
                             f"shape {fmt(want)} of input {fmt(x.shape)}")
    return x


def _max_grad_ref(x, out, ct, *, pool_size, strides, padding):
    """Routes each window's cotangent to its first maximal element (row-major in the window)."""
    x, out, ct = np.asarray(x), np.asarray(out), np.asarray(ct)
    oh, ow, pads = _geometry(x.shape[1:3], pool_size, strides, padding, (1, 1))
    xp = _pad(x, pads, -np.inf)
    dx = np.zeros(xp.shape, dtype=ct.dtype)
    found = np.zeros(out.shape, dtype=bool)
    for s in _slices(oh, ow, pool_size, strides, (1, 1)):
        hit = (xp[s] == out) & ~found
        dx[s] += np.where(hit, ct, 0)
        found |= hit
    (t, b), (left, r) = pads
    return dx[:, t:dx.shape[1] - b, left:dx.shape[2] - r, :]


def _avg_grad_infer(ct: TensorType, *, input_shape: Pair, pool_size: Pair, strides: Pair,
                    padding: str) -> TensorType:
    op = "avg_pool2d_grad"
    _pool_check(op, ct, pool_size, strides, padding)
    if (not isinstance(input_shape, tuple) or len(input_shape) != 2
            or not all(isinstance(i, int) and i >= 1 for i in input_shape)):
        raise ValueError(f"{op}: input_shape must be a static (H, W), received {input_shape!r}")
    oh, ow = _pool_out(op, (None,) + input_shape + (None,), pool_size, strides, padding)
    if not (_same(ct.shape[1], oh) and _same(ct.shape[2], ow)):
        raise ValueError(f"{op}: pooling an input of spatial size {input_shape} gives ({oh}, "
                         f"{ow}), but the cotangent has shape {fmt(ct.shape)}")
    return TensorType((ct.shape[0],) + input_shape + (ct.shape[3],), ct.dtype)


def _avg_grad_ref(ct, *, input_shape, pool_size, strides, padding):
    ct = np.asarray(ct)
    oh, ow, pads = _geometry(input_shape, pool_size, strides, padding, (1, 1))
    per = ct / _counts(input_shape, pool_size, strides, padding).astype(ct.dtype)
    cols = np.broadcast_to(per[:, :, :, None, None, :],
                           per.shape[:3] + tuple(pool_size) + per.shape[3:])
    padded = (input_shape[0] + sum(pads[0]), input_shape[1] + sum(pads[1]))
    dx = _col2im(cols, padded, pads, oh, ow, pool_size, strides, (1, 1))
    return dx.astype(ct.dtype, copy=False)


def _avg_grad_vjp(g, out, ct, *, input_shape, pool_size, strides, padding):
    # avg_pool2d is linear and avg_pool2d_grad is its transpose, so this is exact.
    return [apply("avg_pool2d", g, pool_size=pool_size, strides=strides, padding=padding)]


_POOL_CASES = [  # x shape, pool_size, strides, padding
    ((2, 5, 5, 2), (2, 2), (2, 2), "valid"),
    ((2, 5, 5, 2), (3, 3), (2, 2), "same"),
    ((1, 4, 5, 3), (2, 3), (1, 1), "same"),
    ((1, 5, 4, 2), (3, 2), (1, 2), "valid"),
]


def _distinct(rng, shape, dt):
    """Values at least 0.1 apart, so no window's maximum is near a tie for finite differences."""
    n = int(np.prod(shape))
    return (rng.permutation(n).reshape(shape) * 0.1 - 0.05 * n).astype(dt)


def _pool_examples(rng, dt):
    return [Example((_distinct(rng, xs, dt),),
                    {"pool_size": p, "strides": s, "padding": pad}, fd_eps=1e-3)
            for xs, p, s, pad in _POOL_CASES]


def _max_grad_examples(rng, dt):
    out = []
    for xs, p, s, pad in _POOL_CASES:
        attrs = {"pool_size": p, "strides": s, "padding": pad}
        x = _distinct(rng, xs, dt)
        y = _max_pool_ref(x, **attrs)
        out.append(Example((x, y, rng.normal(size=y.shape).astype(dt)), attrs, wrt=()))
    return out


def _avg_grad_examples(rng, dt):
    out = []
    for xs, p, s, pad in _POOL_CASES:
        attrs = {"pool_size": p, "strides": s, "padding": pad}
        y = _avg_pool_ref(np.zeros(xs), **attrs)
        out.append(Example((rng.normal(size=y.shape).astype(dt),),
                           dict(attrs, input_shape=xs[1:3])))
    return out


register(OpDef("max_pool2d", NN, _pool_infer("max_pool2d"), _max_pool_ref, _max_pool_vjp,
               examples=_pool_examples, doc="2-D max pooling, NHWC; 'same' pads with -inf"))
register(OpDef("avg_pool2d", NN, _pool_infer("avg_pool2d"), _avg_pool_ref, _avg_pool_vjp,
               examples=_pool_examples,
               doc="2-D average pooling, NHWC; 'same' averages over the real elements only"))
register(OpDef("max_pool2d_grad", NN, _max_grad_infer, _max_grad_ref, differentiable=False,
               examples=_max_grad_examples,
               nondiff_reason="second derivatives of max pooling are not implemented",
               doc="gradient of max_pool2d: routes each cotangent to its window's first max"))
register(OpDef("avg_pool2d_grad", NN, _avg_grad_infer, _avg_grad_ref, _avg_grad_vjp,
               examples=_avg_grad_examples,
               doc="gradient of avg_pool2d (its transpose)"))


# ---- builders -----------------------------------------------------------------------------------
def _tuple(op: str, name: str, value: Any, n: int) -> tuple[int, ...]:
    """An int or a length-``n`` sequence of positive ints, as a tuple of ``n`` ints."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        out = (int(value),) * n
    else:
        try:
            out = tuple(int(v) for v in value)
        except TypeError:
            raise TypeError(f"{op}: {name} must be an int or a sequence of {n} ints, received "
                            f"{value!r}") from None
    if len(out) != n or any(v < 1 for v in out):
        raise ValueError(f"{op}: {name} must be a positive int or {n} positive ints, received "
                         f"{value!r}")
    return out


def _padding(op: str, padding: Any, allowed: tuple[str, ...] = PADDINGS) -> str:
    p = padding.lower() if isinstance(padding, str) else padding
    if p not in allowed:
        raise ValueError(f"{op}: padding must be one of {', '.join(map(repr, allowed))}, "
                         f"received {padding!r}")
    return p


def _float_operands(op: str, x: Any, kernel: Any) -> tuple[Node, Node]:
    x = as_node(x)
    k = as_node(kernel, x.dtype)
    return x, k


def _rank(op: str, what: str, t: Node, n: int) -> None:
    if t.ndim != n:
        raise ValueError(f"{op}: {what} must have rank {n}, received shape {fmt(t.shape)}")


def conv2d(x: Any, kernel: Any, strides: Any = 1, padding: str = "valid",
           dilation_rate: Any = 1) -> Node:
    """2-D convolution (cross-correlation, like Keras), channels-last.

    Args:
        x: input of shape (batch, height, width, in_channels).
        kernel: shape (kernel_h, kernel_w, in_channels, out_channels).
        strides: int or pair.
        padding: "valid" or "same" (TensorFlow semantics: out = ceil(in / stride), the odd
            padding pixel goes at the bottom/right).
        dilation_rate: int or pair.

    Returns:
        A tensor of shape (batch, out_h, out_w, out_channels).

    Example:
        >>> y = kiln.ops.conv2d(x, w, strides=2, padding="same")  # (None,28,28,1) -> (None,14,14,8)
    """
    x, k = _float_operands("conv2d", x, kernel)
    return apply("conv2d", x, k, strides=_tuple("conv2d", "strides", strides, 2),
                 padding=_padding("conv2d", padding),
                 dilation=_tuple("conv2d", "dilation_rate", dilation_rate, 2))


def conv1d(x: Any, kernel: Any, strides: Any = 1, padding: str = "valid",
           dilation_rate: Any = 1) -> Node:
    """1-D convolution, channels-last (built on conv2d).

    Args:
        x: input of shape (batch, length, in_channels).
        kernel: shape (kernel_size, in_channels, out_channels).
        strides: int (or a 1-sequence).
        padding: "valid", "same" or "causal" (left padding by ``(k - 1) * dilation``, as in
            Keras' Conv1D).
        dilation_rate: int (or a 1-sequence).

    Returns:
        A tensor of shape (batch, out_length, out_channels).

    Example:
        >>> y = kiln.ops.conv1d(x, w, padding="causal", dilation_rate=2)
    """
    from kiln.core.ops.movement import expand_dims, pad, squeeze

    x, k = _float_operands("conv1d", x, kernel)
    _rank("conv1d", "input", x, 3)
    _rank("conv1d", "kernel", k, 3)
    (s,) = _tuple("conv1d", "strides", strides, 1)
    (d,) = _tuple("conv1d", "dilation_rate", dilation_rate, 1)
    p = _padding("conv1d", padding, PADDINGS + ("causal",))
    if p == "causal":
        if k.shape[0] is None:
            raise ValueError(f"conv1d: causal padding needs a static kernel size, received "
                             f"{fmt(k.shape)}")
        x = pad(x, ((0, 0), ((k.shape[0] - 1) * d, 0), (0, 0)))
        p = "valid"
    y = apply("conv2d", expand_dims(x, 1), expand_dims(k, 0), strides=(1, s), padding=p,
              dilation=(1, d))
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
    _rank(op, "input", x, 4)
    _rank(op, "kernel", k, 4)
    st = _tuple(op, "strides", strides, 2)
    dil = _tuple(op, "dilation_rate", dilation_rate, 2)
    p = _padding(op, padding)
    if output_padding is None:
        opad: tuple[int | None, ...] = (None, None)
    else:
        opad = (int(output_padding),) * 2 if isinstance(output_padding, int | np.integer) \
            else tuple(int(v) for v in output_padding)
        if len(opad) != 2 or any(o < 0 or o >= s for o, s in zip(opad, st)):
            raise ValueError(f"{op}: output_padding {output_padding!r} must be non-negative "
                             f"and smaller than the strides {st}")
    if x.shape[1] is None or x.shape[2] is None or None in k.shape:
        raise ValueError(f"{op}: needs static spatial dims and a static kernel, received input "
                         f"{fmt(x.shape)} and kernel {fmt(k.shape)}")
    if not _same(x.shape[3], k.shape[3]):
        raise ValueError(f"{op}: input of shape {fmt(x.shape)} has {x.shape[3]} channels but the "
                         f"kernel of shape {fmt(k.shape)} expects {k.shape[3]} (the kernel is "
                         "(kh, kw, out_channels, in_channels))")
    out_hw = tuple(_transpose_length(op, x.shape[1 + i], k.shape[i], st[i], dil[i], p, opad[i])
                   for i in range(2))
    for i in range(2):
        back, _, _ = _window(op, out_hw[i], k.shape[i], st[i], dil[i], p)
        if back != x.shape[1 + i]:
            raise ValueError(f"{op}: output size {out_hw} from input {fmt(x.shape)}, kernel "
                             f"{fmt(k.shape)}, strides {st}, padding {p!r} and output_padding "
                             f"{output_padding!r} does not convolve back to the input size; "
                             "choose another output_padding")
    return apply("conv2d_backprop_input", x, k, input_shape=out_hw + (k.shape[2],), strides=st,
                 padding=p, dilation=dil)


def _pool2d(op: str, x: Any, pool_size: Any, strides: Any, padding: str) -> Node:
    x = as_node(x)
    ps = _tuple(op, "pool_size", pool_size, 2)
    st = ps if strides is None else _tuple(op, "strides", strides, 2)
    return apply(op, x, pool_size=ps, strides=st, padding=_padding(op, padding))


def max_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """2-D max pooling, channels-last.

    Args:
        x: input of shape (batch, height, width, channels).
        pool_size: int or pair.
        strides: int or pair; defaults to ``pool_size``.
        padding: "valid" or "same" (padding never wins the max).

    Returns:
        A tensor of shape (batch, out_h, out_w, channels).

    Example:
        >>> y = kiln.ops.max_pool2d(x, 2)   # (None, 28, 28, 8) -> (None, 14, 14, 8)
    """
    return _pool2d("max_pool2d", x, pool_size, strides, padding)


def avg_pool2d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """2-D average pooling, channels-last; with "same", averages over real elements only.

    Args:
        x: input of shape (batch, height, width, channels).
        pool_size: int or pair.
        strides: int or pair; defaults to ``pool_size``.
        padding: "valid" or "same".

    Returns:
        A tensor of shape (batch, out_h, out_w, channels).

    Example:
        >>> y = kiln.ops.avg_pool2d(x, 3, strides=2, padding="same")
    """
    return _pool2d("avg_pool2d", x, pool_size, strides, padding)


def _pool1d(op: str, x: Any, pool_size: Any, strides: Any, padding: str) -> Node:
    from kiln.core.ops.movement import expand_dims, squeeze

    x = as_node(x)
    _rank(f"{op[:-2]}1d", "input", x, 3)
    (ps,) = _tuple(f"{op[:-2]}1d", "pool_size", pool_size, 1)
    (st,) = (ps,) if strides is None else _tuple(f"{op[:-2]}1d", "strides", strides, 1)
    y = apply(op, expand_dims(x, 1), pool_size=(1, ps), strides=(1, st),
              padding=_padding(f"{op[:-2]}1d", padding))
    return squeeze(y, 1)


def max_pool1d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """1-D max pooling of (batch, length, channels) (built on max_pool2d).

    Example:
        >>> y = kiln.ops.max_pool1d(x, 2)   # (None, 10, 4) -> (None, 5, 4)
    """
    return _pool1d("max_pool2d", x, pool_size, strides, padding)


def avg_pool1d(x: Any, pool_size: Any = 2, strides: Any = None, padding: str = "valid") -> Node:
    """1-D average pooling of (batch, length, channels) (built on avg_pool2d).

    Example:
        >>> y = kiln.ops.avg_pool1d(x, 3, strides=1, padding="same")
    """
    return _pool1d("avg_pool2d", x, pool_size, strides, padding)
