"""Winograd convolutions F(m x m, 3 x 3) (and F(1 x m, 1 x 3) for 1x3 kernels: Conv1D) for
float32 stride-1 convolutions on the CPU (docs/architecture.md, "Winograd convolutions").

A 3x3 convolution computed by im2col + GEMM does ``9 * Cin * Cout`` multiplications per output
pixel; the Winograd form (Lavin and Gray, 2016) does ``alpha^2 / m^2`` times ``Cin * Cout``
(``alpha = m + 2``; 4 for m = 2, 2.25 for m = 4; a 1x3 kernel: 3 against 1.5) as
``alpha^2`` (``alpha``) independent GEMMs:

* forward: ``V = B^T d B`` per input tile (``native_winograd``, threads over images),
  ``U = G g G^T`` per step (one float32 GEMM), ``M[xi] = V[xi] @ U[xi]`` (:func:`products`:
  ``native_gemm``'s kernels, else BLAS), ``y = A^T M A`` per tile;
* input gradient: the same, as the forward convolution of the cotangent padded by
  ``k - 1 - pad`` with the kernel flipped in space and its channel axes swapped;
* kernel gradient: ``Z = A dy A^T`` per cotangent tile, ``dU[xi] = V[xi]^T @ Z[xi]`` (the
  forward's V of the same input, computed once per step), ``dg = G^T dU G``.

The tile buffers hold their blocks spaced ``S`` floats apart (:func:`block_stride`): a
transform writes one row into each block per tile, and blocks a power of two apart would fall
in the same cache sets (16 streams at 2 MiB strides ran the input transform 3x slower).

Used where ``usable`` says so: float32, a 3x3 or 1x3 kernel at stride 1 or a 4x4 kernel at
stride 2, dilation 1, no groups, at least :data:`MIN_CHANNELS` channels read by the input
transform, and the native path (``native.enabled()``); ``KILN_WINOGRAD=0`` turns it off, ``2``
or ``4`` picks m of the stride-1 tiles.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.lib.stride_tricks import as_strided

from kiln.core import aligned
from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_gemm
from kiln.core.backends.cpu.gemm import products as gemm_products
from kiln.core.backends.cpu.kernels.conv import native_winograd
from kiln.core.backends.cpu.runtime.parts import native_split
from kiln.core.ir import Node

# Channels the input transform reads, at least: one 8-lane vector. From tests of single
# convolutions (batch 128, 28x28, forward / input gradient / kernel gradient, ms, AVX2 host;
# im2col + GEMM -> Winograd): 32 -> 1 channels 24.8 / - / 24.0 -> 11.1 / - / 10.9 (the
# input gradient reads 1 channel: 9.9 by conv_tile64 against 20.9), 32 -> 8 38.3 / 38.7 /
# 37.2 -> 13.9 / 15.7 / 16.5, 8 -> 32 17.0 / - / 16.2 -> 16.8 / - / 15.3; reading 1 or 3
# channels (a first layer) 1.7-3.3x slower (options.CpuOptions.winograd_min_channels).
# Lanes of the transforms' channel vectors where the CPU has AVX-512 (else 8):
# winograd_transform_lanes; m of F(m x m, 3 x 3): winograd_m (KILN_WINOGRAD).
KERNELS = ((3, 3), (1, 3))  # stride 1
# A 3x3 kernel at stride 2 as four zero-padded 2x2 phases does 16 taps' work for 9: 1.3-1.6x
# slower than im2col (batch 64, 32x32x64 -> 64: 18.8/21.0/18.9 against 25.1/25.5/27.1 ms).
# winograd_stride2_kernels: ((4, 4),), as four 2x2 phases, F(3x3, 2x2).
# Tiles that overhang the image compute pixels that are thrown away (11x11 outputs in 12x12
# tiles: 16%; a stride-2 layer's 7x7 in 9x9: 40%). With OpenBLAS's products, Winograd lost
# to the register-tiled forward / AVX-512 GEMMs below ~85% useful pixels on the Zen 5 host;
# with native_gemm's products it wins at any coverage (declining below 85%, then 60%, made
# the conv autoencoder 13% and 12% slower, the MNIST convnet 19%; A/B in one process).


# Kernels whose transform (blocks x Cin x Cout floats: 4x the kernel for F(4x4, 3x3)) is larger
# than this run as im2col + GEMM: each chunk of images the pipelines multiply reads the whole
# transform again, and a 512 -> 512 3x3 kernel's is 38 MB (benchmarks/bench_conv_shapes.py's
# c512 case, 4 x 4 images, batch 32: forward 32.1 ms with Winograd against 13.4 ms, input
# gradient 37.5 against 14.1, kernel gradient 32.2 against 13.6; the c256 case, 9.4 MB,
# stays faster with Winograd: forward 7.6 against 13.8 ms): winograd_max_kernel_transform_bytes.


# m of the stride-1 tiles of the forward convolution in a float32 training graph
# (:func:`trains`): ``options.winograd_training_forward_m``, by default F(4x4, 3x3) as
# everywhere. F(4x4)'s forward error (7.5 eps of the products' magnitudes with
# native_winograd's points; 34 with Lavin's) is ~2x a direct product's (im2col + GEMM, register
# tiles 3.9, F(2x2, 3x3) 1.3; benchmarks/bench_accuracy.py --float32-step, a 48 x 48 x 32 ->
# 32 layer), and in a training step a ReLU or max-pool may see an odd pre-activation on the
# other side of the kink or tie than float64 does: a VGG-style conv + BN + ReLU + max-pool
# model's float32 SGD step was 2.8e-3 off the float64 one on 1 of 10 seeds with these points
# (3 of 10 with Lavin's, 7e-3..1.1e-2; PyTorch's own float32 step 5 of 10, up to 9.2e-3), all
# ten within 1e-5 with an F(2x2) forward. F(2x2) costs 4-14% of a training step (A/B in one
# process: convnet_train, cifar_cnn, small_resnet 1.04-1.14x the time; conv_autoencoder 0.98x),
# so it is an option (``winograd_training_forward_m=2``), not the default. The two gradients
# keep ``winograd_m``: their error flips nothing (the masks come from the forward).


def tile_size(op: str = "conv2d", training: bool = False) -> int:
    """m of F(m x m, 3 x 3) for ``op`` in a training graph or not: ``options.winograd_m``
    (``KILN_WINOGRAD``: 0 off, 2 or 4), but ``winograd_training_forward_m`` for a training
    graph's forward (``KILN_WINOGRAD`` sets both); 0 when off."""
    opts = options.current()
    if training and op == "conv2d" and opts.winograd_m:
        return opts.winograd_training_forward_m
    return opts.winograd_m


