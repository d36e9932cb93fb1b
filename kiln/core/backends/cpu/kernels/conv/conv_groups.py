"""Grouped convolutions (the ``groups`` attribute of conv2d and its two gradients, see
kiln/core/ops/conv.py): the native kernels of ``native_groups.py`` (direct loops over the taps,
vectorized over the output channels of each group; depthwise: over the channels of each tap)
and ``native_blocked.py`` (float32, the sums in registers), the images split over kiln's
threads (``conv._call``). The input gradient runs as grouped forwards of the cotangent where
it can (stride 1: :func:`_input_as_forward`; strides: :func:`_input_by_phases`).

They use no im2col or GEMM, so a grouped convolution with many taps per group runs slower than
an ungrouped one of the same size. The builders in ``builders.py`` hand every node with
``groups > 1`` to :func:`build_grouped` (native path on; else the op's NumPy reference).
"""

from __future__ import annotations

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu.kernels.conv import native_blocked, native_groups
from kiln.core.backends.cpu.kernels.conv.conv import _call, _call_summed, _conv_params
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.ir import Node
from kiln.core.ops.window import window2d


def build_grouped(b, node: Node) -> None:
    """Adds the kernel call of a conv2d, conv2d_backprop_input or conv2d_backprop_filter node
    with ``groups > 1``."""
    groups = node.attrs["groups"]
    first, second = (b.contiguous(i) for i in node.inputs)
    out = b.out(node)
    # The native kernels (native_groups.py) ran as fast as the numba kernels they replaced or
    # faster: 64 channels, 32x32, batch 32, 3x3, AVX2 host, native / numba time per kernel
    # (forward, kernel gradient, input gradient): depthwise 1.02 / 0.91 / 0.37, 2 channels
    # per group 0.67 / 0.71 / 0.57, 16 per group 0.21 / 0.22 / 0.75.
    # Depthwise, the kernel (kh, kw, 1, C) with C == groups: native_groups.depthwise_ir, whose
    # loops run over the channels of each tap, vectorized (the grouped loops run one channel
    # per group: a scalar inner loop of one element). 64 channels, 16 x 16, batch 32, 3x3, 2
    # threads (benchmarks/bench_conv_shapes.py's dw case through Function calls): forward 9.6
    # -> 2.3 ms, input gradient 9.5 -> 1.6 ms, kernel gradient 7.6 -> 0.8 ms.
    kernel_shape = second.shape if node.op != "conv2d_backprop_filter" else out.shape
    depthwise = kernel_shape[2] == 1 and kernel_shape[3] == groups

    def kernel_of(kind: str, cig: int, cog: int) -> tuple:
        """``(name, make or None)`` of the native kernel ``kind`` ("", "_filter", "_input")
        for ``cig`` input and ``cog`` output channels per group (of the convolution it
        computes); None: ``conv._call``'s table's generator."""
        if depthwise:
            return f"conv_depthwise{kind}_kernel", None
        # the output channels of a group as a constant: the loop over them compiles to
        # whole vectors (bench_conv_shapes.py's g4, 16 per group, with a run-time trip count:
        # forward 8.4 -> 2.3 ms, kernel gradient 9.6 -> 2.9-3.5 ms)
        make = getattr(native_groups, f"conv_grouped{kind}_ir")
        blocked = {"": native_blocked.conv_grouped_blocked_ir,
                   "_filter": native_blocked.conv_grouped_filter_blocked_ir}.get(kind)
        if blocked and native_blocked.grouped_filter_lanes(cog):
            # float32 with the sums in registers (g4, 16 per group, batch 32: forward 2.3 ->
            # 1.0-1.2 ms, kernel gradient 2.0 -> 0.9-1.1 ms; docs/architecture.md)
            return (f"conv_grouped{kind}_kernel_g{cog}_c{cig}",
                    lambda s, dt: blocked(s, dt, cig, cog) if dt == "float32"
                    else make(s, dt, cog))
        return (f"conv_grouped{kind}_kernel_g{cog}", lambda s, dt: make(s, dt, cog))

    cog = kernel_shape[3] // groups
    if node.op == "conv2d":
        _, _, p = _conv_params(first.shape[1:3], second.shape[:2], node.attrs)
        _grouped_call(b, kernel_of("", kernel_shape[2], cog), out, first, second,
                      np.append(p, groups))
    elif node.op == "conv2d_backprop_input":
        if not depthwise and tuple(node.attrs["strides"]) == (1, 1):
            _input_as_forward(b, node, first, second, out, groups,
                              kernel_of("", cog, kernel_shape[2]))
            return
        if not depthwise and tuple(node.attrs["dilation"]) == (1, 1):
            _input_by_phases(b, node, first, second, out, groups,
                             kernel_of("", cog, kernel_shape[2]))
            return
        _, _, p = _conv_params(node.attrs["input_shape"][:2], second.shape[:2], node.attrs)
        _grouped_call(b, kernel_of("_input", kernel_shape[2], cog), out, first, second,
                      np.append(p, groups))
    else:
        _, _, p = _conv_params(first.shape[1:3], node.attrs["kernel_size"], node.attrs)
        name, make = kernel_of("_filter", kernel_shape[2], cog)
        _call_summed(b, name, out, first, second, np.append(p, groups), n=first.shape[0],
                     make=make)


def _grouped_call(b, kernel: tuple, *args) -> None:
    """``conv._call`` of the native kernel ``kernel = (name, make)``."""
    _call(b, kernel[0], *args, make=kernel[1])


