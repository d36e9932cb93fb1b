"""The Winograd convolutions of ``winograd.py`` as pipelines over chunks of images
(docs/architecture.md, "Winograd convolutions"): each of kiln's threads takes its share of
the images and runs, chunk after chunk (about ``winograd_pipeline_bytes`` of tiles), the
stages of one convolution while the chunk's tiles are in its core's L2 cache: :func:`forward`
(input transform, products, output transform, with an optional bias / ReLU epilogue),
:func:`adjoint` (the input gradient over the forward's tiles) and :func:`kernel_gradient`
(the cotangent's transform and the products added into one partial sum per thread). Each
adds its steps and returns True, or adds nothing and returns False (``winograd.py`` then runs
the stages over the whole batch). The switches live in ``winograd.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_gemm
from kiln.core.backends.cpu.kernels.conv import native_winograd, winograd
from kiln.core.backends.cpu.runtime import parts as workers


def _transform_call(geo: winograd.Geometry, kind: str, arrays: tuple, tiles: winograd.Tiles,
                    at: tuple, step: int = 1, part: tuple[int, int] | None = None,
                    offset: int = 0, epilogue: str = "") -> tuple | None:
    """``(entry, arrays, params before the range)`` of a native transform (as
    :meth:`winograd.Geometry.transform` adds it), for a pipeline to call per chunk of images; None
    where it does not build."""
    width, off = part or (tiles.view.shape[2], 0)
    lanes = (options.current().winograd_transform_lanes if winograd._avx512()
             else native_winograd.LANES)
    params = [d for a in arrays for d in a.shape] + [geo.th, geo.tw, *at, tiles.stride, width,
                                                     off + offset]

    def make(symbol: str) -> str:
        return native_winograd.transform_ir(symbol, "float32", geo.m, kind, geo.rows, geo.r,
                                            step, lanes, epilogue)

    found = native.try_kernel(
        f"winograd_{kind}_f{geo.m}r{geo.r}x{geo.rows}s{step}l{lanes}{epilogue} float32",
        arrays, params + [0, 1], make)
    return None if found is None else (found[0], found[1][:-1], params)


def _gemm_call(lanes: int, m: int, arrays: tuple, accumulate: bool = False) -> Callable | None:
    """The entry point of native_gemm's kernel for ``m`` rows (the block height dividing
    them where it can) and ``lanes``-lane columns, or None."""
    rows, vecs = winograd.GEMM_BLOCK[lanes]
    if m % rows:
        rows = next((r for r in winograd.ROW_CHOICES[lanes] if m % r == 0), rows)
    found = native.try_kernel(
        f"winograd_gemm_l{lanes}r{rows}v{vecs}{'a' if accumulate else ''} float32", arrays,
        [0] * 15, lambda s: native_gemm.gemm_ir(s, "float32", lanes, rows, vecs, accumulate))
    return None if found is None else found[0]


def _built(calls: list[tuple | None]) -> list[tuple] | None:
    """``calls`` (of :func:`_transform_call`) where every one built, else None."""
    built = [c for c in calls if c is not None]
    return built if len(built) == len(calls) else None


def _chunk(call: tuple, n0: int, n1: int) -> tuple:
    """A transform call of :func:`_transform_call` for the images ``n0 <= n < n1``."""
    entry, arrays, params = call
    return entry, (*arrays, np.array(params + [n0, n1], np.int64))


def _add_pipeline(b, jobs: list[list[list[tuple]]], ranges: list[tuple[int, int]],
                  name: str = "winograd_pipeline") -> None:
    """Adds the pipeline step: part ``k`` (the images ``ranges[k]``) runs ``jobs[k]``, chunk
    after chunk."""
    workers.add_parts(b, _run_chunks, (None,), ranges=ranges,
                      vary=lambda k, lo, hi: {0: jobs[k]}, label=f"{b.node.op}:{name}")


def _run_chunks(chunks: list[list[tuple]]) -> None:
    """One thread's share of a pipeline: per chunk, its calls in order (transforms, then the
    products, then the output transforms)."""
    for calls in chunks:
        for fn, args in calls:
            fn(*args)


def forward(b, geo: winograd.Geometry, x: np.ndarray, key: object, pads: tuple[int, int],
            kernel: tuple, out: np.ndarray, stride: int = 1,
            outputs: list[tuple] | None = None, epilogue: tuple | None = None) -> bool:
    """Adds the kernel transform ``kernel = (fn, args, u)`` and the pipeline (module
    docstring) computing ``out``: the input tiles of ``x`` (``stride`` 2: the four phases
    side by side), written into the step's shared buffer for ``key`` (the kernel gradient
    reads them), the products with ``u`` (blocks, K, N), and the output transforms
    (``outputs``: ``(at, step, part)`` each; default one plain transform; ``epilogue =
    (bias, relu)``: ``out = relu?(conv + bias)``). False where it does not apply (the tiles
    are already computed, the products are not native_gemm's, a kernel does not build):
    then nothing was added."""
    n, c = x.shape[0], x.shape[3]
    fn, args, u = kernel
    k_in, width = u.shape[1], u.shape[2]
    cache_key = ("winograd", key, geo.m, geo.r, geo.rows, geo.th, geo.tw, pads, stride)
    lanes = 16 if width % 16 == 0 and winograd._avx512() else 8
    if (not options.current().winograd_pipeline or cache_key in b.cache or width % lanes
            or not native.enabled()):
        return False
    per_image = geo.th * geo.tw
    v = winograd.Tiles(geo.blocks, n * per_image, k_in)
    prod = winograd.Tiles(geo.blocks, n * per_image, width)
    zeros = np.zeros(c, np.float32)
    if stride == 1:
        first = [_transform_call(geo, "input", (v.flat, x, zeros), v, pads)]
    else:
        first = [_transform_call(geo, "input", (v.flat, x, zeros), v,
                                 (pads[0] - vr, pads[1] - vc), 2, (4 * c, k * c))
                 for k, (vr, vc) in enumerate(winograd.PHASES)]
    sink = np.empty(out.shape[3], np.float32)
    ends = (out, prod.flat, sink) + ((epilogue[0],) if epilogue else ())
    tag = ("bias_relu" if epilogue[1] else "bias") if epilogue else ""
    last = [_transform_call(geo, "output", ends, prod, at, step, part, epilogue=tag)
            for at, step, part in (outputs or [((0, 0), 1, None)])]
    flat_u = u.reshape(-1)
    gemm = _gemm_call(lanes, 0, (prod.flat, v.flat, flat_u))
    first_calls, last_calls = _built(first), _built(last)
    if gemm is None or first_calls is None or last_calls is None:
        return False
    b.cache[cache_key] = v
    b.add(fn, args, label=f"{b.node.op}:winograd_kernel")
    per = winograd.chunk_images(geo.blocks, per_image, k_in + width)
    jobs = []
    parts = workers.split(n)
    if len(parts) == 1 and n <= per and _by_points(b, geo, n * per_image, v, prod, flat_u,
                                                   gemm, first_calls, last_calls):
        return True
    for lo, hi in parts:
        part = []
        for n0 in range(lo, hi, per):
            n1 = min(hi, n0 + per)
            r0, m = n0 * per_image, (n1 - n0) * per_image
            a, cc = v.flat[r0 * k_in:], prod.flat[r0 * width:]
            gp = np.array([cc.size, a.size, flat_u.size, m, k_in, width, v.stride, k_in, 1,
                           k_in * width, width, prod.stride, width, 0, geo.blocks], np.int64)
            part.append([_chunk(t, n0, n1) for t in first_calls]
                        + [(gemm, (cc, a, flat_u, gp))]
                        + [_chunk(t, n0, n1) for t in last_calls])
        jobs.append(part)
    _add_pipeline(b, jobs, parts)
    return True


def _by_points(b, geo: winograd.Geometry, m: int, v: winograd.Tiles, prod: winograd.Tiles,
               flat_u: np.ndarray, gemm: Callable, first: list[tuple],
               last: list[tuple]) -> bool:
    """The forward of fewer images than kiln's threads (a serving batch): the input transform,
    then the products split over the transform's points (each part the products of its
    points, for every tile: no image to share out), then the output transform; False
    (nothing added) where the products are under ``winograd_point_split_work``
    multiply-adds (one part: the pipeline's one chunk does as well). The MNIST convnet's
    32 -> 64 layer at batch 1 (9 tiles of F(4x4), 36 points of 9 x 32 x 64): its products
    took 13 us of the call's 23 on one thread (docs/performance.md, "Serving")."""
    k_in, width = v.view.shape[2], prod.view.shape[2]
    points = workers.split(geo.blocks, work=m * k_in * width * geo.blocks,
                           min_work=options.current().winograd_point_split_work)
    if len(points) == 1:
        return False
    op = b.node.op
    for t in first:
        b.add(*_chunk(t, 0, m // (geo.th * geo.tw)), label=f"{op}:winograd_input")
    head = [prod.flat.size, v.flat.size, flat_u.size, m, k_in, width, v.stride, k_in, 1,
            k_in * width, width, prod.stride, width]
    params = [np.array(head + [lo, hi], np.int64) for lo, hi in points]
    workers.add_parts(b, gemm, (prod.flat, v.flat, flat_u, params[0]), ranges=points,
                      vary=lambda k, lo, hi: {3: params[k]}, label=f"{op}:winograd_products",
                      sized=True)
    for t in last:
        b.add(*_chunk(t, 0, m // (geo.th * geo.tw)), label=f"{op}:winograd_output")
    return True


def adjoint(b, ct: np.ndarray, w: np.ndarray, out: np.ndarray,
            pads: tuple[int, int], m: int | None = None) -> bool:
    """The stride-1 input gradient over the forward's tiles, where they are fewer than the
    tiles of the flipped convolution's output (a "valid" convolution: 11x11 outputs take 3x3
    tiles of 4, the 13x13 input gradient 4x4): ``dx = sum over tiles of B (Z U') B^T``, the
    adjoint of the forward, with ``Z = A dy A^T`` per tile and ``U'`` the kernel's transform
    with its channel axes swapped; per chunk of images on one thread (as :func:`forward`):
    the cotangent's transform and the products into scratch buffers of the thread, then the
    adjoint input transform adds each tile's window into the image (neighbouring windows
    overlap); tiles of ``m`` (default ``winograd.tile_size()``'s). False where it does not
    apply (nothing added)."""
    n, oh, ow, co = ct.shape
    kh, kw, ci, _ = w.shape
    geo = winograd._stride1(kh, (oh, ow), m)
    flipped = winograd._stride1(kh, out.shape[1:3], m)
    lanes = 16 if ci % 16 == 0 and winograd._avx512() else 8
    opts = options.current()
    if (not opts.winograd_pipeline or not opts.winograd_adjoint or ci % lanes
            or not native.enabled() or geo.th * geo.tw >= flipped.th * flipped.tw):
        return False
    per_image = geo.th * geo.tw
    per = winograd.chunk_images(geo.blocks, per_image, ci + co)
    parts = workers.split(n)
    zs = [winograd.Tiles(geo.blocks, min(per, hi - lo) * per_image, co) for lo, hi in parts]
    dvs = [winograd.Tiles(geo.blocks, min(per, hi - lo) * per_image, ci) for lo, hi in parts]
    zeros = np.zeros(co, np.float32)
    ut = aligned.empty((geo.blocks, co, ci), np.float32)
    flat_u = ut.reshape(-1)
    gemm = _gemm_call(lanes, 0, (dvs[0].flat, zs[0].flat, flat_u))
    grads = [_transform_call(geo, "gradient", (z.flat, ct, zeros), z, (0, 0),
                             offset=-lo * per_image * co) for z, (lo, _) in zip(zs, parts)]
    adjoints = [_transform_call(geo, "input_adjoint", (out, dv.flat, np.empty(ci, np.float32)),
                                dv, pads, offset=-lo * per_image * ci)
                for dv, (lo, _) in zip(dvs, parts)]
    grad_calls, adjoint_calls = _built(grads), _built(adjoints)
    if gemm is None or grad_calls is None or adjoint_calls is None:
        return False
    b.add(geo.kernel_transform, (w.transpose(0, 1, 3, 2), ut),
          label=f"{b.node.op}:winograd_kernel")
    jobs = []
    for k, (lo, hi) in enumerate(parts):
        z, dv = zs[k], dvs[k]
        part = []
        for n0 in range(lo, hi, per):
            n1 = min(hi, n0 + per)
            m = (n1 - n0) * per_image
            shift = (n0 - lo) * per_image
            g_entry, g_arrays, g_params = grad_calls[k]
            a_entry, a_arrays, a_params = adjoint_calls[k]
            gp = np.array([dv.flat.size, z.flat.size, flat_u.size, m, co, ci, z.stride, co, 1,
                           co * ci, ci, dv.stride, ci, 0, geo.blocks], np.int64)
            part.append([
                _chunk((g_entry, g_arrays, g_params[:-1] + [g_params[-1] - shift * co]), n0, n1),
                (gemm, (dv.flat, z.flat, flat_u, gp)),
                _chunk((a_entry, a_arrays, a_params[:-1] + [a_params[-1] - shift * ci]), n0, n1)])
        jobs.append(part)
    _add_pipeline(b, jobs, parts, "winograd_adjoint")
    return True


def kernel_gradient(b, geo: winograd.Geometry, x: np.ndarray, key: object, ct: np.ndarray,
                    out: np.ndarray, pads: tuple[int, int], stride: int) -> bool:
    """The kernel gradient as a pipeline (see ``winograd_pipeline``): each thread, per chunk of
    its images, transforms the chunk's cotangent into a scratch tile buffer of its own (kept in
    its core's L2) and adds ``V^T Z`` of the chunk into its partial ``dU`` (native_gemm,
    accumulating); the partials are added in order, then ``G^T dU G`` (per phase with
    stride 2). ``V``: the step's input tiles where the forward computed them, else the chunk's
    input transform into a second scratch buffer of the thread (a Conv2DTranspose's kernel
    gradient, whose "input" is the gradient of its output: MNIST-sized autoencoder, 28 x 28 x
    32, four phase transforms of the whole batch 5.8 ms + GEMM 2.9 ms before). False where it
    does not apply (nothing added): the products are not native_gemm's, or a transform does
    not build."""
    n, oh, ow, co = ct.shape
    cache_key = ("winograd", key, geo.m, geo.r, geo.rows, geo.th, geo.tw, pads, stride)
    v = b.cache.get(cache_key)
    lanes = 16 if co % 16 == 0 and winograd._avx512() else 8
    if not options.current().winograd_pipeline or co % lanes or not native.enabled():
        return False
    c = x.shape[3]
    k_in = v.view.shape[2] if v is not None else c * stride * stride  # the phases side by side
    if geo.blocks * k_in * co * 4 > options.current().winograd_partial_bytes:
        return False
    per_image = geo.th * geo.tw
    per = winograd.chunk_images(geo.blocks, per_image, k_in + co)
    parts = workers.split(n)
    scratch = [winograd.Tiles(geo.blocks, min(per, hi - lo) * per_image, co) for lo, hi in parts]
    zeros = np.zeros(co, np.float32)
    du_parts = aligned.empty((len(parts), geo.blocks, k_in, co), np.float32)
    inputs: list[list] = [[] for _ in parts]
    vs = [v] * len(parts)
    if v is None:
        vs = [winograd.Tiles(geo.blocks, min(per, hi - lo) * per_image, k_in)
              for lo, hi in parts]
        phases = ([(pads, 1, None)] if stride == 1 else
                  [((pads[0] - vr, pads[1] - vc), 2, (4 * c, k * c))
                   for k, (vr, vc) in enumerate(winograd.PHASES)])
        zeros_in = np.zeros(c, np.float32)
        inputs = [[_transform_call(geo, "input", (vt.flat, x, zeros_in), vt, at, step, part,
                                   offset=-lo * per_image * k_in) for at, step, part in phases]
                  for vt, (lo, _) in zip(vs, parts)]
    gemms = [_gemm_call(lanes, k_in, (du_parts[0].reshape(-1), vs[0].flat, scratch[0].flat),
                        acc) for acc in (False, True)]
    transforms = [_transform_call(geo, "gradient", (z.flat, ct, zeros), z, (0, 0),
                                  offset=-lo * per_image * co)
                  for z, (lo, _) in zip(scratch, parts)]
    transform_calls = _built(transforms)
    if None in gemms or transform_calls is None or any(None in calls for calls in inputs):
        return False
    jobs = []
    for k, (lo, hi) in enumerate(parts):
        z, du = scratch[k], du_parts[k].reshape(-1)
        part = []
        for n0 in range(lo, hi, per):
            n1 = min(hi, n0 + per)
            shift, m = (n0 - lo) * per_image, (n1 - n0) * per_image
            a = vs[k].flat if v is None else v.flat[n0 * per_image * k_in:]
            calls = [_chunk((e, arrays, params[:-1] + [params[-1] - shift * k_in]), n0, n1)
                     for e, arrays, params in inputs[k]]
            entry, arrays, params = transform_calls[k]
            params = params[:-1] + [params[-1] - shift * co]
            gp = np.array([du.size, a.size, z.flat.size, k_in, m, co, vs[k].stride, 1, k_in,
                           z.stride, co, k_in * co, co, 0, geo.blocks], np.int64)
            part.append(calls + [_chunk((entry, arrays, params), n0, n1),
                                 (gemms[1 if n0 > lo else 0], (du, a, z.flat, gp))])
        jobs.append(part)
    _add_pipeline(b, jobs, parts)
    du = du_parts[0]
    if len(parts) > 1:
        du = aligned.empty(du_parts.shape[1:], np.float32)
        b.add(np.add.reduce, (du_parts, 0, None, du), label=f"{b.node.op}:sum_parts")
    if stride == 1:
        b.add(geo.kernel_untransform, (du, out), label=f"{b.node.op}:winograd_kernel")
    else:
        b.add(winograd._phases_untransform, (geo, du, out), label=f"{b.node.op}:winograd_kernel")
    return True
