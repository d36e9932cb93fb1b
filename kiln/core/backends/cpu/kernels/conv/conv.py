"""Convolution settings and the split calls the convolution and pooling kernels share (NHWC,
TensorFlow padding, see kiln/core/ops/window.py).

Convolutions run one of three ways, picked per op, dtype and shape (``conv_method``):

* ``"direct"``: loops vectorized over output channels (``native_conv.conv_direct_ir``), for
  few input taps (``kh * kw * Cin`` small, e.g. the first layer on a grayscale image), where a
  GEMM would be starved (K = 9) and the im2col buffer would be as large as the output;
* ``"gemm"``: im2col (``native_conv.im2col_ir``) + one BLAS GEMM with ``out=``; the input
  gradient is a GEMM followed by col2im (scatter-add). The im2col buffer of an input is
  computed once per step and shared by the forward convolution and the kernel gradient that
  read the same input.
* ``"tile"`` (``target.current().tile_conv``: AVX-512 or AVX2 + FMA): a float32 forward
  convolution or kernel gradient with at most 64 output channels runs ``native_tile``'s
  register-blocked kernels, which read the (zero-padded) input in place
  (docs/architecture.md, "Register-tiled convolutions"); a convolution into at most 4
  channels from at least 8 runs its dot kernels
  (vectors over the input channels).

Grouped convolutions (``groups > 1``) run the kernels of ``native_groups.py`` /
``native_blocked.py`` (``conv_groups.py``). Before all of these, a float32 3x3 or 1x3
stride-1 convolution with 16 or more channels on each side runs as a Winograd convolution
(``winograd.py``: forward and both gradients, 4x / 2x fewer multiplications than im2col +
GEMM).

Each kernel has one implementation, its native (LLVM IR) kernel (docs/architecture.md, "One
implementation per kernel"); where the native path is off the builders run the op's NumPy
reference instead (``registry.reference_unless_native``). The one numba kernel left here,
``conv_tile64_kernel``, computes the input gradient of a stride-1 convolution as a forward
one on CPUs without AVX-512, where ``native_tile`` has no kernel.

Every kernel is serial over a range of its outer loop (``n0 <= n < n1``, the images or
output rows), split over kiln's threads by :func:`_call` (the images are independent; the
kernel gradient sums one partial per thread, :func:`_call_summed`). Pooling lives in
``kernels/pool/``; the ops' builders, which pick one of these ways per node, in
``builders.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import jit
from kiln.core.backends.cpu.kernels.conv import native_conv, native_groups
from kiln.core.backends.cpu.kernels.pool import native_pool
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ops.window import window2d

# A convolution with at most this many taps per output (kh * kw * Cin) runs direct loops
# (options.CpuOptions.conv_direct_max_taps).
# A float32 convolution with at most 64 output channels runs register tiles forward: no
# im2col buffer, tiles of output pixels x channels held in registers. MNIST convnet, batch 128
# (benchmarks/bench_conv.py, forward.tile against the others; numba's 4 x 64 tiles, since
# replaced by native_tile's): layer 1 1.9 against 2.5 ms direct; layer 2 2.9 against 4.1 ms
# im2col + register-tiled GEMM and 6.3 ms im2col + OpenBLAS (which packs the tall im2col
# matrix for only 64 columns).
# A 4 x 64 float32 accumulator tile fills 16 of the 32 AVX-512 registers; with AVX2 (16
# registers of 8 lanes) it needs 32 and spills, and the GEMM path wins: on an AVX2 host
# (no AVX-512), MNIST convnet epoch 0.85 s with the tiles against 0.61 s without (1,280
# samples, interleaved in one process), layer 2 forward 19.4 against 12.9 ms. So the tiles
# are used only where the CPU has AVX-512 (target.current().tile_conv: target.py, the one
# place the CPU's features are read).
# The forward and kernel-gradient tiles are native_tile's kernels (explicit vectors of 16
# lanes, blocks of R pixels or taps x the output channels' vectors, masked tails).
# options.CpuOptions.native_tile = False turns them off (then the direct loops or im2col +
# GEMM). filter_chunk: output pixels per chunk of the kernel gradient (their cotangent stays
# in cache across the tap blocks).
# A bias add and ReLU in the fused kernel right after a tiled forward convolution are its
# epilogue (PlanBuilder.epilogue): the convolution writes relu(conv + bias) and the separate
# pass over its output (a read and a write of the whole tensor) is gone (conv_epilogue).
# Convolutions into at most dot_max_out channels run native_tile's dot kernels (vectors over
# the input channels; conv_tile.few_outputs); their kernel gradient keeps at most
# dot_accumulators vectors of sums in registers.
# The input gradient of a float32 stride-1 convolution with few output channels (<= 8) and
# 16 to 64 input channels runs as a forward convolution through conv_tile64_kernel
# (conv_tile.input_gradient_tile) instead of a starved GEMM (N = Cout) into an im2col-sized
# buffer +
# col2im: a Conv2D(1) output layer on 28x28x32, batch 128, 71 -> 9 ms (AVX2 host); with 16
# or more output channels the GEMM wins (32 -> 16: 48 against 52 ms; 32 -> 32: 67 against 101).
# options.CpuOptions.input_as_forward.


def conv_method(taps: int, op: str = "conv2d", dtype: str = "float32",
                channels_out: int = 0) -> str:
    """``"tile"``, ``"direct"`` or ``"gemm"`` for ``op`` (conv2d, conv2d_backprop_filter or
    conv2d_backprop_input) with ``taps = kh * kw * Cin``, ``Cout = channels_out``.

    From benchmarks/bench_conv.py on 2 cores (MNIST layers, batch 128): the forward and kernel
    gradient of layer 1 (9 taps) run 2.1 / 1.9 ms direct against 3.5 / 4.1 ms with im2col +
    GEMM; layer 2 (288 taps) 5.1 / 6.4 ms with GEMM against 10.5 / 12.0 ms direct; the input
    gradient is faster as GEMM + col2im at both sizes (1.9 vs 6.2 ms on layer 1). ``"tile"``
    (``target.current().tile_conv``, ``native_tile``) beats both where it applies: a float32
    forward or kernel gradient with Cout <= 64 (native_tile's kernel gradient: 101-116 GFLOPS
    on one core for any number of taps; CIFAR's first layer, 27 taps -> 32 channels, batch 64,
    ran 0.8 + 5.1 ms as im2col + OpenBLAS's tall-skinny GEMM).
    """
    if op == "conv2d_backprop_input":
        return "gemm"
    if (target.current().tile_conv and options.current().native_tile and dtype == "float32"
            and channels_out <= tile_channels()):
        return "tile"
    return "direct" if taps <= options.current().conv_direct_max_taps else "gemm"


def tile_channels() -> int:
    """The most output channels the register tiles take: four vectors (64 with AVX-512, 32
    with AVX2's 8 lanes: 64 there leave one pixel of 8 accumulators a block, one kernel load
    per FMA; the dilated Conv1D's 64-channel layers trained 1.23x slower tiled, AVX2 via
    ``KILN_CPU=x86-64-v3``, benchmarks/bench_serving.py --modes tiles)."""
    return 4 * target.current().vector_lanes


# ---- kernels ------------------------------------------------------------------------------------
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


# ---- builders -----------------------------------------------------------------------------------
def _conv_params(hw: tuple[int, int], k: tuple[int, int], attrs: dict) -> tuple[int, int,
                                                                               np.ndarray]:
    (oh, ow), pads = window2d(hw, k, attrs["strides"], attrs["dilation"], attrs["padding"])
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    p = np.array([sh, sw, dh, dw, pads[0][0], pads[1][0]], np.int64)
    assert oh is not None and ow is not None  # a static image has a static output
    return oh, ow, p


def _call(b, name: str, *args, n: int | None = None, make: Callable | None = None) -> None:
    """Adds the native kernel ``name`` (its generator ``make``, else the table's:
    ``native_conv``, ``native_groups``, ``native_pool``) over ``args`` (arrays, then the int64
    parameters ``p``), whose outer loop runs over ``range(n0, n1)`` of ``n`` independent items
    (default: the images of the first argument): the range is split in one part per kernel
    thread, run at once on kiln's threads (docs/architecture.md, "Threads"). The builders
    call it only where the native path is on (:func:`registry.reference_unless_native`), so a
    kernel that does not build is an error naming it."""
    n = args[0].shape[0] if n is None else n
    _split(b, name, args, workers.split(n), None, make)


def _call_summed(b, name: str, out: np.ndarray, *args, n: int,
                 make: Callable | None = None) -> None:
    """Adds the native kernel ``name(out, *args, n0, n1)`` that sets ``out`` to a sum over the
    items ``n0 <= i < n1`` of ``n`` (a kernel gradient over the batch): with several threads
    each sums its part into its own buffer, then the parts are added in order (the same
    threads, the same bits). ``make``: as for :func:`_call`."""
    ranges = workers.split(n)
    if len(ranges) == 1:
        _call(b, name, out, *args, n=n, make=make)
        return
    parts = np.empty((len(ranges), *out.shape), out.dtype)
    _split(b, name, (parts[0], *args), ranges, parts, make)
    b.add(np.add.reduce, (parts, 0, None, out), label=f"{b.node.op}:sum_parts")


_KERNELS = {**native_conv.KERNELS, **native_groups.KERNELS, **native_pool.KERNELS}


def _split(b, name: str, args: tuple, ranges: list, parts: np.ndarray | None,
           make: Callable | None) -> None:
    make = make or _KERNELS[name]
    if not native_split(b, name, make, args[:-1], args[-1].tolist(), ranges=ranges,
                        label=f"{b.node.op}:{name}", parts=parts):
        raise RuntimeError(f"{b.node.op}: the native kernel {name} does not run for "
                           f"{[a.dtype.name for a in args[:-1]]} arrays of shapes "
                           f"{[a.shape for a in args[:-1]]}")


def call_numba(b, fn, *args, n: int, fastmath: bool = False) -> None:
    """Adds the numba kernel ``fn(*args, n0, n1)`` split like :func:`_call` (the one left here,
    ``conv_tile64_kernel``, has no native counterpart on CPUs without AVX-512)."""
    entry = jit.load_function(fn, fastmath=fastmath, noalias=True).specialize((*args, 0, 0))
    workers.add_parts(b, entry, (*args, 0, n), n, vary=lambda k, lo, hi: {-2: lo, -1: hi},
                      label=f"{b.node.op}:{fn.__name__}")
