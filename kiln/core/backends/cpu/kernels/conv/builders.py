"""The convolution ops' builders (conv2d and its two gradients, NHWC, TensorFlow padding):
each picks how its node runs (kiln/core/backends/cpu/kernels/conv/conv.py's module docstring
lists the ways), in this order: grouped kernels (``conv_groups``), native dot kernels for few
output channels (``conv_tile``), Winograd (``winograd``, ``winograd_pipeline``; a forward one
from ``CpuOptions.winograd_min_outputs`` output positions), the register
tiles (``conv_tile``), then ``conv.conv_method``'s choice of direct loops or im2col + GEMM.
The im2col buffer of an input is computed once per step and shared by its readers. Every
kernel here is native (LLVM IR): where that path is off, each op runs its NumPy reference.
"""

from __future__ import annotations

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.gemm import products
from kiln.core.backends.cpu.kernels.conv import (
    conv,
    conv_tile,
    winograd,
    winograd_cache,
    winograd_ops,
)
from kiln.core.backends.cpu.kernels.conv.conv_groups import build_grouped
from kiln.core.backends.cpu.kernels.conv.direct_small import input_gradient, takes_input_gradient
from kiln.core.backends.cpu.lowering import winograd_pays
from kiln.core.backends.cpu.registry import builder, reference_unless_native
from kiln.core.ir import Node


def _cols(b, x_node: Node, k: tuple[int, int], oh: int, ow: int, p: np.ndarray) -> np.ndarray:
    """The im2col buffer of ``x_node`` for this geometry: computed by the first reader in the
    step, reused by the others (the input's value does not change during the step)."""
    key = ("im2col", id(x_node), tuple(k), oh, ow, tuple(p))
    cached = b.cache.get(key)
    if cached is not None:
        return cached
    x = b.contiguous(x_node)
    n, h, w, c = x.shape
    cols = aligned.empty((n, oh, ow, k[0], k[1], c), x.dtype)
    conv._call(b, "im2col_kernel", cols.reshape(n, oh, ow, k[0], k[1] * c),
               x.reshape(n, h, w * c), np.append(p, c).astype(np.int64))
    b.cache[key] = cols
    return cols


def _grouped(b, node: Node) -> None:
    """A grouped convolution (``groups > 1``): ``conv_groups.py``'s direct kernels."""
    build_grouped(b, node)


def _pointwise(node: Node, k: tuple) -> bool:
    """Whether ``node`` is a 1x1 convolution of stride 1 (no padding either way): its three ops
    are GEMMs of the (N * H * W, C) views. The input gradient takes that path
    (benchmarks/bench_conv_shapes.py's pw case, 64 -> 64 channels, 16 x 16, batch 32, 2
    threads, through Function calls: 2.7 ms as a GEMM into an im2col-sized buffer + col2im ->
    1.8 ms); the forward and the kernel gradient keep their register tiles (as fast as the
    GEMM here: 0.41 and 0.39 ms against 0.38 for the GEMM alone)."""
    return tuple(k) == (1, 1) and tuple(node.attrs["strides"]) == (1, 1)


def _tiles(b, node: Node) -> int:
    """m of ``node``'s stride-1 Winograd tiles (:func:`winograd.tile_size`: the options'
    training-forward m where the plan trains a convolution, else ``winograd_m``)."""
    return winograd.tile_size(node.op, winograd.trains(b))


@builder("conv2d")
def build_conv2d(b, node: Node) -> None:
    if not reference_unless_native(b, node):
        return
    if node.attrs.get("groups", 1) != 1:
        _grouped(b, node)
        return
    x_node, w_node = node.inputs
    w = b.contiguous(w_node)
    k = w.shape[:2]
    oh, ow, p = conv._conv_params(b.shape(x_node)[1:3], k, node.attrs)
    out = b.out(node)
    x = b.contiguous(x_node)
    if conv_tile.few_outputs(w.shape, out) and conv_tile.native_dot_forward(b, node, x, w, out):
        return
    m = _tiles(b, node)
    pays = winograd_pays(out.shape) or winograd_cache.pays(b, w_node, w, out.shape)
    stride = winograd.usable(node.attrs, w.shape, out.dtype, node.op, m) if pays else 0
    if stride:
        pads = winograd.forward_pads(node, x.shape[1:3], k)
        winograd_ops.convolve(b, x, id(x_node), w, out, pads, stride, m)
        return
    taps = k[0] * k[1] * w.shape[2]
    method = conv.conv_method(taps, node.op, out.dtype.name, w.shape[3])
    if method == "tile" and conv_tile.forward_tile(b, node, x, w, out):
        return
    if method == "direct" or (method == "tile"
                              and taps <= options.current().conv_direct_max_taps):
        conv._call(b, "conv_direct_kernel", out, x, w, p)
        return
    cols = _cols(b, x_node, k, oh, ow, p)
    kk = k[0] * k[1] * w.shape[2]
    b.add(products.MatmulCall(),
          (cols.reshape(-1, kk), w.reshape(kk, -1), out.reshape(-1, w.shape[3])),
          label="conv2d:gemm")


