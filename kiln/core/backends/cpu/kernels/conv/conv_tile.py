"""The glue between ``conv.py``'s builders and ``native_tile``'s kernels (AVX-512 hosts:
``target.current().tile_conv``; docs/architecture.md, "Register-tiled convolutions"): the
shared padded copy of an input, the tap offsets, the forward (with its bias / ReLU epilogue),
the kernel gradient and the dot kernels of convolutions into few channels. Each ``native_*``
function adds its steps and returns True, or adds nothing and returns False (the caller then takes
another path). The switches (``native_tile``, ``filter_chunk``, ``dot_max_out`` ...) are fields of
``options.CpuOptions``; their measurements stay in ``conv.py``, next to the choice of method.
"""

from __future__ import annotations

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.conv import conv, native_tile
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ir import Node
from kiln.core.ops.window import window2d


def padded(b, x_node: Node, x: np.ndarray, k: tuple[int, int], attrs: dict) -> np.ndarray:
    """``x`` in a zero-bordered buffer for the convolution's padding (``x`` itself when there
    is none), copied once per step for the readers of the same input and padding."""
    n, h, wd, ci = x.shape
    _, ((pt, pb), (pl, pr)) = window2d((h, wd), k, attrs["strides"], attrs["dilation"],
                                       attrs["padding"])
    if not (pt or pb or pl or pr):
        return x
    key = ("padded", id(x_node), pt, pb, pl, pr)
    found = b.cache.get(key)
    if found is None:
        found = aligned.zeros((n, h + pt + pb, wd + pl + pr, ci), x.dtype)
        inner = found[:, pt:pt + h, pl:pl + wd]
        # the borders stay zero: only the interior is written, split over kiln's threads
        # (NumPy's copy releases the GIL); the parts are sliced from the step's arguments, so
        # a fed input the plan binds in place of its buffer is the one copied
        workers.add_parts(b, np.copyto, (inner, x), n, sliced=(0, 1), label=f"{b.node.op}:pad")
        b.cache[key] = found
    return found


def tap_offsets(x: np.ndarray, geometry: tuple) -> tuple[list[int], list[int]]:
    """``native_tile``'s ``[xs_n, xs_i, xs_j]`` and ``off`` of the padded input ``x`` for
    ``geometry = (sh, sw, dh, dw, kh, kw)``."""
    sh, sw, dh, dw, kh, kw = geometry
    _, hp, wp, ci = x.shape
    off = [(a * dh * wp + bb * dw) * ci + c for a in range(kh) for bb in range(kw)
           for c in range(ci)]
    return [hp * wp * ci, sh * wp * ci, sw * ci], off


def native_forward(b, out: np.ndarray, x: np.ndarray, w2d: np.ndarray, geometry: tuple,
                    label: str | None = None, epilogue: tuple | None = None) -> bool:
    """Adds ``native_tile.forward_ir`` for ``out = conv(x (padded), w2d (taps, CO))``, with
    ``epilogue = (bias, relu)`` ``out = relu?(conv + bias)``; False where it cannot run (the
    caller runs the numba kernel)."""
    if not (target.current().tile_conv and options.current().native_tile
            and out.dtype == np.float32):
        return False
    co = out.shape[3]
    taps = w2d.shape[0]
    rows, vecs = native_tile.block_shape(16, co, width=out.shape[2])
    pads = []
    if vecs * 16 != co:
        wide = aligned.zeros((taps, vecs * 16), w2d.dtype)
        pads.append((wide[:, :co], w2d))
        w2d = wide
    arrays: tuple[np.ndarray, ...] = (out, x, w2d)
    relu = False
    if epilogue is not None:
        bias, relu = epilogue
        padded_bias = np.zeros(vecs * 16, np.float32)  # whole vectors: zeros past CO
        pads.append((padded_bias[:co], bias))
        arrays = (*arrays, padded_bias)
    strides, off = tap_offsets(x, geometry)
    step = strides[2]
    tag = ("b" + ("r" if relu else "")) if epilogue is not None else ""

    has_bias = epilogue is not None  # the IR's maker holds no arrays (the bias is one)

    def make(symbol: str, dtype: str) -> str:
        return native_tile.forward_ir(symbol, dtype, 16, rows, vecs, co, step, bias=has_bias,
                                      relu=relu)

    name = f"conv_tile_l16r{rows}v{vecs}c{co}s{step}{tag}"
    if native.try_kernel(f"{name} float32", arrays, [0] * (sum(a.ndim for a in arrays) + 6),
                         lambda s: make(s, "float32")) is None:
        return False
    for dst, src in pads:  # the kernel's zero-padded columns and bias, refreshed every step
        b.add(np.copyto, (dst, src), label=f"{b.node.op}:pad_kernel")
    return native_split(b, name, make, arrays, [*strides, taps], out.shape[0] * out.shape[1],
                        tail=off, label=label or f"{b.node.op}:conv_tile{tag and '_' + tag}")


