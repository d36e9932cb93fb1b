"""Pooling (NHWC, TensorFlow padding, see kiln/core/ops/window.py): the native kernels of
``native_pool.py`` over the images ``n0 <= n < n1``, split over kiln's threads by
``conv._call`` (the images are independent); where the native path is off, the ops' NumPy
references. Max pooling routes the gradient to the first maximal element of each window,
row-major, like the reference; average pooling with "same" averages over the real elements
only.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.kernels.conv.conv import _call
from kiln.core.backends.cpu.kernels.pool import avg_tiled, native_pool
from kiln.core.backends.cpu.registry import builder, reference_unless_native
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ir import Node
from kiln.core.ops.window import window2d


# ---- builders -----------------------------------------------------------------------------------
def _pool_params(b, node: Node, hw: tuple[int, int]) -> np.ndarray:
    ps, st = node.attrs["pool_size"], node.attrs["strides"]
    _, pads = window2d(hw, ps, st, (1, 1), node.attrs["padding"])
    return np.array([ps[0], ps[1], st[0], st[1], pads[0][0], pads[1][0]], np.int64)


# Max pooling over windows that tile the input, of at most ``pool_max_index_taps`` taps, runs
# native_pool.max_pool_unrolled_ir (every tap of a channel in registers; the same bits as
# native_pool.max_pool_ir). Where its gradient is a kernel of the same plan (a training
# step), it also writes the index of each window's winner (INDEX: one byte per pooled
# element), and the gradient routes the cotangent by it (max_pool_grad_index_ir, the same
# bits) instead of reading the input and the output again to find the winner: MNIST convnet
# layer 1 (26 x 26 x 32), 64 images on one thread, forward 497 -> 346 us (index included),
# gradient 797 -> 477 us; CIFAR-shaped 32 x 32 x 64: 1428 -> 1369 and 2347 -> 1214 us.
# (options.CpuOptions.pool_unrolled, pool_index, pool_max_index_taps)


@builder("max_pool2d", "avg_pool2d")
def build_pool(b, node: Node) -> None:
    if not reference_unless_native(b, node):
        return
    x = b.contiguous(node.inputs[0])
    p = _pool_params(b, node, x.shape[1:3])
    if node.op == "max_pool2d" and _pool_unrolled(b, node, x, p):
        return
    if node.op == "avg_pool2d" and avg_tiled.add_forward(b, b.out(node), x, p):
        return
    _call(b, "max_pool_kernel" if node.op == "max_pool2d" else "avg_pool_kernel", b.out(node),
          x, p)


def _index_key(x: Node, out: Node, attrs: dict) -> tuple:
    return ("max_pool_index", id(x), id(out), tuple(sorted(attrs.items())))


def _pool_unrolled(b, node: Node, x: np.ndarray, p: np.ndarray) -> bool:
    """Adds the unrolled max pooling of windows that tile the input, writing its winners'
    index too (see ``pool_index``) where its gradient is in this plan; False where the
    windows do not tile the input or the native kernels do not run here."""
    out = b.out(node)
    ph, pw = int(p[0]), int(p[1])
    opts = options.current()
    if not (opts.pool_unrolled and _tiled(p, x.shape, out.shape)
            and ph * pw <= opts.pool_max_index_taps
            and out.flags.c_contiguous):
        return False
    grads = b.cache.get("max_pool_grads")
    if grads is None:
        grads = b.cache["max_pool_grads"] = {
            _index_key(g.inputs[0], g.inputs[1], g.attrs) for g in b.static.kernels
            if g.op == "max_pool2d_grad"}
    key = _index_key(node.inputs[0], node, node.attrs)
    index = opts.pool_index and key in grads
    idx = np.empty(out.shape, np.uint8) if index else None
    if not native_split(b, f"max_pool_unrolled_{ph}x{pw}{'i' if index else ''}",
                        lambda s, dt: native_pool.max_pool_unrolled_ir(s, dt, ph, pw, index),
                        (out, idx, x) if index else (out, x), p.tolist(), out.shape[0],
                        mixed=True):
        return False
    if index:
        b.cache[key] = idx
    return True


@builder("max_pool2d_grad")
def build_max_pool_grad(b, node: Node) -> None:
    if not reference_unless_native(b, node):
        return
    x_node, out_node, ct_node = node.inputs
    shape = b.shape(x_node)
    p = _pool_params(b, node, shape[1:3])
    ct = b.contiguous(ct_node)
    idx = b.cache.get(_index_key(x_node, out_node, node.attrs))
    ph, pw = int(p[0]), int(p[1])
    if idx is not None and native_split(
            b, f"max_pool_grad_index_{ph}x{pw}",
            lambda s, dt: native_pool.max_pool_grad_index_ir(s, dt, ph, pw),
            (b.out(node), idx, ct), p.tolist(), shape[0], mixed=True):
        return
    x, out = b.contiguous(x_node), b.contiguous(out_node)
    tiled = _tiled(p, x.shape, out.shape)
    _call(b, "max_pool_grad_tiled_kernel" if tiled else "max_pool_grad_kernel", b.out(node), x,
          out, ct, p)


def _tiled(p: np.ndarray, x_shape: tuple, out_shape: tuple) -> bool:
    """Whether the pooling windows tile the input and lie inside it (with "same" padding the
    last window may reach into the bottom/right padding, which the tiled kernel must not read
    or write)."""
    ph, pw, sh, sw, pt, pl = (int(v) for v in p)
    return (ph == sh and pw == sw and pt == 0 and pl == 0 and out_shape[1] * sh <= x_shape[1]
            and out_shape[2] * sw <= x_shape[2])


@builder("avg_pool2d_grad")
def build_avg_pool_grad(b, node: Node) -> None:
    if not reference_unless_native(b, node):
        return
    ct = b.contiguous(node.inputs[0])
    p = _pool_params(b, node, node.attrs["input_shape"])
    if avg_tiled.add_gradient(b, b.out(node), ct, p):
        return
    _call(b, "avg_pool_grad_kernel", b.out(node), ct, p)