@builder("conv2d_backprop_filter")
def build_conv2d_filter(b, node: Node) -> None:
    if not reference_unless_native(b, node):
        return
    if node.attrs.get("groups", 1) != 1:
        _grouped(b, node)
        return
    x_node, ct_node = node.inputs
    k = node.attrs["kernel_size"]
    oh, ow, p = conv._conv_params(b.shape(x_node)[1:3], k, node.attrs)
    out = b.out(node)
    ct = b.contiguous(ct_node)
    ci = b.shape(x_node)[3]
    x = b.contiguous(x_node)
    if conv_tile.few_outputs(out.shape, out) and conv_tile.native_dot_filter(b, node, x, ct, out):
        return
    m = _tiles(b, node)
    stride = winograd.usable(node.attrs, (*k, ci, ct.shape[3]), out.dtype, node.op, m)
    if stride:
        pads = winograd.forward_pads(node, x.shape[1:3], k)
        winograd_ops.kernel_gradient(b, x, id(x_node), ct, out, pads, stride, m)
        return
    taps = k[0] * k[1] * ci
    method = conv.conv_method(taps, node.op, out.dtype.name, ct.shape[3])
    if method == "tile":
        padded = conv_tile.padded(b, x_node, x, k, node.attrs)
        (sh, sw), (dh, dw) = node.attrs["strides"], node.attrs["dilation"]
        if conv_tile.native_filter(b, out, padded, ct, (sh, sw, dh, dw, *k)):
            return
    if taps <= options.current().conv_direct_max_taps:
        conv._call_summed(b, "conv_filter_direct_kernel", out, x, ct, p, n=ct.shape[0])
        return
    cols = _cols(b, x_node, k, oh, ow, p)
    kk = taps
    b.add(products.MatmulCall(), (cols.reshape(-1, kk).T, ct.reshape(-1, ct.shape[3]),
                                 out.reshape(kk, -1)), label="conv2d_backprop_filter:gemm")


@builder("conv2d_backprop_input")
def build_conv2d_input(b, node: Node) -> None:
    if not reference_unless_native(b, node):
        return
    if node.attrs.get("groups", 1) != 1:
        _grouped(b, node)
        return
    ct_node, w_node = node.inputs
    w = b.contiguous(w_node)
    k = w.shape[:2]
    oh, ow, p = conv._conv_params(node.attrs["input_shape"][:2], k, node.attrs)
    out = b.out(node)
    ct = b.contiguous(ct_node)
    m = _tiles(b, node)
    stride = winograd.usable(node.attrs, w.shape, out.dtype, node.op, m)
    if stride:
        pads = winograd.forward_pads(node, out.shape[1:3], k)
        winograd_ops.input_gradient(b, ct, id(ct_node), w, out, pads, stride, m)
        return
    if _pointwise(node, k):  # dx (M, Cin) = dy (M, Cout) @ w^T: no im2col-sized buffer
        b.add(products.MatmulCall(), (ct.reshape(-1, w.shape[3]), w.reshape(w.shape[2], -1).T,
                                     out.reshape(-1, w.shape[2])), label=f"{node.op}:pointwise")
        return
    if takes_input_gradient(node, w, out) and input_gradient(b, node, ct, w, out):  # few inputs
        return
    if conv_tile.input_as_forward(node, w, out):
        conv_tile.input_gradient_tile(b, node, ct, w, out)
        return
    n = ct.shape[0]
    kk = k[0] * k[1] * w.shape[2]
    cols = aligned.empty((n, oh, ow, k[0], k[1], w.shape[2]), w.dtype)
    b.add(products.MatmulCall(),
          (ct.reshape(-1, w.shape[3]), w.reshape(kk, -1).T, cols.reshape(-1, kk)),
          label="conv2d_backprop_input:gemm")
    conv._call(b, "col2im_kernel", out, cols, p)
