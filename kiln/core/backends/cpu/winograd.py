"""Winograd convolutions F(m x m, 3 x 3) for float32 3x3 stride-1 convolutions on the CPU
(docs/architecture.md, "Winograd convolutions").

A 3x3 convolution computed by im2col + GEMM does ``9 * Cin * Cout`` multiplications per output
pixel; the Winograd form (Lavin and Gray, 2016) does ``alpha^2 / m^2`` times ``Cin * Cout``
(``alpha = m + 2``; 4 for m = 2, 2.25 for m = 4) as ``alpha^2`` independent GEMMs:

* forward: ``V = B^T d B`` per input tile (``native_winograd``, threads over images),
  ``U = G g G^T`` per step (NumPy, in float64), ``M[xi] = V[xi] @ U[xi]`` (one batched BLAS
  call), ``y = A^T M A`` per tile;
* input gradient: the same, as the forward convolution of the cotangent padded by
  ``2 - pad`` with the kernel flipped in space and its channel axes swapped;
* kernel gradient: ``Z = A dy A^T`` per cotangent tile, ``dU[xi] = V[xi]^T @ Z[xi]`` (the
  forward's V of the same input, computed once per step), ``dg = G^T dU G``.

The tile buffers hold ``alpha^2`` blocks spaced ``S`` floats apart (:func:`block_stride`): a
transform writes one row into each block per tile, and blocks a power of two apart would fall
in the same cache sets (16 streams at 2 MiB strides ran the input transform 3x slower).

Used where ``usable`` says so: float32, a 3x3 kernel, stride 1, dilation 1, no groups, at least
:data:`MIN_CHANNELS` input and output channels (fewer starve the GEMMs), and the native path
(``native.enabled()``); ``KILN_WINOGRAD=0`` turns it off, ``2`` or ``4`` picks m.
"""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kiln.core.backends.cpu import native, native_winograd, threads
from kiln.core.ir import Node

MIN_CHANNELS = 16
DEFAULT_M = 4


def tile_size() -> int:
    """m of F(m x m, 3 x 3) (``KILN_WINOGRAD``: 0 off, 2 or 4), 0 when off."""
    env = os.environ.get("KILN_WINOGRAD", "").strip()
    if not env:
        return DEFAULT_M
    if env not in ("0", "2", "4"):
        raise ValueError(f"KILN_WINOGRAD must be 0, 2 or 4, got {env!r}")
    return int(env)


def usable(attrs: dict, kernel_shape: tuple, dtype: np.dtype) -> bool:
    """Whether a convolution with ``attrs`` and an HWIO kernel of ``kernel_shape`` runs here."""
    kh, kw, ci, co = kernel_shape
    return (dtype == np.float32 and (kh, kw) == (3, 3) and tile_size() != 0
            and tuple(attrs["strides"]) == (1, 1) and tuple(attrs["dilation"]) == (1, 1)
            and attrs.get("groups", 1) == 1 and min(ci, co) >= MIN_CHANNELS
            and native.enabled())


