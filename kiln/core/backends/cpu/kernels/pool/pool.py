"""Pooling kernels (NHWC, TensorFlow padding, see kiln/core/ops/window.py): direct numba loops
over the images ``n0 <= n < n1``, split over kiln's threads by ``conv._call`` (the images are
independent). Max pooling routes the
gradient to the first maximal element of each window, row-major, like the reference; average
pooling with "same" averages over the real elements only.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.kernels.conv.conv import _call
from kiln.core.backends.cpu.kernels.pool import avg_tiled, native_pool
from kiln.core.backends.cpu.registry import builder
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ir import Node
from kiln.core.ops.window import window2d


# ---- kernels ------------------------------------------------------------------------------------
def max_pool_kernel(out, x, p, n0, n1):
    # p = [ph, pw, sh, sw, pad_top, pad_left]
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[1], out.shape[2]
    ph, pw, sh, sw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    for n in range(n0, n1):
        for i in range(oh):
            for j in range(ow):
                first = True
                for a in range(ph):
                    hi = i * sh - pt + a
                    if hi < 0 or hi >= h:
                        continue
                    for b in range(pw):
                        wi = j * sw - pl + b
                        if wi < 0 or wi >= w:
                            continue
                        if first:
                            for ch in range(c):
                                out[n, i, j, ch] = x[n, hi, wi, ch]
                            first = False
                        else:
                            for ch in range(c):
                                v = x[n, hi, wi, ch]
                                m = out[n, i, j, ch]
                                out[n, i, j, ch] = v if (v > m or v != v) else m


def max_pool_grad_tiled_kernel(dx, x, out, ct, p, n0, n1):
    # max_pool_grad_kernel where the windows tile the input and lie inside it (pool size =
    # strides, no padding before, oh * sh <= h, ow * sw <= w: see _tiled): every input element
    # is in at most one window, so it is written once (no zeroing pass, 3x faster). A kernel
    # of its own: a model compiles only the variant it runs (each half the compile time).
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[1], out.shape[2]
    ph, pw, sh, sw = p[0], p[1], p[2], p[3]
    pending = np.empty(c, np.bool_)
    for n in range(n0, n1):
        for hi in range(oh * sh, h):
            for wi in range(w):
                for ch in range(c):
                    dx[n, hi, wi, ch] = 0
        for hi in range(oh * sh):
            for wi in range(ow * sw, w):
                for ch in range(c):
                    dx[n, hi, wi, ch] = 0
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    pending[ch] = True
                for a in range(ph):
                    hi = i * sh + a
                    for b in range(pw):
                        wi = j * sw + b
                        for ch in range(c):
                            hit = pending[ch] and x[n, hi, wi, ch] == out[n, i, j, ch]
                            dx[n, hi, wi, ch] = ct[n, i, j, ch] if hit else 0
                            pending[ch] = pending[ch] and not hit


def max_pool_grad_kernel(dx, x, out, ct, p, n0, n1):
    # each window's cotangent goes to its first maximal element (row-major in the window)
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[1], out.shape[2]
    ph, pw, sh, sw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    pending = np.empty(c, np.bool_)
    for n in range(n0, n1):
        for hi in range(h):
            for wi in range(w):
                for ch in range(c):
                    dx[n, hi, wi, ch] = 0
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    pending[ch] = True
                for a in range(ph):
                    hi = i * sh - pt + a
                    if hi < 0 or hi >= h:
                        continue
                    for b in range(pw):
                        wi = j * sw - pl + b
                        if wi < 0 or wi >= w:
                            continue
                        for ch in range(c):
                            if pending[ch] and x[n, hi, wi, ch] == out[n, i, j, ch]:
                                dx[n, hi, wi, ch] += ct[n, i, j, ch]
                                pending[ch] = False


def avg_pool_kernel(out, x, p, n0, n1):
    h, w, c = x.shape[1], x.shape[2], x.shape[3]
    oh, ow = out.shape[1], out.shape[2]
    ph, pw, sh, sw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    for n in range(n0, n1):
        for i in range(oh):
            for j in range(ow):
                for ch in range(c):
                    out[n, i, j, ch] = 0
                cnt = 0
                for a in range(ph):
                    hi = i * sh - pt + a
                    if hi < 0 or hi >= h:
                        continue
                    for b in range(pw):
                        wi = j * sw - pl + b
                        if wi < 0 or wi >= w:
                            continue
                        cnt += 1
                        for ch in range(c):
                            out[n, i, j, ch] += x[n, hi, wi, ch]
                for ch in range(c):
                    out[n, i, j, ch] = out[n, i, j, ch] / cnt


def avg_pool_grad_kernel(dx, ct, p, n0, n1):
    h, w, c = dx.shape[1], dx.shape[2], dx.shape[3]
    oh, ow = ct.shape[1], ct.shape[2]
    ph, pw, sh, sw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    for n in range(n0, n1):
        for hi in range(h):
            for wi in range(w):
                for ch in range(c):
                    dx[n, hi, wi, ch] = 0
        for i in range(oh):
            for j in range(ow):
                cnt = 0
                for a in range(ph):
                    hi = i * sh - pt + a
                    if 0 <= hi < h:
                        for b in range(pw):
                            wi = j * sw - pl + b
                            if 0 <= wi < w:
                                cnt += 1
                for a in range(ph):
                    hi = i * sh - pt + a
                    if hi < 0 or hi >= h:
                        continue
                    for b in range(pw):
                        wi = j * sw - pl + b
                        if wi < 0 or wi >= w:
                            continue
                        for ch in range(c):
                            dx[n, hi, wi, ch] += ct[n, i, j, ch] / cnt


# ---- builders -----------------------------------------------------------------------------------
def _pool_params(b, node: Node, hw: tuple[int, int]) -> np.ndarray:
    ps, st = node.attrs["pool_size"], node.attrs["strides"]
    _, pads = window2d(hw, ps, st, (1, 1), node.attrs["padding"])
    return np.array([ps[0], ps[1], st[0], st[1], pads[0][0], pads[1][0]], np.int64)


# Max pooling over windows that tile the input, of at most MAX_INDEX_TAPS taps, runs
# native_pool.max_pool_unrolled_ir (every tap of a channel in registers; the same bits as
# max_pool_kernel). Where its gradient is a kernel of the same plan (a training step), it also
# writes the index of each window's winner (INDEX: one byte per pooled element), and the
# gradient routes the cotangent by it (max_pool_grad_index_ir, the same bits) instead of
# reading the input and the output again to find the winner: MNIST convnet layer 1 (26 x 26 x
# 32), 64 images on one thread, forward 497 -> 346 us (index included), gradient 797 -> 477 us;
# CIFAR-shaped 32 x 32 x 64: 1428 -> 1369 and 2347 -> 1214 us.
UNROLLED = True
INDEX = True
MAX_INDEX_TAPS = 16


@builder("max_pool2d", "avg_pool2d")
def build_pool(b, node: Node) -> None:
    x = b.contiguous(node.inputs[0])
    p = _pool_params(b, node, x.shape[1:3])
    if node.op == "max_pool2d" and _pool_unrolled(b, node, x, p):
        return
    if node.op == "avg_pool2d" and avg_tiled.add_forward(b, b.out(node), x, p):
        return
    fn = max_pool_kernel if node.op == "max_pool2d" else avg_pool_kernel
    _call(b, fn, b.out(node), x, p)


def _index_key(x: Node, out: Node, attrs: dict) -> tuple:
    return ("max_pool_index", id(x), id(out), tuple(sorted(attrs.items())))


def _pool_unrolled(b, node: Node, x: np.ndarray, p: np.ndarray) -> bool:
    """Adds the unrolled max pooling of windows that tile the input, writing its winners'
    index too (see :data:`INDEX`) where its gradient is in this plan; False where the
    windows do not tile the input or the native kernels do not run here."""
    out = b.out(node)
    ph, pw = int(p[0]), int(p[1])
    if not (UNROLLED and _tiled(p, x.shape, out.shape) and ph * pw <= MAX_INDEX_TAPS
            and out.flags.c_contiguous):
        return False
    grads = b.cache.get("max_pool_grads")
    if grads is None:
        grads = b.cache["max_pool_grads"] = {
            _index_key(g.inputs[0], g.inputs[1], g.attrs) for g in b.static.kernels
            if g.op == "max_pool2d_grad"}
    key = _index_key(node.inputs[0], node, node.attrs)
    index = INDEX and key in grads
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
    kernel = max_pool_grad_tiled_kernel if _tiled(p, x.shape, out.shape) else max_pool_grad_kernel
    _call(b, kernel, b.out(node), x, out, ct, p)


def _tiled(p: np.ndarray, x_shape: tuple, out_shape: tuple) -> bool:
    """Whether the pooling windows tile the input and lie inside it (with "same" padding the
    last window may reach into the bottom/right padding, which the tiled kernel must not read
    or write)."""
    ph, pw, sh, sw, pt, pl = (int(v) for v in p)
    return (ph == sh and pw == sw and pt == 0 and pl == 0 and out_shape[1] * sh <= x_shape[1]
            and out_shape[2] * sw <= x_shape[2])


@builder("avg_pool2d_grad")
def build_avg_pool_grad(b, node: Node) -> None:
    ct = b.contiguous(node.inputs[0])
    p = _pool_params(b, node, node.attrs["input_shape"])
    if avg_tiled.add_gradient(b, b.out(node), ct, p):
        return
    _call(b, avg_pool_grad_kernel, b.out(node), ct, p)