def _input_as_forward(b, node: Node, ct: np.ndarray, w: np.ndarray, out: np.ndarray,
                      groups: int, kernel: tuple) -> None:
    """The input gradient of a grouped stride-1 convolution as the grouped forward of the
    cotangent (padded by ``(k - 1) d - pad``: the forward's bounds checks) with each group's
    kernel flipped in space and its channel axes swapped, (kh, kw, Cout/g, Cin): its sums run
    over the group's output channels as the forward's do over input channels, vectorized over
    the outputs, where the grouped input-gradient kernel sums each input element's products in
    one scalar chain (16 channels per group: 16.9 -> 2.4 ms; bench_conv_shapes.py's g4)."""
    kh, kw, cig, co = w.shape
    cog = co // groups
    (dh, dw) = node.attrs["dilation"]
    h, wd = node.attrs["input_shape"][:2]
    _, ((pt, _), (pl, _)) = window2d((h, wd), (kh, kw), (1, 1), (dh, dw),
                                     node.attrs["padding"])
    flipped = np.empty((kh, kw, cog, groups * cig), w.dtype)
    b.add(_flip_groups, (w, flipped, groups), label=f"{node.op}:flip")
    p = np.array([1, 1, dh, dw, (kh - 1) * dh - pt, (kw - 1) * dw - pl, groups], np.int64)
    _grouped_call(b, kernel, out, ct, flipped, p)


def _phase(size: int, k: int, s: int, pad: int, r: int) -> tuple[int, int, int]:
    """One axis of phase ``r`` of a stride-``s`` input gradient: ``(taps, first, count)``.
    The input positions ``i`` with ``(i + pad) % s == r`` take the taps ``r, r + s, ...`` of
    the kernel (``taps`` of them) and the cotangent positions ``q - j`` (``j < taps``) with
    ``q = (i + pad - r) / s``: ``first`` is the smallest such ``q`` of an ``i >= 0``, ``count``
    how many ``i < size`` there are."""
    taps = len(range(r, k, s))
    first = -((r - pad) // s)
    last = (size - 1 + pad - r) // s
    return taps, first, max(0, last - first + 1)


def _input_by_phases(b, node: Node, ct: np.ndarray, w: np.ndarray, out: np.ndarray,
                     groups: int, kernel: tuple) -> None:
    """The input gradient of a grouped convolution with strides (dilation 1) as one stride-1
    grouped forward per phase (``s_h * s_w`` of them, :func:`_phase`): each phase's input
    positions take every ``s``-th tap of the kernel, so the phase is the forward of the
    cotangent with that sub-kernel flipped (as in :func:`_input_as_forward`), written to a
    scratch image and copied to its rows and columns of ``out``. The same multiply-adds as the
    grouped input-gradient kernel's (which adds each input element's products in one chain,
    skipping the taps outside the image), in another order: 16 channels per group, 56 x 56 x
    64, stride 2, batch 32: 51 -> 10.9 ms (docs/architecture.md, "Native loops")."""
    kh, kw, cig, co = w.shape
    cog = co // groups
    (sh, sw) = node.attrs["strides"]
    h, wd = node.attrs["input_shape"][:2]
    _, ((pt, _), (pl, _)) = window2d((h, wd), (kh, kw), (sh, sw), (1, 1),
                                     node.attrs["padding"])
    n = ct.shape[0]
    for rh in range(sh):
        th, qh, nh = _phase(h, kh, sh, pt, rh)
        for rw in range(sw):
            tw, qw, nw = _phase(wd, kw, sw, pl, rw)
            if nh == 0 or nw == 0:
                continue
            rows = slice(qh * sh + rh - pt, None, sh)
            cols = slice(qw * sw + rw - pl, None, sw)
            target = out[:, rows, cols][:, :nh, :nw]
            if th == 0 or tw == 0:  # no tap reaches these positions
                b.add(np.copyto, (target, np.zeros((), out.dtype)),
                      label=f"{node.op}:phase_zeros")
                continue
            flipped = np.empty((th, tw, cog, groups * cig), w.dtype)
            b.add(_flip_groups, (w[rh::sh, rw::sw], flipped, groups),
                  label=f"{node.op}:phase_flip")
            scratch = aligned.empty((n, nh, nw, groups * cig), out.dtype)
            p = np.array([1, 1, 1, 1, th - 1 - qh, tw - 1 - qw, groups], np.int64)
            _grouped_call(b, kernel, scratch, ct, flipped, p)
            b.add(_scatter, (target, scratch), label=f"{node.op}:phase_scatter")


def _scatter(target: np.ndarray, scratch: np.ndarray) -> None:
    """``target[...] = scratch`` (a phase's rows and columns of the input gradient), the images
    split over kiln's threads (one strided copy: 0.8 ms for 6.4 MB on one thread)."""
    parts = workers.split(target.shape[0])
    if len(parts) == 1:
        np.copyto(target, scratch)
        return
    workers.run_parts([(np.copyto, (target[lo:hi], scratch[lo:hi])) for lo, hi in parts])


def _flip_groups(w: np.ndarray, out: np.ndarray, groups: int) -> None:
    """``out[a, b, o, g * cig + c] = w[kh - 1 - a, kw - 1 - b, c, g * cog + o]``."""
    kh, kw, cig, co = w.shape
    cog = co // groups
    src = w[::-1, ::-1].reshape(kh, kw, cig, groups, cog)
    out.reshape(kh, kw, cog, groups, cig)[...] = src.transpose(0, 1, 4, 3, 2)
