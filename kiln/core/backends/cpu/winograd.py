"""Winograd convolutions F(m x m, 3 x 3) (and F(1 x m, 1 x 3) for 1x3 kernels: Conv1D) for
float32 stride-1 convolutions on the CPU (docs/architecture.md, "Winograd convolutions").

A 3x3 convolution computed by im2col + GEMM does ``9 * Cin * Cout`` multiplications per output
pixel; the Winograd form (Lavin and Gray, 2016) does ``alpha^2 / m^2`` times ``Cin * Cout``
(``alpha = m + 2``; 4 for m = 2, 2.25 for m = 4; a 1x3 kernel: 3 against 1.5) as
``alpha^2`` (``alpha``) independent GEMMs:

* forward: ``V = B^T d B`` per input tile (``native_winograd``, threads over images),
  ``U = G g G^T`` per step (NumPy, in float64), ``M[xi] = V[xi] @ U[xi]`` (one batched BLAS
  call), ``y = A^T M A`` per tile;
* input gradient: the same, as the forward convolution of the cotangent padded by
  ``k - 1 - pad`` with the kernel flipped in space and its channel axes swapped;
* kernel gradient: ``Z = A dy A^T`` per cotangent tile, ``dU[xi] = V[xi]^T @ Z[xi]`` (the
  forward's V of the same input, computed once per step), ``dg = G^T dU G``.

The tile buffers hold their blocks spaced ``S`` floats apart (:func:`block_stride`): a
transform writes one row into each block per tile, and blocks a power of two apart would fall
in the same cache sets (16 streams at 2 MiB strides ran the input transform 3x slower).

Used where ``usable`` says so: float32, a 3x3 or 1x3 kernel, stride 1, dilation 1, no groups,
at least :data:`MIN_CHANNELS` input and output channels (fewer starve the GEMMs), and the
native path (``native.enabled()``); ``KILN_WINOGRAD=0`` turns it off, ``2`` or ``4`` picks m.
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
KERNELS = ((3, 3), (1, 3))


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
    return (dtype == np.float32 and (kh, kw) in KERNELS and tile_size() != 0
            and tuple(attrs["strides"]) == (1, 1) and tuple(attrs["dilation"]) == (1, 1)
            and attrs.get("groups", 1) == 1 and min(ci, co) >= MIN_CHANNELS
            and native.enabled())


def block_stride(tiles: int, channels: int) -> int:
    """Floats between two blocks of a tile buffer: at least ``tiles * channels``, and 320
    bytes past a multiple of 4 KiB, so the blocks' rows of one tile fall in distinct cache
    sets (320 = 5 lines: 64 blocks before two share a set)."""
    return -(-tiles * channels // 1024) * 1024 + 80


class Tiles:
    """A tile buffer: ``blocks`` blocks of ``tiles`` rows of ``channels`` floats."""

    def __init__(self, blocks: int, tiles: int, channels: int):
        self.stride = block_stride(tiles, channels)
        self.flat = np.empty(blocks * self.stride, np.float32)
        self.view = as_strided(self.flat, (blocks, tiles, channels),
                               (self.stride * 4, channels * 4, 4), writeable=True)


class Geometry:
    """F(m_h x m, kh x 3) for a kernel of ``kh`` rows (3, or 1: one-row tiles) over an
    ``out_hw`` output: tile counts, the kernel transform matrices (float64)."""

    def __init__(self, kh: int, out_hw: tuple[int, int]):
        self.m = m = tile_size()
        self.kh = kh
        self.m_h = m if kh == 3 else 1
        self.blocks = (m + 2) * (m + 2 if kh == 3 else 1)
        self.th, self.tw = -(-out_hw[0] // self.m_h), -(-out_hw[1] // m)
        self.g = _matrix(m, "G")
        self.g_rows = self.g if kh == 3 else np.ones((1, 1))

    def transform(self, b, kind: str, arrays: tuple, pads: tuple[int, int], stride: int,
                  n: int) -> None:
        """Adds the native ``kind`` transform over the images, split over threads."""
        from kiln.core.backends.cpu.conv import native_split

        m, rows = self.m, self.kh

        def make(symbol: str, dtype: str) -> str:
            return native_winograd.transform_ir(symbol, dtype, m, kind, rows)

        if not native_split(b, f"winograd_{kind}{m}x{rows}", make, arrays,
                            [self.th, self.tw, *pads, stride], n):
            raise RuntimeError(f"{b.node.op}: the native Winograd {kind} transform did not "
                               "build")

    def kernel_transform(self, w: np.ndarray, out: np.ndarray) -> None:
        """``out[i, j] = sum_ab g_rows[i, a] w[a, b] g[j, b]`` in float64 (``w`` (kh, 3, ...))."""
        t = np.matmul(self.g_rows, w.astype(np.float64).reshape(self.kh, -1))
        out.reshape(len(self.g_rows), len(self.g), -1)[...] = np.matmul(
            self.g[None], t.reshape(len(self.g_rows), 3, -1))

    def kernel_untransform(self, du: np.ndarray, out: np.ndarray) -> None:
        """``out[a, b] = sum_ij g_rows[i, a] du[i, j] g[j, b]`` in float64 (the kernel
        gradient from its transform)."""
        t = np.matmul(self.g_rows.T, du.astype(np.float64).reshape(len(self.g_rows), -1))
        out.reshape(self.kh, 3, -1)[...] = np.matmul(
            self.g.T[None], t.reshape(self.kh, len(self.g), -1))


def _matrix(m: int, name: str) -> np.ndarray:
    return np.array([[float(Fraction(v)) for v in row]
                     for row in native_winograd.matrix(m, name)], np.float64)


def input_tiles(b, x: np.ndarray, key: object, geo: Geometry, pads: tuple[int, int]) -> Tiles:
    """The input transform of ``x`` (N, H, W, C) with the padding ``pads`` (top, left), shared
    by the readers of the same ``key`` in a step."""
    cache_key = ("winograd", key, geo.m, geo.kh, geo.th, geo.tw, pads)
    found = b.cache.get(cache_key)
    if found is not None:
        return found
    n, c = x.shape[0], x.shape[3]
    tiles = Tiles(geo.blocks, n * geo.th * geo.tw, c)
    geo.transform(b, "input", (tiles.flat, x, np.zeros(c, np.float32)), pads, tiles.stride, n)
    b.cache[cache_key] = tiles
    return tiles


def convolve(b, x: np.ndarray, key: object, w: np.ndarray, out: np.ndarray,
             pads: tuple[int, int], flipped: bool = False) -> None:
    """``out = conv(x, w)`` (stride 1; ``pads`` top/left): the forward convolution, or with
    ``flipped`` the input gradient (``x`` the cotangent, ``w`` the forward's kernel)."""
    n, oh, ow, co = out.shape
    geo = Geometry(w.shape[0], (oh, ow))
    v = input_tiles(b, x, key, geo, pads)
    ci = x.shape[3]
    u = np.empty((geo.blocks, ci, co), np.float32)
    src = w[::-1, ::-1].transpose(0, 1, 3, 2) if flipped else w
    b.add(geo.kernel_transform, (src, u), label=f"{b.node.op}:winograd_kernel")
    prod = Tiles(geo.blocks, v.view.shape[1], co)
    b.add(threads.matmul, (v.view, u, prod.view), label=f"{b.node.op}:winograd_gemm")
    geo.transform(b, "output", (out, prod.flat, np.empty(co, np.float32)), (0, 0),
                  prod.stride, n)


def kernel_gradient(b, x: np.ndarray, key: object, ct: np.ndarray, out: np.ndarray,
                    pads: tuple[int, int]) -> None:
    """``out`` (kh, 3, Cin, Cout) = the kernel gradient of ``conv(x, w)`` with cotangent
    ``ct``."""
    n, oh, ow, co = ct.shape
    geo = Geometry(out.shape[0], (oh, ow))
    v = input_tiles(b, x, key, geo, pads)
    z = Tiles(geo.blocks, v.view.shape[1], co)
    geo.transform(b, "gradient", (z.flat, ct, np.zeros(co, np.float32)), (0, 0), z.stride, n)
    du = np.empty((geo.blocks, x.shape[3], co), np.float32)
    b.add(threads.matmul, (v.view.transpose(0, 2, 1), z.view, du),
          label=f"{b.node.op}:winograd_gemm")
    b.add(geo.kernel_untransform, (du, out), label=f"{b.node.op}:winograd_kernel")


def forward_pads(node: Node, hw: tuple[int, int], k: tuple[int, int]) -> tuple[int, int]:
    """(top, left) padding of the forward convolution ``node`` (kernel ``k``) on ``hw``."""
    from kiln.core.ops.window import window2d

    _, ((pt, _), (pl, _)) = window2d(hw, k, (1, 1), (1, 1), node.attrs["padding"])
    return pt, pl
