"""The input gradient of a stride-1 convolution into few input channels (issue 47: LeNet-5's
second layer, 6 -> 16 channels, 5x5: its input gradient is a convolution from 16 channels
into 6) through ``native_tile``'s dot kernel, whose vectors run over the cotangent's channels
(16 of them: every lane useful), instead of the register tiles, whose vectors run over the
output channels (6 of 16 lanes useful).

As ``conv_tile.input_gradient_tile``: dx is the correlation of the cotangent, zero-padded by
``(k - 1) d - pad`` on each side, with the kernel flipped in space and its channel axes
swapped; here laid out as the dot kernel reads it, ``(CI, taps, CO padded to 16 lanes)``.

The rule (shapes only, not the host's speed): float32, stride 1, at most
``direct_small_max_input_channels`` (options.CpuOptions) input channels (the dot kernel
keeps one accumulator per input channel and pixel of a block, blocks of at least 2 pixels)
and at least ``direct_small_min_output_channels`` output channels (the vectors' lanes), on
hosts with the tiles' kernels (``target.current().tile_conv``).
"""

from __future__ import annotations

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.codegen.ir_kernel import _div, _Kernel
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.kernels.conv.native_tile import _check, _no_unroll, _Vec
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ir import Node
from kiln.core.ops.window import window2d

# the switch and the channel bounds: options.CpuOptions.direct_small*
LANES = 16


