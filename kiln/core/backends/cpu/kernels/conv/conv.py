"""Convolution and pooling kernels (NHWC, TensorFlow padding, see kiln/core/ops/window.py).

Convolutions run one of three ways, picked per op, dtype and shape (``conv_method``):

* ``"direct"``: numba loops vectorized over output channels, for few input taps
  (``kh * kw * Cin`` small, e.g. the first layer on a grayscale image), where a GEMM would be
  starved (K = 9) and the im2col buffer would be as large as the output;
* ``"gemm"``: im2col (a numba kernel) + one BLAS GEMM with ``out=``; the input gradient is a
  GEMM followed by col2im (scatter-add). The im2col buffer of an input is computed once per step
  and shared by the forward convolution and the kernel gradient that read the same input.

* ``"tile"`` (``target.current().tile_conv``: AVX-512 CPUs): a float32 forward convolution or
  kernel gradient with at most 64 output channels runs ``native_tile``'s register-blocked
  kernels, which read the (zero-padded) input in place (docs/architecture.md, "Register-tiled
  convolutions"); a convolution into at most 4 channels from at least 8 runs its dot kernels
  (vectors over the input channels). Where the native path is off, numba's tiles: the forward
  (``conv_tile64_kernel``) and, with exactly 64 output channels, the kernel gradient from the
  im2col buffer (``conv_filter_tn64_kernel``).

Grouped convolutions (``groups > 1``) run the direct kernels of ``conv_groups.py``. Before
all of these, a float32 3x3 or 1x3 stride-1 convolution with 16 or more channels on each side
runs as a Winograd convolution (``winograd.py``: forward and both gradients, 4x / 2x fewer
multiplications than im2col + GEMM).

Every kernel here is serial over a range of its outer loop (``n0 <= n < n1``, the images or
output rows), split over kiln's threads by :func:`_call` (the images are independent; the
kernel gradient sums one partial per thread, :func:`_call_summed`). numba ``parallel=True``
compiled them 2-3x slower for the same speed per thread (docs/architecture.md, "Threads").
Pooling lives in ``kernels/pool/``; the ops' builders, which pick one of these ways per node,
in ``builders.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core.backends.cpu import target
from kiln.core.backends.cpu.codegen import jit
from kiln.core.backends.cpu.kernels.conv import native_conv, native_groups
from kiln.core.backends.cpu.kernels.pool import native_pool
from kiln.core.backends.cpu.runtime import threads
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ops.window import window2d

# A convolution with at most this many taps per output (kh * kw * Cin) runs direct loops.
DIRECT_MAX_TAPS = 16
# A float32 convolution with at most 64 output channels runs conv_tile64_kernel forward: no
# im2col buffer, tiles of 4 output pixels x 64 channels held in registers (the kernel's columns
# zero-padded to 64; the literal width 64 is what numba vectorizes well: 32 runs 20x slower).
# MNIST convnet, batch 128 (benchmarks/bench_conv.py, forward.tile against the others): layer 1
# 1.9 against 2.5 ms direct; layer 2 2.9 against 4.1 ms im2col + register-tiled GEMM and
# 6.3 ms im2col + OpenBLAS (which packs the tall im2col matrix for only 64 columns).
# The same tiles compute the kernel gradient of a float32 convolution with exactly 64 output
# channels (conv_filter_tn64_kernel, from the im2col buffer; other widths stay with BLAS):
# MNIST convnet layer 2, whole training step 18.3-18.8 -> 17.4-17.6 ms (4 rounds interleaved
# in one process; OpenBLAS 3.9-4.7 ms for this GEMM).
# The 4 x 64 float32 accumulator tile fills 16 of the 32 AVX-512 registers; with AVX2 (16
# registers of 8 lanes) it needs 32 and spills, and the GEMM path wins: on an AVX2 host
# (no AVX-512), MNIST convnet epoch 0.85 s with the tiles against 0.61 s without (1,280
# samples, interleaved in one process), layer 2 forward 19.4 against 12.9 ms. So the tiles
# are used only where the CPU has AVX-512 (target.current().tile_conv: target.py, the one
# place the CPU's features are read).
# Where the tiles are on, the forward and kernel-gradient tiles run as native_tile's kernels
# (explicit vectors of 16 lanes, blocks of R pixels or taps x the output channels' vectors,
# masked tails; no numba) before the numba kernels below. FILTER_CHUNK: output pixels per
# chunk of the kernel gradient (their cotangent stays in cache across the tap blocks).
NATIVE_TILE = True
FILTER_CHUNK = 256
# A bias add and ReLU in the fused kernel right after a tiled forward convolution are its
# epilogue (PlanBuilder.epilogue): the convolution writes relu(conv + bias) and the separate
# pass over its output (a read and a write of the whole tensor) is gone.
EPILOGUE = True
# Convolutions into at most DOT_MAX_OUT channels run native_tile's dot kernels (vectors over
# the input channels; conv_tile.few_outputs); their kernel gradient keeps at most
# DOT_ACCUMULATORS
# vectors of sums in registers.
DOT_MAX_OUT = 4
DOT_ACCUMULATORS = 24
TN64_CHUNK = 256  # rows of the im2col buffer per block
# The input gradient of a float32 stride-1 convolution with few output channels (<= 8) and
# 16 to 64 input channels runs as a forward convolution through conv_tile64_kernel
# (conv_tile.input_gradient_tile) instead of a starved GEMM (N = Cout) into an im2col-sized
# buffer +
# col2im: a Conv2D(1) output layer on 28x28x32, batch 128, 71 -> 9 ms (AVX2 host); with 16
# or more output channels the GEMM wins (32 -> 16: 48 against 52 ms; 32 -> 32: 67 against 101).
INPUT_AS_FORWARD = True


def conv_method(taps: int, op: str = "conv2d", dtype: str = "float32",
                channels_out: int = 0, native_tiles: bool = True) -> str:
    """``"tile"``, ``"direct"`` or ``"gemm"`` for ``op`` (conv2d, conv2d_backprop_filter or
    conv2d_backprop_input) with ``taps = kh * kw * Cin``, ``Cout = channels_out``.

    From benchmarks/bench_conv.py on 2 cores (MNIST layers, batch 128): the forward and kernel
    gradient of layer 1 (9 taps) run 2.1 / 1.9 ms direct against 3.5 / 4.1 ms with im2col +
    GEMM; layer 2 (288 taps) 5.1 / 6.4 ms with GEMM against 10.5 / 12.0 ms direct; the input
    gradient is faster as GEMM + col2im at both sizes (1.9 vs 6.2 ms on layer 1). ``"tile"``
    (``target.current().tile_conv``) beats both where it applies: a float32 forward with Cout <=
    64, a float32 kernel gradient with Cout <= 64 (native_tile's kernel: 101-116 GFLOPS on one
    core for any number of taps; CIFAR's first layer, 27 taps -> 32 channels, batch 64, ran 0.8
    + 5.1 ms as im2col + OpenBLAS's tall-skinny GEMM) or, numba's conv_filter_tn64 (from the
    im2col buffer), exactly 64.
    """
    if op == "conv2d_backprop_input":
        return "gemm"
    tiled = target.current().tile_conv and dtype == "float32"
    if op == "conv2d" and tiled and channels_out <= 64:
        return "tile"
    if (op == "conv2d_backprop_filter" and tiled and NATIVE_TILE and native_tiles
            and channels_out <= 64):
        return "tile"  # native_tile's kernel gradient, any taps (below)
    if taps <= DIRECT_MAX_TAPS:
        return "direct"
    return "tile" if tiled and channels_out == 64 else "gemm"


# ---- kernels ------------------------------------------------------------------------------------
def im2col_kernel(cols, x, p, n0, n1):
    # x (N, H, W*C) -> cols (N, OH, OW, KH, KW*C) for the images n0 <= n < n1; p = [sh, sw,
    # dh, dw, pad_top, pad_left, C]. A window row inside the image (dilation 1 along W) is one
    # contiguous run of KW*C values, copied by one inner loop (explicit loops: numba compiles
    # a slice assignment in a serial function to a slower general copy).
    h, wc = x.shape[1], x.shape[2]
    oh, ow, kh, kwc = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4]
    sh, sw, dh, dw, pt, pl, c = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    w = wc // c
    kw = kwc // c
    for n in range(n0, n1):
        for i in range(oh):
            for j in range(ow):
                w0 = j * sw - pl
                for a in range(kh):
                    crow = cols[n, i, j, a]
                    row = i * sh - pt + a * dh
                    if row < 0 or row >= h:
                        for e in range(kwc):
                            crow[e] = 0
                        continue
                    xrow = x[n, row]
                    if dw == 1 and w0 >= 0 and w0 + kw <= w:
                        src = xrow[w0 * c:]
                        for e in range(kwc):
                            crow[e] = src[e]
                    else:
                        for b in range(kw):
                            wi = w0 + b * dw
                            dst = crow[b * c:]
                            if 0 <= wi < w:
                                src = xrow[wi * c:]
                                for e in range(c):
                                    dst[e] = src[e]
                            else:
                                for e in range(c):
                                    dst[e] = 0


def conv_tile64_kernel(out, x, w64, p, n0, n1):
    # out (N, OH, OW, CO <= 64) = valid convolution of x (N, H, W, CI) (already padded) with
    # w64 (KH * KW * CI, 64), the kernel with its columns zero-padded to 64; p = [sh, sw, dh,
    # dw, kh, kw], for the output rows n0 <= q < n1 (q = n * OH + i). Branch-free inner
    # loops: a tail tile past the row's end reads an in-bounds pixel and discards the result.
    wd, ci = x.shape[2], x.shape[3]
    oh, ow, co = out.shape[1], out.shape[2], out.shape[3]
    sh, sw, dh, dw, kh, kw = p[0], p[1], p[2], p[3], p[4], p[5]
    tiles = (ow + 3) // 4
    acc = np.empty((4, 64), out.dtype)
    for q in range(n0, n1):
        n = q // oh
        i = q % oh
        for tj in range(tiles):
            j0 = tj * 4
            for r in range(4):
                for o in range(64):
                    acc[r, o] = 0
            t = 0
            for a in range(kh):
                row = i * sh + a * dh
                for b in range(kw):
                    for c in range(ci):
                        for r in range(4):
                            av = x[n, row, min((j0 + r) * sw + b * dw, wd - 1), c]
                            for o in range(64):
                                acc[r, o] += av * w64[t, o]
                        t += 1
            for r in range(min(4, ow - j0)):
                for o in range(co):
                    out[n, i, j0 + r, o] = acc[r, o]


def conv_filter_tn64_kernel(c, a, b, chunk, n0, n1):
    # c (K, 64) = a[rows].T @ b[rows] over the `chunk`-row blocks n0 <= q < n1 of a (M, K), the
    # im2col buffer, and b (M, 64), the cotangent: the kernel gradient (or a part's share of
    # it). A block of b stays in cache while every 4-row tile of c, held in registers, passes
    # over it.
    m, kk = a.shape
    ntiles = kk // 4
    for k in range(kk):
        for j in range(64):
            c[k, j] = 0.0
    acc = np.empty((4, 64), c.dtype)
    for q in range(n0, n1):
        s0 = q * chunk
        s1 = min(m, s0 + chunk)
        for tt in range(ntiles):
            k0 = tt * 4
            for r in range(4):
                for j in range(64):
                    acc[r, j] = 0
            for i in range(s0, s1):
                for r in range(4):
                    av = a[i, k0 + r]
                    for j in range(64):
                        acc[r, j] += av * b[i, j]
            for r in range(4):
                for j in range(64):
                    c[k0 + r, j] += acc[r, j]
        for k in range(ntiles * 4, kk):
            for i in range(s0, s1):
                av = a[i, k]
                for j in range(64):
                    c[k, j] += av * b[i, j]


def col2im_kernel(dx, cols, p, n0, n1):
    # scatter-add cols (N, OH, OW, KH, KW, C) into dx (N, H, W, C), images n0 <= n < n1
    h, w, c = dx.shape[1], dx.shape[2], dx.shape[3]
    oh, ow, kh, kw = cols.shape[1], cols.shape[2], cols.shape[3], cols.shape[4]
    sh, sw, dh, dw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    for n in range(n0, n1):
        for r in range(h):
            for wi in range(w):
                for ch in range(c):
                    dx[n, r, wi, ch] = 0
        for i in range(oh):
            for j in range(ow):
                for a in range(kh):
                    r = i * sh - pt + a * dh
                    if r < 0 or r >= h:
                        continue
                    for b in range(kw):
                        wi = j * sw - pl + b * dw
                        if 0 <= wi < w:
                            for ch in range(c):
                                dx[n, r, wi, ch] += cols[n, i, j, a, b, ch]


def conv_direct_kernel(out, x, w, p, n0, n1):
    # out (N, OH, OW, CO) = sum over taps x (N, H, W, CI) * w (KH, KW, CI, CO), images
    # n0 <= n < n1; each output pixel's channels accumulate in place through a row view (with
    # the kernel's noalias arguments the inner loop vectorizes: 8.7 -> 6.8 ms on the MNIST
    # convnet's first layer, one thread, against 7.5 ms for the former prange kernel)
    h, wd, ci = x.shape[1], x.shape[2], x.shape[3]
    oh, ow, co = out.shape[1], out.shape[2], out.shape[3]
    kh, kw = w.shape[0], w.shape[1]
    sh, sw, dh, dw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    wf = w.reshape(kh * kw * ci, co)
    for n in range(n0, n1):
        for i in range(oh):
            for j in range(ow):
                orow = out[n, i, j]
                for o in range(co):
                    orow[o] = 0
                t = 0
                for a in range(kh):
                    r = i * sh - pt + a * dh
                    for b in range(kw):
                        wi = j * sw - pl + b * dw
                        if 0 <= r < h and 0 <= wi < wd:
                            for c in range(ci):
                                v = x[n, r, wi, c]
                                wrow = wf[t + c]
                                for o in range(co):
                                    orow[o] += v * wrow[o]
                        t += ci


def conv_filter_direct_kernel(dw_, x, ct, p, n0, n1):
    # dw_ (KH, KW, CI, CO) = sum over the pixels of the images n0 <= n < n1 of x * ct (the
    # kernel gradient, or a part's share of it)
    h, wd, ci = x.shape[1], x.shape[2], x.shape[3]
    oh, ow, co = ct.shape[1], ct.shape[2], ct.shape[3]
    kh, kw = dw_.shape[0], dw_.shape[1]
    sh, sw, dh, dw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    for a in range(kh):
        for b in range(kw):
            for c in range(ci):
                for o in range(co):
                    dw_[a, b, c, o] = 0
    df = dw_.reshape(kh * kw * ci, co)
    for n in range(n0, n1):
        for i in range(oh):
            for j in range(ow):
                crow = ct[n, i, j]
                t = 0
                for a in range(kh):
                    r = i * sh - pt + a * dh
                    for b in range(kw):
                        wi = j * sw - pl + b * dw
                        if 0 <= r < h and 0 <= wi < wd:
                            for c in range(ci):
                                v = x[n, r, wi, c]
                                drow = df[t + c]
                                for o in range(co):
                                    drow[o] += v * crow[o]
                        t += ci


def conv_input_direct_kernel(dx, ct, w, p, n0, n1):
    # dx (N, H, W, CI) = transpose of conv_direct in x, images n0 <= n < n1
    h, wd, ci = dx.shape[1], dx.shape[2], dx.shape[3]
    oh, ow, co = ct.shape[1], ct.shape[2], ct.shape[3]
    kh, kw = w.shape[0], w.shape[1]
    sh, sw, dh, dw, pt, pl = p[0], p[1], p[2], p[3], p[4], p[5]
    for n in range(n0, n1):
        for r in range(h):
            for wi in range(wd):
                for c in range(ci):
                    dx[n, r, wi, c] = 0
        for i in range(oh):
            for j in range(ow):
                for a in range(kh):
                    r = i * sh - pt + a * dh
                    if r < 0 or r >= h:
                        continue
                    for b in range(kw):
                        wi = j * sw - pl + b * dw
                        if wi < 0 or wi >= wd:
                            continue
                        for c in range(ci):
                            acc = dx[n, r, wi, c]
                            for o in range(co):
                                acc += ct[n, i, j, o] * w[a, b, c, o]
                            dx[n, r, wi, c] = acc


# ---- builders -----------------------------------------------------------------------------------
def _conv_params(hw: tuple[int, int], k: tuple[int, int], attrs: dict) -> tuple[int, int,
                                                                               np.ndarray]:
    (oh, ow), pads = window2d(hw, k, attrs["strides"], attrs["dilation"], attrs["padding"])
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    p = np.array([sh, sw, dh, dw, pads[0][0], pads[1][0]], np.int64)
    assert oh is not None and ow is not None  # a static image has a static output
    return oh, ow, p


def _twin(fn, twin: str | tuple | None) -> tuple[str, Callable | None]:
    """(name, generator or None: the registered twin's) of ``twin`` for the kernel ``fn``."""
    if isinstance(twin, tuple):
        return twin
    return twin or fn.__name__, None


def _call(b, fn, *args, n: int | None = None, fastmath: bool = False,
          twin: str | tuple | None = None) -> None:
    """Adds a call of the serial kernel ``fn(*args, lo, hi)``, whose outer loop runs over
    ``range(n0, n1)`` of ``n`` independent items (default: the images of the first argument):
    the range is split in one part per kernel thread, run at once on kiln's threads
    (``threads.SplitCall``; docs/architecture.md, "Threads"). ``twin``: the native kernel
    to run instead of ``fn``'s own twin (one computing the same bits for these arguments),
    by its name in the twins' table or as ``(name, make(symbol, dtype))``."""
    n = args[0].shape[0] if n is None else n
    ranges = threads.chunks(n, threads.kernel_threads())
    name, make = _twin(fn, twin)
    label = f"{b.node.op}:{name}"
    if _native_call(b, name, args, ranges, label, fastmath, make=make):
        return
    label = f"{b.node.op}:{fn.__name__}"
    entry = jit.load_function(fn, fastmath=fastmath, noalias=True).specialize((*args, 0, 0))
    if len(ranges) == 1:
        b.add(entry, (*args, 0, n), label=label)
        return
    b.add(threads.SplitCall(entry, len(ranges), lambda a, k: a[:-2] + ranges[k]),
          (*args, 0, n), label=label)


def _call_summed(b, fn, out: np.ndarray, *args, n: int, fastmath: bool = False,
                 twin: str | tuple | None = None) -> None:
    """Adds a call of the serial kernel ``fn(out, *args, n0, n1)`` that sets ``out`` to a sum
    over the items ``n0 <= i < n1`` of ``n`` (a kernel gradient over the batch): with several
    threads each sums its part into its own buffer, then the parts are added in order (the
    same threads, the same bits). ``twin``: as for :func:`_call`."""
    ranges = threads.chunks(n, threads.kernel_threads())
    if len(ranges) == 1:
        _call(b, fn, out, *args, n=n, fastmath=fastmath, twin=twin)
        return
    parts = np.empty((len(ranges), *out.shape), out.dtype)
    name, make = _twin(fn, twin)
    label = f"{b.node.op}:{name}"
    if not _native_call(b, name, (parts[0], *args), ranges, label, fastmath, parts,
                        make=make):
        label = f"{b.node.op}:{fn.__name__}"
        entry = jit.load_function(fn, fastmath=fastmath, noalias=True).specialize(
            (parts[0], *args, 0, 0))
        b.add(threads.SplitCall(entry, len(ranges),
                                lambda a, k: (parts[k], *a[1:-2], *ranges[k])),
              (parts[0], *args, 0, n), label=label)
    b.add(np.add.reduce, (parts, 0, None, out), label=f"{b.node.op}:sum_parts")


_TWINS = {**native_conv.TWINS, **native_groups.TWINS, **native_pool.TWINS}


def _native_call(b, name: str, args: tuple, ranges: list, label: str, fastmath: bool,
                 parts: np.ndarray | None = None, make: Callable | None = None) -> bool:
    """Adds the native twin of the kernel ``name`` (``native_conv``, ``native_groups``,
    ``native_pool``; ``make``: its generator, else the table's) split like :func:`_call`
    (into ``parts[k]`` per part when given); False when there is none, or it cannot run
    here."""
    make = make or _TWINS.get(name)
    if make is None or fastmath:
        return False
    return native_split(b, name, make, args[:-1], args[-1].tolist(), ranges=ranges,
                        label=label, parts=parts)