def epilogue(b, *inputs: np.ndarray) -> tuple:
    """``(fused node, (bias, relu))`` where the kernel after the current node (a convolution,
    a Conv2DTranspose's input gradient, a Dense product) is a bias add (and ReLU) the node's
    kernel can apply as its epilogue (:func:`bias_relu`), its output not overlapping the
    node's ``inputs``, else ``(None, None)``."""
    fused = b.epilogue(b.node) if options.current().conv_epilogue else None
    epi = bias_relu(b, b.node, fused) if fused is not None else None
    target = b.epilogue_target(fused, b.node) if epi is not None else None
    if target is None or any(np.shares_memory(target, x) for x in inputs):
        return None, None
    return fused, epi


def bias_relu(b, node: Node, fused: Node) -> tuple | None:
    """``(bias, relu)`` where the fused node (or add) right after ``node`` computes
    ``relu(node + bias)`` (or ``node + bias``) with a float32 bias of one value per output
    channel, else None."""
    program: tuple[tuple, ...] = (fused.attrs["program"] if fused.op == "fused"
                                  else (("add", (-1, -2), ()),))
    node = b.epilogue_input(node, fused)  # node, or the view of it the fused node reads
    if node is None:
        return None
    shape = b.shape(node)
    if b.shape(fused) != shape or fused.dtype != "float32" or len(program) not in (1, 2):
        return None
    op, args, attrs = program[0]
    if op != "add" or attrs or any(a >= 0 for a in args):
        return None
    if len(program) == 2 and program[1] != ("relu", (0,), ()):
        return None
    ins = [fused.inputs[-a - 1] for a in args]
    if sum(i is node for i in ins) != 1:
        return None
    bias = next(i for i in ins if i is not node)
    bshape = b.shape(bias)
    if (bias.dtype != "float32" or not bshape or bshape[-1] != shape[-1]
            or any(d != 1 for d in bshape[:-1])):
        return None
    return b.contiguous(bias).reshape(-1), len(program) == 2