def block_stride(tiles: int, channels: int) -> int:
    """Floats between two blocks of a tile buffer: at least ``tiles * channels``, and 320
    bytes past a multiple of 4 KiB, so the blocks' rows of one tile fall in distinct cache
    sets (320 = 5 lines: 64 blocks before two share a set)."""
    return -(-tiles * channels // 1024) * 1024 + 80


class Tiles:
    """A tile buffer: ``alpha^2`` blocks of ``tiles`` rows of ``channels`` floats."""

    def __init__(self, alpha: int, tiles: int, channels: int):
        self.stride = block_stride(tiles, channels)
        self.flat = np.empty(alpha * alpha * self.stride, np.float32)
        self.view = as_strided(self.flat, (alpha * alpha, tiles, channels),
                               (self.stride * 4, channels * 4, 4), writeable=True)


def _matrix(m: int, name: str) -> np.ndarray:
    return np.array([[float(Fraction(v)) for v in row]
                     for row in native_winograd.matrix(m, name)], np.float64)


def kernel_transform(w: np.ndarray, g: np.ndarray, out: np.ndarray) -> None:
    """``out[i, j] = sum_ab g[i, a] w[a, b] g[j, b]`` in float64 (``w`` (3, 3, ...))."""
    t = np.matmul(g, w.astype(np.float64).reshape(3, -1)).reshape(len(g), 3, -1)
    out.reshape(len(g), len(g), -1)[...] = np.matmul(g[None], t)


def kernel_untransform(du: np.ndarray, g: np.ndarray, out: np.ndarray) -> None:
    """``out[a, b] = sum_ij g[i, a] du[i, j] g[j, b]`` in float64 (the kernel gradient)."""
    alpha = len(g)
    t = np.matmul(g.T, du.astype(np.float64).reshape(alpha, -1)).reshape(3, alpha, -1)
    out.reshape(3, 3, -1)[...] = np.matmul(g.T[None], t)


def _transform(b, kind: str, m: int, arrays: tuple, params: list[int], n: int) -> None:
    from kiln.core.backends.cpu.conv import native_split

    def make(symbol: str, dtype: str) -> str:
        return native_winograd.transform_ir(symbol, dtype, m, kind)

    if not native_split(b, f"winograd_{kind}{m}", make, arrays, params, n):
        raise RuntimeError(f"{b.node.op}: the native Winograd {kind} transform did not build")


def _geometry(m: int, oh: int, ow: int) -> tuple[int, int]:
    return -(-oh // m), -(-ow // m)


def input_tiles(b, x: np.ndarray, key: object, m: int, out_hw: tuple[int, int],
                pads: tuple[int, int]) -> Tiles:
    """The input transform of ``x`` (N, H, W, C) for outputs of ``out_hw`` with the padding
    ``pads`` (top, left); shared by the readers of the same ``key`` in a step."""
    th, tw = _geometry(m, *out_hw)
    cache_key = ("winograd", key, m, out_hw, pads)
    found = b.cache.get(cache_key)
    if found is not None:
        return found
    n, c = x.shape[0], x.shape[3]
    tiles = Tiles(m + 2, n * th * tw, c)
    zeros = np.zeros(c, np.float32)
    _transform(b, "input", m, (tiles.flat, x, zeros), [th, tw, *pads, tiles.stride], n)
    b.cache[cache_key] = tiles
    return tiles


def convolve(b, x: np.ndarray, key: object, w: np.ndarray, out: np.ndarray,
             pads: tuple[int, int], flipped: bool = False) -> None:
    """``out = conv(x, w)`` (3x3, stride 1; ``pads`` top/left): the forward convolution, or
    with ``flipped`` the input gradient (``x`` the cotangent, ``w`` the forward's kernel)."""
    m = tile_size()
    alpha = m + 2
    n, oh, ow, co = out.shape
    v = input_tiles(b, x, key, m, (oh, ow), pads)
    g = _matrix(m, "G")
    ci = x.shape[3]
    u = np.empty((alpha, alpha, ci, co), np.float32)
    src = w[::-1, ::-1].transpose(0, 1, 3, 2) if flipped else w
    b.add(kernel_transform, (src, g, u), label=f"{b.node.op}:winograd_kernel")
    prod = Tiles(alpha, v.view.shape[1], co)
    b.add(threads.matmul, (v.view, u.reshape(alpha * alpha, ci, co), prod.view),
          label=f"{b.node.op}:winograd_gemm")
    th, tw = _geometry(m, oh, ow)
    _transform(b, "output", m, (out, prod.flat, np.empty(co, np.float32)),
               [th, tw, 0, 0, prod.stride], n)


def kernel_gradient(b, x: np.ndarray, key: object, ct: np.ndarray, out: np.ndarray,
                    pads: tuple[int, int]) -> None:
    """``out`` (3, 3, Cin, Cout) = the kernel gradient of ``conv(x, w)`` with cotangent ``ct``."""
    m = tile_size()
    alpha = m + 2
    n, oh, ow, co = ct.shape
    v = input_tiles(b, x, key, m, (oh, ow), pads)
    th, tw = _geometry(m, oh, ow)
    z = Tiles(alpha, v.view.shape[1], co)
    _transform(b, "gradient", m, (z.flat, ct, np.zeros(co, np.float32)),
               [th, tw, 0, 0, z.stride], n)
    ci = x.shape[3]
    du = np.empty((alpha * alpha, ci, co), np.float32)
    b.add(threads.matmul, (v.view.transpose(0, 2, 1), z.view, du),
          label=f"{b.node.op}:winograd_gemm")
    b.add(kernel_untransform, (du, _matrix(m, "G"), out), label=f"{b.node.op}:winograd_kernel")


def forward_pads(node: Node, hw: tuple[int, int]) -> tuple[int, int]:
    """(top, left) padding of the forward convolution ``node`` on an ``hw`` input."""
    from kiln.core.ops.window import window2d

    _, ((pt, _), (pl, _)) = window2d(hw, (3, 3), (1, 1), (1, 1), node.attrs["padding"])
    return pt, pl