def takes_input_gradient(node: Node, w: np.ndarray, out: np.ndarray) -> bool:
    """Whether :func:`input_gradient` takes the input gradient ``out`` of ``node`` (the rule
    of the module docstring)."""
    kh, kw, ci, co = w.shape
    opts = options.current()
    return (opts.direct_small and opts.native_tile and target.current().tile_conv
            and native.enabled() and out.dtype == np.float32 and w.dtype == np.float32
            and tuple(node.attrs["strides"]) == (1, 1)
            and ci <= opts.direct_small_max_input_channels
            and co >= opts.direct_small_min_output_channels
            and (ci + 1) * -(-co // LANES) * 2 + 1 <= REGISTERS)  # blocks of 2+ pixels


def input_gradient(b, node: Node, ct: np.ndarray, w: np.ndarray, out: np.ndarray) -> bool:
    """Adds the input gradient ``out`` (N, H, W, CI) of the convolution ``node`` with kernel
    ``w`` (kh, kw, CI, CO) from the cotangent ``ct`` (N, OH, OW, CO); False (nothing added)
    where the dot kernel does not build here."""
    kh, kw, ci, co = w.shape
    dh, dw = node.attrs["dilation"]
    n, oh, ow, _ = ct.shape
    h, wd = node.attrs["input_shape"][:2]
    _, ((pt, pb), (pl, pr)) = window2d((h, wd), (kh, kw), (1, 1), (dh, dw),
                                       node.attrs["padding"])
    top, bottom = (kh - 1) * dh - pt, (kh - 1) * dh - pb
    left, right = (kw - 1) * dw - pl, (kw - 1) * dw - pr
    if min(top, bottom, left, right) < 0:
        return False
    hp, wp = oh + top + bottom, ow + left + right
    padded = aligned.zeros((n, hp, wp, co), np.float32)
    cvecs = -(-co // LANES)
    kk = kh * kw
    wt = aligned.zeros((ci, kk, cvecs * LANES), np.float32)
    rows = block_rows(wd, ci, cvecs)
    strides = [hp * wp * co, wp * co, co]
    off = [(a * dh * wp + bb * dw) * co for a in range(kh) for bb in range(kw)]
    name = f"conv_dots_r{rows}v{cvecs}i{co}o{ci}s{co}"

    def make(symbol: str, dtype: str) -> str:
        return dots_ir(symbol, dtype, LANES, rows, cvecs, co, ci, co)

    if native.try_kernel(f"{name} float32", (out, padded, wt), [0] * 17,
                         lambda s: make(s, "float32")) is None:
        return False
    b.add(np.copyto, (padded[:, top:top + oh, left:left + ow], ct), label=f"{node.op}:pad")
    # wt[c, (a, b), o] = w[kh - 1 - a, kw - 1 - b, c, o]
    b.add(np.copyto, (wt[:, :, :co], w[::-1, ::-1].transpose(2, 0, 1, 3).reshape(ci, kk, co)),
          label=f"{node.op}:flip")
    return native_split(b, name, make, (out, padded, wt), [*strides, kk], n * h, tail=off,
                        label=f"{node.op}:conv_dots")


# zmm registers the block may hold: accumulators, the pixels' input vectors, a kernel vector
REGISTERS = 30


def block_rows(width: int, co: int, cvecs: int) -> int:
    """Pixels per block ``R`` of :func:`dots_ir`: its ``co R cvecs`` accumulators, ``R
    cvecs`` input vectors and a kernel vector in :data:`REGISTERS` registers, at most 8 and
    at most the row's ``width``."""
    fit = (REGISTERS - 1) // ((co + 1) * cvecs)
    return max(1, min(8, width, fit))


def dots_ir(symbol: str, dtype: str, lanes: int, rows: int, cvecs: int, ci: int, co: int,
            step: int) -> str:
    """``(out (N, OH, OW, CO), x (N, H, W, CI) padded, w (CO, KK, C L), p)`` with ``p`` as
    ``native_tile.dot_forward_ir``'s (``[shapes..., xs_n, xs_i, xs_j, KK, q0, q1, off...]``):
    blocks of ``R`` pixels of an output row (the last ending at the row's end); per tap, each
    pixel's input vectors are loaded once and multiplied into the accumulators of all ``CO``
    output channels (``dot_forward_ir`` loads them once per output channel: load-bound), then
    each accumulator is summed across its lanes."""
    _check(dtype, "conv dots (few outputs)")
    k = _Kernel((4, 4, 3), 4)
    f = k.f
    vx = _Vec(f, lanes, cvecs, ci)
    oh, ow = k.dims[0][1], k.dims[0][2]
    xs_n, xs_i, xs_j, kk = k.p
    first_off = str(11 + 4 + 2)
    cp = cvecs * lanes
    red = f"@llvm.vector.reduce.fadd.v{lanes}f32"
    f.declare.add(f"declare float {red}(float, {vx.ty})")
    f.declare.add("declare i64 @llvm.smin.i64(i64, i64)")
    q, lq = f.begin(k.n1, k.n0)
    n, i = _div(f, q, oh), f.tmp()
    f.emit(f"{i} = srem i64 {q}, {oh}")
    xrow = f.add(f.mul(n, xs_n), f.mul(i, xs_i))
    jb, lj = f.begin(_div(f, f.add(ow, str(rows - 1)), str(rows)))
    j0 = f.tmp()
    f.emit(f"{j0} = call i64 @llvm.smin.i64(i64 {f.mul(jb, str(rows))}, i64 "
           f"{k.sub(ow, str(rows))})")
    first = f.add(xrow, f.mul(j0, xs_j))
    accs = vx.accumulators(co * rows)  # [o * R + e][c]
    for row in accs:
        for name in row:
            f.emit(f"store {vx.ty} zeroinitializer, ptr {name}")
    t, lt = f.begin(kk)
    base = f.add(first, f.load("%p", "int64", f.add(first_off, t)).ref)
    for c in range(cvecs):
        xvs = [vx.load("%x", f.add(base, str(e * step)), c) for e in range(rows)]
        for o in range(co):
            wv = vx.load("%w", f.mul(f.add(f.mul(str(o), kk), t), str(cp)), c, masked=False)
            for e in range(rows):
                vx.fma_into(accs[o * rows + e][c], xvs[e], wv)
    f.end(t, lt)
    for o in range(co):
        for e in range(rows):
            total = None
            for c in range(cvecs):
                v = f.tmp()
                f.emit(f"{v} = load {vx.ty}, ptr {accs[o * rows + e][c]}")
                if total is not None:
                    y = f.tmp()
                    f.emit(f"{y} = fadd {vx.ty} {total}, {v}")
                    v = y
                total = v
            s = f.tmp()
            f.emit(f"{s} = call reassoc float {red}(float 0.0, {vx.ty} {total})")
            at = f.add(f.mul(f.add(f.mul(q, ow), f.add(j0, str(e))), str(co)), str(o))
            f.store("%out", "float32", at, Val(s, "f32"))
    f.end(jb, lj)
    f.end(q, lq)
    return _no_unroll(f.function(symbol, ["out", "x", "w", "p"], noalias=True), [lt])