def trains(b) -> bool:
    """Whether the plan ``b`` builds trains a convolution (it holds a kernel gradient: a
    training step, where the forward's error reaches the gradients through ReLU and max-pool
    masks; not an input gradient, which is also a Conv2DTranspose's forward in inference);
    computed once per plan."""
    found = b.cache.get("winograd:trains")
    if found is None:
        found = b.cache["winograd:trains"] = any(n.op == "conv2d_backprop_filter"
                                                 for n in b.graph.nodes)
    return found


def usable(attrs: dict, kernel_shape: tuple, dtype: np.dtype, op: str = "conv2d",
           m: int | None = None) -> int:
    """The stride (1 or 2) of the convolution op ``op`` (conv2d, conv2d_backprop_input or
    conv2d_backprop_filter) with ``attrs`` and an HWIO kernel of ``kernel_shape`` when it runs
    here with stride-1 tiles of ``m`` (default: :func:`tile_size`'s outside training), else 0.
    The channels its input transform reads (the input's; the input gradient's: the
    output's) must fill the 8-lane loop; the others may be as few as one."""
    kh, kw, ci, co = kernel_shape
    strides = tuple(attrs["strides"])
    read = co if op == "conv2d_backprop_input" else ci
    opts = options.current()
    m = tile_size(op) if m is None else m
    alpha = m + 2  # the transform's side: (m + r - 1) for r = 3 (and the 2x2 phases' F(3, 2))
    ok = (dtype == np.float32 and m != 0 and tuple(attrs["dilation"]) == (1, 1)
          and attrs.get("groups", 1) == 1 and read >= opts.winograd_min_channels
          and native.enabled()
          and alpha * alpha * ci * co * 4 <= opts.winograd_max_kernel_transform_bytes)
    if ok and strides == (1, 1) and (kh, kw) in KERNELS:
        return 1
    if ok and strides == (2, 2) and (kh, kw) in opts.winograd_stride2_kernels:
        return 2
    return 0