def native_filter(b, out: np.ndarray, x: np.ndarray, ct: np.ndarray, geometry: tuple) -> bool:
    """Adds ``native_tile.filter_ir`` for the kernel gradient ``out`` (kh, kw, CI, CO) of
    ``x`` (padded) and the cotangent ``ct``: chunks of output rows split over kiln's threads,
    one partial sum per thread, added in order; False where it cannot run."""
    if not (target.current().tile_conv and options.current().native_tile
            and out.dtype == np.float32):
        return False
    kh, kw, ci, co = out.shape
    taps = kh * kw * ci
    n, oh, ow, _ = ct.shape
    rows, vecs = native_tile.block_shape(16, co, taps)
    per = max(1, options.current().filter_chunk // ow)
    chunks = -(-(n * oh) // per)
    ranges = workers.split(chunks)
    strides, off = tap_offsets(x, geometry)
    flat = out.reshape(taps, co)
    parts = np.empty((len(ranges), taps, co), out.dtype) if len(ranges) > 1 else None

    tail = taps % rows

    def make(symbol: str, dtype: str) -> str:
        return native_tile.filter_ir(symbol, dtype, 16, rows, vecs, co, tail)

    label = f"{b.node.op}:filter_tile"
    if not native_split(b, f"conv_filter_tile_l16r{rows}v{vecs}c{co}t{tail}", make,
                        (flat if parts is None else parts[0], x, ct),
                        [*strides, taps, oh, ow, per], ranges=ranges, label=label,
                        parts=parts, tail=off):
        return False
    if parts is not None:
        b.add(np.add.reduce, (parts, 0, None, flat), label=f"{b.node.op}:sum_parts")
    return True


def few_outputs(kernel_shape: tuple, out: np.ndarray) -> bool:
    """A float32 convolution into at most ``dot_max_out`` channels from at least 8 (a Conv2D(1)
    output layer): native_tile's dot kernels, vectors over the input channels (AVX-512
    hosts, as the tiles)."""
    return (target.current().tile_conv and options.current().native_tile and out.dtype == np.float32
            and kernel_shape[3] <= options.current().dot_max_out and kernel_shape[2] >= 8)


def dot_geometry(x: np.ndarray, node: Node, k: tuple[int, int]) -> tuple[list[int], list[int]]:
    """``[xs_n, xs_i, xs_j]`` and the spatial taps' offsets ``off[ab]`` in the padded ``x``."""
    (sh, sw), (dh, dw) = node.attrs["strides"], node.attrs["dilation"]
    _, hp, wp, ci = x.shape
    off = [(a * dh * wp + bb * dw) * ci for a in range(k[0]) for bb in range(k[1])]
    return [hp * wp * ci, sh * wp * ci, sw * ci], off


def native_dot_forward(b, node: Node, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> bool:
    """Adds ``native_tile.dot_forward_ir`` for ``out = conv2d(x, w)``; False where it cannot
    run (nothing added then but the padded copy, which the other paths use too)."""
    kh, kw, ci, co = w.shape
    x = padded(b, node.inputs[0], x, (kh, kw), node.attrs)
    cvecs = -(-ci // 16)
    wt = aligned.zeros((co, kh * kw, cvecs * 16), np.float32)
    strides, off = dot_geometry(x, node, (kh, kw))
    ow = out.shape[2]
    rows = -(-ow // -(-ow // min(8, ow)))
    step = strides[2]

    def make(symbol: str, dtype: str) -> str:
        return native_tile.dot_forward_ir(symbol, dtype, 16, rows, cvecs, ci, co, step)

    if native.try_kernel(f"conv_dot_r{rows}v{cvecs}i{ci}o{co}s{step} float32",
                         (out, x, wt), [0] * 17, lambda s: make(s, "float32")) is None:
        return False
    b.add(np.copyto, (wt[:, :, :ci], w.transpose(3, 0, 1, 2).reshape(co, kh * kw, ci)),
          label=f"{node.op}:pad_kernel")
    return native_split(b, f"conv_dot_r{rows}v{cvecs}i{ci}o{co}s{step}", make, (out, x, wt),
                        [*strides, kh * kw], out.shape[0] * out.shape[1], tail=off,
                        label=f"{node.op}:conv_dot")


def native_dot_filter(b, node: Node, x: np.ndarray, ct: np.ndarray, out: np.ndarray) -> bool:
    """Adds ``native_tile.dot_filter_ir`` for the kernel gradient ``out`` (kh, kw, CI, CO):
    one partial sum per thread in the kernel's (KK, CO, C L) layout, added in order, then
    the input channels moved before the output channels."""
    kh, kw, ci, co = out.shape
    x = padded(b, node.inputs[0], x, (kh, kw), node.attrs)
    cvecs = -(-ci // 16)
    kk = kh * kw
    rows = max(1, min(kk, options.current().dot_accumulators // (co * cvecs)))
    tail = kk % rows
    n, oh, ow, _ = ct.shape
    per = max(1, options.current().filter_chunk // ow)
    ranges = workers.split(-(-(n * oh) // per))
    strides, off = dot_geometry(x, node, (kh, kw))
    total = aligned.empty((kk, co, cvecs * 16), np.float32)
    parts = np.empty((len(ranges), *total.shape), np.float32) if len(ranges) > 1 else None
    name = f"conv_dot_filter_r{rows}v{cvecs}i{ci}o{co}t{tail}"

    def make(symbol: str, dtype: str) -> str:
        return native_tile.dot_filter_ir(symbol, dtype, 16, rows, cvecs, ci, co, tail)

    if not native_split(b, name, make, (total if parts is None else parts[0], x, ct),
                        [*strides, kk, oh, ow, per], ranges=ranges, parts=parts, tail=off,
                        label=f"{node.op}:conv_dot_filter"):
        return False
    if parts is not None:
        b.add(np.add.reduce, (parts, 0, None, total), label=f"{node.op}:sum_parts")
    b.add(np.copyto, (out.reshape(kk, ci, co), total[:, :, :ci].transpose(0, 2, 1)),
          label=f"{node.op}:transpose")
    return True


def forward_tile(b, node: Node, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> bool:
    """The forward convolution through ``native_tile``'s register-tiled kernel (padding copies
    the input into a zero-bordered buffer first: small next to the convolution); False where
    it does not run (nothing added then but the padded copy)."""
    kh, kw, ci, co = w.shape
    (sh, sw), (dh, dw) = node.attrs["strides"], node.attrs["dilation"]
    x = padded(b, node.inputs[0], x, (kh, kw), node.attrs)
    w2d = w.reshape(kh * kw * ci, co)
    fused = b.epilogue(node) if options.current().conv_epilogue else None
    epi = bias_relu(b, node, fused) if fused is not None else None
    target = b.epilogue_target(fused, node) if epi is not None else None
    if target is not None and not (np.shares_memory(target, x)
                                   or np.shares_memory(target, w2d)):
        if native_forward(b, target, x, w2d, (sh, sw, dh, dw, kh, kw), epilogue=epi):
            b.absorb(fused)
            return True
    return native_forward(b, out, x, w2d, (sh, sw, dh, dw, kh, kw))


def input_as_forward(node: Node, w: np.ndarray, out: np.ndarray) -> bool:
    """Whether the input gradient runs as a forward convolution (``input_gradient_tile``): a
    float32 convolution with stride 1, dilation 1, 16 to 64 input channels and at most 8
    output channels (see ``input_as_forward``); on hosts with native_tile's kernels, any
    stride-1 convolution (any dilation) into at most 64 input channels: the 5x5 32 -> 64 and
    the dilated 3x3 64 -> 64 layers of benchmarks/bench_conv_shapes.py (16 x 16, batch 32),
    5.8 / 4.0 ms as a GEMM into an im2col-sized buffer + col2im -> 3.9 / 3.1 ms."""
    if not (options.current().input_as_forward and out.dtype == np.float32
            and tuple(node.attrs["strides"]) == (1, 1)):
        return False
    if (target.current().tile_conv and options.current().native_tile
            and w.shape[2] <= conv.tile_channels()):
        return True
    return (tuple(node.attrs["dilation"]) == (1, 1) and 16 <= w.shape[2] <= 64
            and w.shape[3] <= 8)


def input_gradient_tile(b, node: Node, ct: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """The input gradient of a stride-1 convolution as a forward one: dx is the
    correlation of the cotangent, zero-padded by ``(k - 1) d - pad`` on each side, with the
    kernel flipped in space and its channel axes swapped (the same dilation ``d``), run by
    the forward tiles (no im2col buffer of the size of the input times the taps, no col2im
    pass): ``native_tile``'s on AVX-512 hosts, else numba's ``conv.conv_tile64_kernel`` (the
    one convolution kernel without a native implementation)."""
    kh, kw, ci, co = w.shape
    dh, dw = node.attrs["dilation"]
    n, oh, ow, _ = ct.shape
    h, wd = node.attrs["input_shape"][:2]
    _, ((pt, pb), (pl, pr)) = window2d((h, wd), (kh, kw), (1, 1), (dh, dw),
                                       node.attrs["padding"])
    top, bottom = (kh - 1) * dh - pt, (kh - 1) * dh - pb
    left, right = (kw - 1) * dw - pl, (kw - 1) * dw - pr
    padded = aligned.zeros((n, oh + top + bottom, ow + left + right, co), ct.dtype)
    b.add(np.copyto, (padded[:, top:top + oh, left:left + ow], ct), label=f"{node.op}:pad")
    flip = aligned.empty((kh, kw, co, ci), w.dtype)
    b.add(np.copyto, (flip, w[::-1, ::-1].transpose(0, 1, 3, 2)), label=f"{node.op}:flip")
    if native_forward(b, out, padded, flip.reshape(kh * kw * co, ci), (1, 1, dh, dw, kh, kw)):
        return
    w64 = aligned.zeros((kh * kw * co, 64), w.dtype)
    b.add(np.copyto, (w64[:, :ci], flip.reshape(kh * kw * co, ci)), label=f"{node.op}:pad_kernel")
    conv.call_numba(b, conv.conv_tile64_kernel, out, padded, w64,
                    np.array([1, 1, dh, dw, kh, kw], np.int64), n=out.shape[0] * out.shape[1],
                    fastmath=True)
