"""The three Winograd convolutions the builders call (``builders.py``): :func:`convolve`
(the forward), :func:`input_gradient` and :func:`kernel_gradient`, each pipelined over chunks
of images where that builds (``winograd_pipeline``), else stage by stage over the whole batch
(the transforms and products of ``winograd.py``), with the bias / ReLU after a forward as its
epilogue where there is one (``conv_tile.epilogue``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu.kernels.conv import (
    conv_tile,
    winograd,
    winograd_cache,
    winograd_pipeline,
)


def _pipelined(b, x: np.ndarray, w: np.ndarray, out: np.ndarray,
               run: Callable[[np.ndarray, tuple | None], bool]) -> bool:
    """Runs ``run(destination, epilogue)``, a pipelined forward of the current node reading
    ``x`` and ``w``: first into the output of the bias add (and ReLU) after it with that
    epilogue where there is one (``conv_tile.epilogue``: a convolution's, or a
    Conv2DTranspose's, which is an input gradient), absorbing it; else into ``out``. False
    where neither builds (nothing added)."""
    fused, epi = conv_tile.epilogue(b, x, w)
    if epi is not None and run(b.epilogue_target(fused, b.node), epi):
        b.absorb(fused)
        return True
    return run(out, None)


def convolve(b, x: np.ndarray, key: object, w: np.ndarray, out: np.ndarray,
             pads: tuple[int, int], stride: int = 1, m: int | None = None) -> None:
    """``out = conv(x, w)`` (``pads`` top/left), the forward convolution (stride-1 tiles of
    ``m``, default ``winograd.tile_size()``'s; so for the two gradients)."""
    n, oh, ow, co = out.shape
    ci = x.shape[3]
    kernel: tuple[Callable, tuple, np.ndarray]  # (transform, its arguments, its result)
    if stride == 1:
        geo = winograd._stride1(w.shape[0], (oh, ow), m)
        u = aligned.empty((geo.blocks, ci, co), np.float32)
        kernel = (geo.kernel_transform, (w, u), u)
    else:
        geo = winograd._stride2((oh, ow))
        u = aligned.empty((geo.blocks, 4 * ci, co), np.float32)
        kernel = (winograd._phases_transform, (geo, w, u, False), u)
    # weights the plan only reads (predict): transformed once per version (winograd_cache)
    kernel = (winograd_cache.once(b, b.node.inputs[1], w, kernel[0]), *kernel[1:])
    if _pipelined(b, x, w, out, lambda dst, epi: winograd_pipeline.forward(
            b, geo, x, key, pads, kernel, dst, stride, epilogue=epi)):
        return
    v = winograd.input_tiles(b, x, key, geo, pads, stride=stride)
    b.add(kernel[0], kernel[1], label=f"{b.node.op}:winograd_kernel")
    prod = winograd.Tiles(geo.blocks, v.view.shape[1], co)
    winograd.products(b, (v.flat, v.view), u, (prod.flat, prod.view))
    geo.transform(b, "output", (out, prod.flat, np.empty(co, np.float32)), (0, 0), prod, n)


def input_gradient(b, ct: np.ndarray, key: object, w: np.ndarray, out: np.ndarray,
                   pads: tuple[int, int], stride: int = 1, m: int | None = None) -> None:
    """``out`` (N, H, W, Cin) = the input gradient of the convolution with kernel ``w``,
    forward padding ``pads`` (top, left) and cotangent ``ct``: a convolution of ``ct`` with
    the kernel flipped in space and its channel axes swapped; with stride 2 one per phase of
    ``out``'s pixels, each writing every other row and column."""
    kh = w.shape[0]
    n, h, wd, ci = out.shape
    co = ct.shape[3]
    if stride == 1 and winograd_pipeline.adjoint(b, ct, w, out, pads, m):
        return
    if stride == 1:
        geo = winograd._stride1(kh, (h, wd), m)
        u = aligned.empty((geo.blocks, co, ci), np.float32)
        flipped = w[::-1, ::-1].transpose(0, 1, 3, 2)
        in_pads = (kh - 1 - pads[0], 2 - pads[1])
        kernel = (geo.kernel_transform, (flipped, u), u)
        if _pipelined(b, ct, w, out, lambda dst, epi: winograd_pipeline.forward(
                b, geo, ct, key, in_pads, kernel, dst, epilogue=epi)):
            return
        v = winograd.input_tiles(b, ct, key, geo, in_pads)
        b.add(geo.kernel_transform, (flipped, u), label=f"{b.node.op}:winograd_kernel")
        prod = winograd.Tiles(geo.blocks, v.view.shape[1], ci)
        winograd.products(b, (v.flat, v.view), u, (prod.flat, prod.view))
        geo.transform(b, "output", (out, prod.flat, np.empty(ci, np.float32)), (0, 0), prod, n)
        return
    # out row j = 2 J + v - pt takes ct rows J - 1 and J (phase v of the kernel's rows); the
    # tiles run over J from pt // 2 for every phase, so all four share ct's transform
    first = (pads[0] // 2, pads[1] // 2)
    last = ((h - 1 + pads[0]) // 2, (wd - 1 + pads[1]) // 2)
    geo = winograd._stride2((last[0] - first[0] + 1, last[1] - first[1] + 1))
    u = aligned.empty((geo.blocks, co, 4 * ci), np.float32)
    outputs = [((pads[0] - vr - 2 * first[0], pads[1] - vc - 2 * first[1]), 2,
                (4 * ci, k * ci)) for k, (vr, vc) in enumerate(winograd.PHASES)]
    if _pipelined(b, ct, w, out, lambda dst, epi: winograd_pipeline.forward(
            b, geo, ct, key, (1 - first[0], 1 - first[1]),
            (winograd._phases_transform, (geo, w, u, True), u), dst, outputs=outputs,
            epilogue=epi)):
        return
    v = winograd.input_tiles(b, ct, key, geo, (1 - first[0], 1 - first[1]))
    b.add(winograd._phases_transform, (geo, w, u, True), label=f"{b.node.op}:winograd_kernel")
    prod = winograd.Tiles(geo.blocks, v.view.shape[1], 4 * ci)
    winograd.products(b, (v.flat, v.view), u, (prod.flat, prod.view))
    sink = np.empty(ci, np.float32)
    for k, (vr, vc) in enumerate(winograd.PHASES):
        at = (pads[0] - vr - 2 * first[0], pads[1] - vc - 2 * first[1])
        geo.transform(b, "output", (out, prod.flat, sink), at, prod, n, step=2,
                      part=(4 * ci, k * ci))


def kernel_gradient(b, x: np.ndarray, key: object, ct: np.ndarray, out: np.ndarray,
                    pads: tuple[int, int], stride: int = 1, m: int | None = None) -> None:
    """``out`` (kh, kw, Cin, Cout) = the kernel gradient of ``conv(x, w)`` with cotangent
    ``ct``: ``G^T (V^T Z) G`` with the forward's input tiles ``V`` (per phase with stride 2)."""
    n, oh, ow, co = ct.shape
    geo = (winograd._stride1(out.shape[0], (oh, ow), m) if stride == 1
           else winograd._stride2((oh, ow)))
    if winograd_pipeline.kernel_gradient(b, geo, x, key, ct, out, pads, stride):
        return
    v = winograd.input_tiles(b, x, key, geo, pads, stride=stride)
    z = winograd.Tiles(geo.blocks, v.view.shape[1], co)
    geo.transform(b, "gradient", (z.flat, ct, np.zeros(co, np.float32)), (0, 0), z, n)
    du = aligned.empty((geo.blocks, v.view.shape[2], co), np.float32)
    winograd.products(b, (v.flat, v.view.transpose(0, 2, 1)), (z.flat, z.view), du)
    if stride == 1:
        b.add(geo.kernel_untransform, (du, out), label=f"{b.node.op}:winograd_kernel")
    else:
        b.add(winograd._phases_untransform, (geo, du, out), label=f"{b.node.op}:winograd_kernel")