def block_stride(tiles: int, channels: int) -> int:
    """Floats between two blocks of a tile buffer: at least ``tiles * channels``, and 320
    bytes past a multiple of 4 KiB, so the blocks' rows of one tile fall in distinct cache
    sets (320 = 5 lines: 64 blocks before two share a set)."""
    return -(-tiles * channels // 1024) * 1024 + 80


class Tiles:
    """A tile buffer: ``blocks`` blocks of ``tiles`` rows of ``channels`` floats."""

    def __init__(self, blocks: int, tiles: int, channels: int):
        self.stride = block_stride(tiles, channels)
        self.flat = aligned.empty(blocks * self.stride, np.float32)
        self.view = as_strided(self.flat, (blocks, tiles, channels),
                               (self.stride * 4, channels * 4, 4), writeable=True)


class Geometry:
    """F(m_h x m, r x r) tiles over an ``out_hw`` grid (``rows``: the kernel's rows, 1 for
    one-row tiles) and the kernel transform matrices (float64)."""

    def __init__(self, m: int, r: int, rows: int, out_hw: tuple[int, int]):
        self.m, self.r, self.rows = m, r, rows
        self.m_h = m if rows > 1 else 1
        alpha = m + r - 1
        self.blocks = alpha * (alpha if rows > 1 else 1)
        self.th, self.tw = -(-out_hw[0] // self.m_h), -(-out_hw[1] // m)
        self.g = _matrix(m, r, "G")
        self.g_rows = self.g if rows > 1 else np.ones((1, 1))
        # (blocks, kh * r): block (i, j) of tap (a, b) is g_rows[i, a] g[j, b], in float32 (the
        # kernel transforms as one GEMM: 38 against 214 us for 3x3x64x128 in two float64
        # NumPy products; rounding the coefficients costs ~3e-8 of the result's scale, well
        # below F(4x4, 3x3)'s own error)
        self.kron = np.kron(self.g_rows, self.g).astype(np.float32)

    def transform(self, b, kind: str, arrays: tuple, pads: tuple[int, int], tiles: Tiles,
                  n: int, step: int = 1, part: tuple[int, int] | None = None) -> None:
        """Adds the native ``kind`` transform between an image and ``tiles`` over the ``n``
        images, split over threads; ``part = (width, offset)``: the tiles' rows hold several
        images' channels (the phases of a stride-2 convolution), this one at ``offset``."""

        m, r, rows = self.m, self.r, self.rows
        width, offset = part or (tiles.view.shape[2], 0)

        lanes = (options.current().winograd_transform_lanes if _avx512()
                 else native_winograd.LANES)

        def make(symbol: str, dtype: str) -> str:
            return native_winograd.transform_ir(symbol, dtype, m, kind, rows, r, step, lanes)

        name = f"winograd_{kind}_f{m}r{r}x{rows}s{step}l{lanes}"
        params = [self.th, self.tw, *pads, tiles.stride, width, offset]
        if not native_split(b, name, make, arrays, params, n):
            raise RuntimeError(f"{b.node.op}: the native Winograd {kind} transform did not "
                               "build")

    def kernel_transform(self, w: np.ndarray, out: np.ndarray) -> None:
        """``out[i, j] = sum_ab g_rows[i, a] w[a, b] g[j, b]`` (``w`` (kh, r, ...), ``out``
        (blocks, ...)): one float32 GEMM with ``g_rows (x) g`` (see :attr:`kron`)."""
        _product(self.kron, w.reshape(self.kron.shape[1], -1), out)

    def kernel_untransform(self, du: np.ndarray, out: np.ndarray) -> None:
        """``out[a, b] = sum_ij g_rows[i, a] du[i, j] g[j, b]``: the kernel gradient (``out``
        (kh, r, ...)) from its transform (``du`` (blocks, ...))."""
        _product(self.kron.T, du.reshape(self.blocks, -1), out)


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out`` (any shape of ``a.shape[0] * b.shape[1]`` values) ``= a @ b``."""
    if out.flags.c_contiguous:
        gemm_products.matmul(a, b, out.reshape(a.shape[0], -1))
    else:
        out[...] = (a @ b).reshape(out.shape)


def _matrix(m: int, r: int, name: str) -> np.ndarray:
    return np.array([[float(Fraction(v)) for v in row]
                     for row in native_winograd.matrix(m, name, r)], np.float64)


def _stride1(kh: int, out_hw: tuple[int, int], m: int | None = None) -> Geometry:
    return Geometry(m or tile_size(), 3, kh, out_hw)


def _stride2(out_hw: tuple[int, int]) -> Geometry:
    return Geometry(3, 2, 2, out_hw)


def products(b, a: tuple | np.ndarray, bm: tuple | np.ndarray, out: tuple | np.ndarray) -> None:
    """Adds ``out[x] = a[x] @ bm[x]`` for every block ``x``: each operand an array, or a
    (flat buffer, view of it from its start) pair (the tile buffers). The register-blocked
    native kernel (``native_gemm``: 2-4x OpenBLAS's speed on these shapes) split over kiln's
    threads by blocks, where the columns (or, transposed, the rows) fill its vectors; else
    ``gemm_products.matmul``."""
    pairs = [x if isinstance(x, tuple) else (x.reshape(-1), x) for x in (out, a, bm)]
    views = [v for _, v in pairs]
    label = f"{b.node.op}:winograd_gemm"
    nb, m, k = views[1].shape
    n = views[2].shape[2]
    lanes = 16 if n % 16 == 0 and _avx512() else 8
    steps = [[s // 4 for s in v.strides] for v in views]
    if n % 8 and m % 8 == 0 and steps[1][1] == 1 and steps[0][1] == 1:
        # out^T = bm^T @ a^T, whose columns fill the vectors (a kernel gradient of a layer
        # with one output channel: du (Cin x 1) = V^T Z, as du^T = Z^T V)
        t = [(fl, v.transpose(0, 2, 1)) for fl, v in pairs]
        products(b, t[2], t[1], t[0])
        return
    flat_ok = (all(fl.flags.c_contiguous for fl, _ in pairs)
               and all(v.__array_interface__["data"][0] == fl.__array_interface__["data"][0]
                       for fl, v in pairs))
    if n == 1 and k >= 8 and steps[1][2] == 1 and steps[2][1] == 1 and flat_ok:
        # one column, A's rows contiguous (a Conv2D(1) layer's forward): dot products
        lanes = 16 if k >= 16 and _avx512() else 8
        p = [m, k, n, *steps[1], steps[2][0], steps[2][1], steps[0][0], steps[0][1]]

        if native_split(b, f"winograd_dot_l{lanes}",
                        lambda symbol, dtype: native_gemm.dot_ir(symbol, dtype, lanes),
                        tuple(fl for fl, _ in pairs), p, nb, label=label):
            return
    if n % lanes == 0 and steps[0][2] == 1 and steps[2][2] == 1 and flat_ok:
        rows, vecs = GEMM_BLOCK[lanes]
        if m % rows:  # few rows (a kernel gradient's Cin): a block height that divides them
            rows = next((r for r in ROW_CHOICES[lanes] if m % r == 0), rows)
        p = [m, k, n, *steps[1], steps[2][0], steps[2][1], steps[0][0], steps[0][1]]

        def make(symbol: str, dtype: str) -> str:
            return native_gemm.gemm_ir(symbol, dtype, lanes, rows, vecs)


        if native_split(b, f"winograd_gemm_l{lanes}r{rows}v{vecs}", make,
                        tuple(fl for fl, _ in pairs), p, nb, label=label):
            return
    b.add(gemm_products.MatmulCall(), (views[1], views[2], views[0]), label=label)


# Rows x vectors of a native product block per lane count: 12 accumulators, the two B vectors
# and the broadcast in registers (16 of AVX2's 16, 15 of AVX-512's 32).
GEMM_BLOCK = {16: (6, 2), 8: (6, 2)}
# Other block heights, tried in order when the default leaves a tail of rows (run one row at a
# time: the kernel gradient's 32 x 32 products took 7 passes over B with 6 rows, 4 with 8).
ROW_CHOICES = {16: (8, 4), 8: (4,)}


def _avx512() -> bool:
    return target.current().has_avx512


PHASES = ((0, 0), (0, 1), (1, 0), (1, 1))  # (row, column) parity of a stride-2 kernel's taps


def input_tiles(b, x: np.ndarray, key: object, geo: Geometry, pads: tuple[int, int],
                stride: int = 1) -> Tiles:
    """The input transform of ``x`` (N, H, W, C) with the padding ``pads`` (top, left),
    shared by the readers of the same ``key`` in a step; with ``stride`` 2 the four phases'
    transforms side by side in each row (phase ``k`` at channels ``k * C``)."""
    cache_key = ("winograd", key, geo.m, geo.r, geo.rows, geo.th, geo.tw, pads, stride)
    found = b.cache.get(cache_key)
    if found is not None:
        return found
    n, c = x.shape[0], x.shape[3]
    zeros = np.zeros(c, np.float32)
    if stride == 1:
        tiles = Tiles(geo.blocks, n * geo.th * geo.tw, c)
        geo.transform(b, "input", (tiles.flat, x, zeros), pads, tiles, n)
    else:
        tiles = Tiles(geo.blocks, n * geo.th * geo.tw, 4 * c)
        for k, (vr, vc) in enumerate(PHASES):
            geo.transform(b, "input", (tiles.flat, x, zeros), (pads[0] - vr, pads[1] - vc),
                          tiles, n, step=2, part=(4 * c, k * c))
    b.cache[cache_key] = tiles
    return tiles


def _phase_kernels(w: np.ndarray, flipped: bool) -> list[np.ndarray]:
    """The 2x2 kernels of a stride-2 kernel's phases (``w`` zero-padded to 4x4), flipped with
    their channel axes swapped for the input gradient."""
    kh, kw = w.shape[:2]
    if (kh, kw) != (4, 4):
        w4 = np.zeros((4, 4, *w.shape[2:]), w.dtype)
        w4[:kh, :kw] = w
        w = w4
    out = []
    for vr, vc in PHASES:
        p = w[vr::2, vc::2]
        out.append(p[::-1, ::-1].transpose(0, 1, 3, 2) if flipped else p)
    return out


# The stride-1 forward (and input gradient) as one pipeline over chunks of images: each
# thread runs, per chunk of its images, the input transform, the products and the output
# transform, so the chunk's tiles (about PIPELINE_BYTES) are read back from its core's L2
# cache instead of memory (the three stages over the whole batch each stream megabytes
# through the shared cache). winograd_pipeline False: the three stages over the batch.
# Chunks of about winograd_pipeline_bytes (options.CpuOptions) and of at least
# winograd_pipeline_min_tiles tiles (whole images): with many channels and few tiles per
# image, a chunk of winograd_pipeline_bytes is a few tiles, and every chunk reads the whole kernel
# transform (forward, input gradient) or adds into the whole partial kernel gradient, megabytes
# each (256 -> 256 channels on 8 x 8 images, 4 tiles each: chunks of 3 images, the kernel
# gradient 19.0 ms against 6.7 ms without the pipeline)
# The kernel gradient's pipeline gives each thread a partial transformed gradient of its own
# (blocks x Cin x Cout floats), added up after: above this size, the products over the whole
# batch split by blocks (no partials) run faster (batch 32, pipeline / not: 64 channels on
# 16 x 16 2.4 / 3.1 ms, 96 on 16 x 16 3.9 / 3.9, 128 on 8 x 8 3.1 / 2.4, 256 on 8 x 8 10.7 /
# 7.8): winograd_partial_bytes.


def chunk_images(blocks: int, per_image: int, channels: int) -> int:
    """Images per chunk of a pipeline whose tiles (``blocks`` x ``per_image`` per image) have
    ``channels`` floats in all (the buffers a chunk fills): about ``winograd_pipeline_bytes``,
    at least ``winograd_pipeline_min_tiles`` tiles."""
    opts = options.current()
    per = max(1, opts.winograd_pipeline_bytes // (blocks * per_image * channels * 4))
    return max(per, -(-opts.winograd_pipeline_min_tiles // per_image))
# The stride-1 input gradient over the forward's tiles where they are fewer
# (winograd_pipeline.adjoint); False: always as the flipped convolution (winograd_adjoint).


def _phases_transform(geo: Geometry, w: np.ndarray, u: np.ndarray, flipped: bool) -> None:
    """The four phase kernels' transforms into ``u``: side by side along its input-channel
    axis (forward, ``u`` (blocks, 4 Cin, Cout)) or its output-channel axis (``flipped``: the
    input gradient, ``u`` (blocks, Cout, 4 Cin))."""
    for k, p in enumerate(_phase_kernels(w, flipped)):
        ch = p.shape[3] if flipped else p.shape[2]
        part = u[:, :, k * ch:(k + 1) * ch] if flipped else u[:, k * ch:(k + 1) * ch]
        block = np.empty(part.shape, np.float32)
        geo.kernel_transform(p, block)
        part[...] = block


def _phases_untransform(geo: Geometry, du: np.ndarray, out: np.ndarray) -> None:
    """The stride-2 kernel gradient ``out`` (kh, kw, Cin, Cout) from the phases' transformed
    gradients side by side in ``du`` (blocks, 4 Cin, Cout)."""
    kh, kw, ci, co = out.shape
    full = np.empty((4, 4, ci, co), np.float32)
    part = np.empty((2, 2, ci, co), np.float32)
    for k, (vr, vc) in enumerate(PHASES):
        geo.kernel_untransform(du[:, k * ci:(k + 1) * ci], part)
        full[vr::2, vc::2] = part
    out[...] = full[:kh, :kw]


def forward_pads(node: Node, hw: tuple[int, int], k: tuple[int, int]) -> tuple[int, int]:
    """(top, left) padding of the forward convolution ``node`` (kernel ``k``) on ``hw``."""
    from kiln.core.ops.window import window2d

    _, ((pt, _), (pl, _)) = window2d(hw, k, node.attrs["strides"], (1, 1),
                                     node.attrs["padding"])
    return pt, pl
