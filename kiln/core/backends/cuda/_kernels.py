"""Hand-written CUDA kernels, as source templates specialized per dtype and block size:
GEMM (shared-memory tiles with register micro-tiles), convolutions as implicit GEMMs, the
softmax family and cross-entropies (row kernels), pooling (forward and backward),
gather/scatter-add, one_hot, fill and the counter-based random numbers.

All tensors are flat 1-D device buffers with an element offset; shapes and strides are kernel
arguments, so a kernel compiles once per dtype and serves every batch size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core.backends.cuda._codegen import CTOR
from kiln.core.backends.cuda._jit import Kernel, load


def _ind(lines: list[str], n: int) -> list[str]:
    return [" " * n + line for line in lines]


# ---- GEMM ------------------------------------------------------------------------------------
def gemm(dtype: str, tile: int, micro: int, nbd: int) -> Kernel:
    """C[b] = A[b] @ B[b] for ``nbd`` broadcast batch dims.

    Blocks of tile x tile threads compute (tile * micro)^2 outputs, each thread a
    micro x micro register tile (rows ty + i*tile, cols tx + j*tile). Arguments:
    ``M, N, K, nb, bd0.., c, co, a, ao, sam, sak, sab0.., b, bo, sbk, sbn, sbb0..``.
    """
    T, R, BM = tile, micro, tile * micro
    c = CTOR[dtype]
    bd = [f"bd{d}" for d in range(nbd)]
    params = (["M", "N", "K", "nb", *bd, "c", "co", "a", "ao", "sam", "sak"]
              + [f"sab{d}" for d in range(nbd)] + ["b", "bo", "sbk", "sbn"]
              + [f"sbb{d}" for d in range(nbd)])
    src = [f"def k_gemm({', '.join(params)}):",
           f"    sa = cuda.shared.array(({BM}, {T}), {c})",
           f"    sb = cuda.shared.array(({T}, {BM}), {c})",
           f"    acc = cuda.local.array(({R}, {R}), {c})",
           f"    av = cuda.local.array({R}, {c})",
           f"    bv = cuda.local.array({R}, {c})",
           "    tx = cuda.threadIdx.x",
           "    ty = cuda.threadIdx.y",
           "    bat = cuda.blockIdx.z",
           "    while bat < nb:"]
    body = []
    if nbd:
        body.append("q = bat")
        for d in range(nbd - 1, 0, -1):
            body += [f"g{d} = q % bd{d}", f"q = q // bd{d}"]
        body.append("g0 = q")
    body.append("aoff = ao + " + " + ".join(["0"] + [f"g{d} * sab{d}" for d in range(nbd)]))
    body.append("boff = bo + " + " + ".join(["0"] + [f"g{d} * sbb{d}" for d in range(nbd)]))
    body += ["coff = co + bat * M * N",
             "by = cuda.blockIdx.y",
             f"while by * {BM} < M:",
             "    bx = cuda.blockIdx.x",
             f"    while bx * {BM} < N:",
             f"        for i in range({R}):",
             f"            for j in range({R}):",
             f"                acc[i, j] = {c}(0)",
             "        t0 = 0",
             "        while t0 < K:",
             f"            for r in range({R}):",
             f"                gr = by * {BM} + ty + r * {T}",
             "                gk = t0 + tx",
             "                if gr < M and gk < K:",
             f"                    sa[ty + r * {T}, tx] = a[aoff + gr * sam + gk * sak]",
             "                else:",
             f"                    sa[ty + r * {T}, tx] = {c}(0)",
             "                gk = t0 + ty",
             f"                gc = bx * {BM} + tx + r * {T}",
             "                if gk < K and gc < N:",
             f"                    sb[ty, tx + r * {T}] = b[boff + gk * sbk + gc * sbn]",
             "                else:",
             f"                    sb[ty, tx + r * {T}] = {c}(0)",
             "            cuda.syncthreads()",
             f"            for p in range({T}):",
             f"                for i in range({R}):",
             f"                    av[i] = sa[ty + i * {T}, p]",
             f"                for j in range({R}):",
             f"                    bv[j] = sb[p, tx + j * {T}]",
             f"                for i in range({R}):",
             f"                    for j in range({R}):",
             "                        acc[i, j] += av[i] * bv[j]",
             "            cuda.syncthreads()",
             f"            t0 += {T}",
             f"        for i in range({R}):",
             f"            gr = by * {BM} + ty + i * {T}",
             "            if gr < M:",
             f"                for j in range({R}):",
             f"                    gc = bx * {BM} + tx + j * {T}",
             "                    if gc < N:",
             "                        c[coff + gr * N + gc] = acc[i, j]",
             "        bx += cuda.gridDim.x",
             "    by += cuda.gridDim.y",
             "bat += cuda.gridDim.z"]
    src += _ind(body, 8)
    return load("\n".join(src) + "\n", "k_gemm")


# ---- row kernels: softmax, log_softmax, cross-entropies ------------------------------------
def row(kind: str, dtype: str, mode: str, block: int) -> Kernel:
    """Row-wise kernels over (outer, A, inner) contiguous data; rows are (outer, inner).

    Arguments: ``nrow, A, inner, out, oo, x, xo, y, yo`` (``y``: labels for the
    cross-entropies, any array otherwise).
    """
    c = CTOR[dtype]
    blk = mode == "block"
    start, step = ("tid", str(block)) if blk else ("0", "1")
    src = ["def k_row(nrow, A, inner, out, oo, x, xo, y, yo):"]
    if blk:
        src += [f"    sm = cuda.shared.array({block}, {c})", "    tid = cuda.threadIdx.x",
                "    row = cuda.blockIdx.x", "    rstep = cuda.gridDim.x"]
    else:
        src += ["    row = cuda.grid(1)", "    rstep = cuda.gridsize(1)"]
    src.append("    while row < nrow:")
    body = ["o = row // inner", "q = row - o * inner", "base = xo + o * A * inner + q"]

    def reduce(init: str, update: str, combine: str, result: str) -> list[str]:
        lines = [f"acc = {init}", f"e = {start}", "while e < A:",
                 "    xv = x[base + e * inner]", f"    acc = {update}", f"    e += {step}"]
        if blk:
            lines += ["sm[tid] = acc", "cuda.syncthreads()", f"s = {block // 2}",
                      "while s > 0:", "    if tid < s:",
                      f"        sm[tid] = {combine.format(a='sm[tid]', b='sm[tid + s]')}",
                      "    cuda.syncthreads()", "    s //= 2", "acc = sm[0]",
                      "cuda.syncthreads()"]
        return lines + [f"{result} = acc"]

    body += reduce("-_INF", "_maxn(acc, xv)", "_maxn({a}, {b})", "m")
    body += reduce(f"{c}(0)", f"acc + {c}(math.exp(xv - m))", "{a} + {b}", "s")
    if kind in ("softmax", "log_softmax"):
        expr = (f"{c}(math.exp(xv - m)) / s" if kind == "softmax"
                else f"(xv - m) - {c}(math.log(s))")
        body += [f"e = {start}", "while e < A:", "    xv = x[base + e * inner]",
                 f"    out[oo + o * A * inner + q + e * inner] = {c}({expr})",
                 f"    e += {step}"]
    elif kind == "sparse_ce":
        store = ["lab = int64(y[yo + row])", "if lab < 0:", "    lab += A",
                 "if lab >= 0 and lab < A:",
                 f"    out[oo + row] = {c}(-((x[base + lab * inner] - m) - "
                 f"{c}(math.log(s))))",
                 "else:", f"    out[oo + row] = {c}(math.nan)"]
        body += (["if tid == 0:"] + _ind(store, 4)) if blk else store
    elif kind == "dense_ce":
        body += [f"ls = {c}(math.log(s))"]
        # a label of 0 adds 0, even where x - m overflows to -inf (0 * -inf is NaN)
        yv = "y[yo + o * A * inner + q + e * inner]"
        body += reduce(f"{c}(0)", f"acc + ({yv} * ((xv - m) - ls) if {yv} != 0 else {c}(0))",
                       "{a} + {b}", "t")
        store = [f"out[oo + row] = {c}(-t)"]
        body += (["if tid == 0:"] + _ind(store, 4)) if blk else store
    else:  # pragma: no cover
        raise ValueError(kind)
    body += ["row += rstep"]
    src += _ind(body, 8)
    return load("\n".join(src) + "\n", "k_row")


# ---- convolution and pooling (NHWC, contiguous) ------------------------------------------------
_GEOM = "N, H, W, C, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl"


# implicit-GEMM convolutions: C[m, n] = sum_k A[m, k] * B[k, n] with A (or B) read from the
# image through the window arithmetic instead of an im2col buffer.
_CONV_LOADS = {
    # out[p, co] = sum_(a,b,ci) x[n, h, w, ci] * k[a, b, ci, co];  p = (n, oh, ow)
    "fwd": (
        ["ow = gr % OW", "q = gr // OW", "oh = q % OH", "n = q // OH",
         "ci = gk % C", "q = gk // C", "b = q % KW", "a = q // KW",
         "h = oh * sh - pt + a * dh", "w = ow * sw - pl + b * dw",
         "if h >= 0 and h < H and w >= 0 and w < W:",
         "    va = x[xo + ((n * H + h) * W + w) * C + ci]"],
        ["vb = k[ko + gk * CO + gc]"]),
    # dx[q, ci] = sum_(a,b,co) ct[n, oh, ow, co] * k[a, b, ci, co];  q = (n, h, w)
    "bpi": (
        ["w = gr % W", "q = gr // W", "h = q % H", "n = q // H",
         "co = gk % CO", "q = gk // CO", "b = q % KW", "a = q // KW",
         "t = h + pt - a * dh", "u = w + pl - b * dw",
         "if t >= 0 and u >= 0 and t % sh == 0 and u % sw == 0:",
         "    oh = t // sh", "    ow = u // sw",
         "    if oh < OH and ow < OW:",
         "        va = x[xo + ((n * OH + oh) * OW + ow) * CO + co]"],
        ["vb = k[ko + ((gk // CO) * C + gc) * CO + gk % CO]"]),
    # dk[m, co] = sum_p x[n, h, w, ci] * ct[p, co];  m = (a, b, ci), p = (n, oh, ow)
    "bpf": (
        ["ci = gr % C", "q = gr // C", "b = q % KW", "a = q // KW",
         "ow = gk % OW", "q = gk // OW", "oh = q % OH", "n = q // OH",
         "h = oh * sh - pt + a * dh", "w = ow * sw - pl + b * dw",
         "if h >= 0 and h < H and w >= 0 and w < W:",
         "    va = x[xo + ((n * H + h) * W + w) * C + ci]"],
        ["vb = k[ko + gk * CO + gc]"]),
}


def conv_gemm(kind: str, dtype: str, tile: int, micro: int, splitk: bool) -> Kernel:
    """conv2d (``fwd``), its input gradient (``bpi``) and kernel gradient (``bpf``) as one
    tiled GEMM each (the shared-memory tiles and register micro-tiles of :func:`gemm`), the
    image operand gathered through the window arithmetic (zero outside the image).

    ``splitk``: blockIdx.z splits the K range into ``kchunk``-sized pieces whose partial sums
    are added to the (zeroed) output atomically, for long sums into few outputs (``bpf``).
    Arguments: ``M, NN, K, kchunk, geometry..., CO, out, oo, x, xo, k, ko`` (``x`` is the
    image, or the cotangent for ``bpi``; ``k`` the kernel, or the cotangent for ``bpf``).
    """
    T, R, BM = tile, micro, tile * micro
    c = CTOR[dtype]
    a_lines, b_lines = _CONV_LOADS[kind]
    store = ("cuda.atomic.add(out, oo + gr * NN + gc, acc[i, j])" if splitk
             else "out[oo + gr * NN + gc] = acc[i, j]")
    src = [f"def k_conv_{kind}(M, NN, K, kchunk, {_GEOM}, CO, out, oo, x, xo, k, ko):",
           f"    sa = cuda.shared.array(({BM}, {T}), {c})",
           f"    sb = cuda.shared.array(({T}, {BM}), {c})",
           f"    acc = cuda.local.array(({R}, {R}), {c})",
           f"    av = cuda.local.array({R}, {c})",
           f"    bv = cuda.local.array({R}, {c})",
           "    tx = cuda.threadIdx.x",
           "    ty = cuda.threadIdx.y",
           "    kz = cuda.blockIdx.z",
           "    while kz * kchunk < K:",
           "        k0 = kz * kchunk",
           "        k1 = min(K, k0 + kchunk)"]
    body = ["by = cuda.blockIdx.y",
            f"while by * {BM} < M:",
            "    bx = cuda.blockIdx.x",
            f"    while bx * {BM} < NN:",
            f"        for i in range({R}):",
            f"            for j in range({R}):",
            f"                acc[i, j] = {c}(0)",
            "        t0 = k0",
            "        while t0 < k1:",
            f"            for r in range({R}):",
            f"                gr = by * {BM} + ty + r * {T}",
            "                gk = t0 + tx",
            f"                va = {c}(0)",
            "                if gr < M and gk < k1:"]
    body += _ind(a_lines, 20)
    body += [f"                sa[ty + r * {T}, tx] = va",
             "                gk = t0 + ty",
             f"                gc = bx * {BM} + tx + r * {T}",
             f"                vb = {c}(0)",
             "                if gk < k1 and gc < NN:"]
    body += _ind(b_lines, 20)
    body += [f"                sb[ty, tx + r * {T}] = vb",
             "            cuda.syncthreads()",
             f"            for p in range({T}):",
             f"                for i in range({R}):",
             f"                    av[i] = sa[ty + i * {T}, p]",
             f"                for j in range({R}):",
             f"                    bv[j] = sb[p, tx + j * {T}]",
             f"                for i in range({R}):",
             f"                    for j in range({R}):",
             "                        acc[i, j] += av[i] * bv[j]",
             "            cuda.syncthreads()",
             f"            t0 += {T}",
             f"        for i in range({R}):",
             f"            gr = by * {BM} + ty + i * {T}",
             "            if gr < M:",
             f"                for j in range({R}):",
             f"                    gc = bx * {BM} + tx + j * {T}",
             "                    if gc < NN:",
             f"                        {store}",
             "        bx += cuda.gridDim.x",
             "    by += cuda.gridDim.y",
             "kz += cuda.gridDim.z"]
    src += _ind(body, 8)
    return load("\n".join(src) + "\n", f"k_conv_{kind}")


def pool(kind: str, dtype: str) -> Kernel:
    """max/avg pooling forward, a thread per output. Arguments: ``total, geometry..., out,
    oo, x, xo`` (C is the channel count; dilation arguments are unused, 1)."""
    c = CTOR[dtype]
    if kind == "max":
        init, upd, fin = "-_INF", "acc = _maxn(acc, x[xb + ch])", "acc"
    else:
        init, upd, fin = f"{c}(0)", "acc += x[xb + ch]", f"acc / {c}(cnt)"
    src = f"""def k_pool(total, {_GEOM}, out, oo, x, xo):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < total:
        ch = i % C
        r = i // C
        ow = r % OW
        r = r // OW
        oh = r % OH
        n = r // OH
        acc = {init}
        cnt = 0
        for a in range(KH):
            h = oh * sh - pt + a
            if h >= 0 and h < H:
                for b in range(KW):
                    w = ow * sw - pl + b
                    if w >= 0 and w < W:
                        xb = xo + ((n * H + h) * W + w) * C
                        {upd}
                        cnt += 1
        out[oo + i] = {c}({fin})
        i += step
"""
    return load(src, "k_pool")


def max_pool_grad(dtype: str) -> Kernel:
    """dx[n, h, w, c]: the sum of ct over the windows whose FIRST element equal to the pooled
    value (row-major in the window; padding counts as -inf) is (h, w); a thread per input.
    Arguments: ``total, geometry..., out, oo, x, xo, y, yo, ct, cto``."""
    c = CTOR[dtype]
    src = f"""def k_maxgrad(total, {_GEOM}, out, oo, x, xo, y, yo, ct, cto):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < total:
        ch = i % C
        r = i // C
        w = r % W
        r = r // W
        h = r % H
        n = r // H
        acc = {c}(0)
        for a in range(KH):
            t = h + pt - a
            if t >= 0 and t % sh == 0:
                oh = t // sh
                if oh < OH:
                    for b in range(KW):
                        u = w + pl - b
                        if u >= 0 and u % sw == 0:
                            ow = u // sw
                            if ow < OW:
                                ob = ((n * OH + oh) * OW + ow) * C + ch
                                yv = y[yo + ob]
                                found = False
                                first = False
                                for a2 in range(KH):
                                    if not found:
                                        h2 = oh * sh - pt + a2
                                        for b2 in range(KW):
                                            if not found:
                                                w2 = ow * sw - pl + b2
                                                if h2 >= 0 and h2 < H and w2 >= 0 and w2 < W:
                                                    v = x[xo + ((n * H + h2) * W + w2) * C + ch]
                                                else:
                                                    v = -_INF
                                                if v == yv:
                                                    found = True
                                                    first = a2 == a and b2 == b
                                if first:
                                    acc += ct[cto + ob]
        out[oo + i] = acc
        i += step
"""
    return load(src, "k_maxgrad")


def avg_pool_grad(dtype: str) -> Kernel:
    """dx[n, h, w, c] = sum over windows containing (h, w) of ct / (real elements in window).
    Arguments: ``total, geometry..., out, oo, ct, cto``."""
    c = CTOR[dtype]
    src = f"""def k_avggrad(total, {_GEOM}, out, oo, ct, cto):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < total:
        ch = i % C
        r = i // C
        w = r % W
        r = r // W
        h = r % H
        n = r // H
        acc = {c}(0)
        for a in range(KH):
            t = h + pt - a
            if t >= 0 and t % sh == 0:
                oh = t // sh
                if oh < OH:
                    h0 = oh * sh - pt
                    rows = min(h0 + KH, H) - max(h0, 0)
                    for b in range(KW):
                        u = w + pl - b
                        if u >= 0 and u % sw == 0:
                            ow = u // sw
                            if ow < OW:
                                w0 = ow * sw - pl
                                cols = min(w0 + KW, W) - max(w0, 0)
                                acc += ct[cto + ((n * OH + oh) * OW + ow) * C + ch] / {c}(
                                    rows * cols)
        out[oo + i] = acc
        i += step
"""
    return load(src, "k_avggrad")


# ---- gather / scatter-add / one_hot / fill ----------------------------------------------------
def take(along: bool = False) -> Kernel:
    """out[p, j, s] = x[p, idx[j], s] (``along``: ``take_along_axis``, x[p, idx[p, j, s], s]);
    negative indices wrap like NumPy, an index still out of range sets ``err[eo] = 1`` (the
    program raises IndexError after the run; a kernel cannot).
    Arguments: ``total, A, J, S, out, oo, x, xo, idx, io, err, eo``."""
    name = "k_take_along" if along else "k_take"
    src = f"""def {name}(total, A, J, S, out, oo, x, xo, idx, io, err, eo):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < total:
        s = i % S
        r = i // S
        j = r % J
        p = r // J
        t = int64(idx[io + {"i" if along else "j"}])
        if t < 0:
            t += A
        if t >= 0 and t < A:
            out[oo + i] = x[xo + (p * A + t) * S + s]
        else:
            err[eo] = int32(1)
        i += step
"""
    return load(src, name)


def take_grad(along: bool = False) -> Kernel:
    """out[p, idx[j], s] += ct[p, j, s] (``along``: at idx[p, j, s]) with atomic adds (out is
    zeroed first); an index out of range (after the negative wrap) sets ``err[eo] = 1``.
    Arguments: ``total, A, J, S, out, oo, ct, cto, idx, io, err, eo``."""
    name = "k_take_along_grad" if along else "k_take_grad"
    src = f"""def {name}(total, A, J, S, out, oo, ct, cto, idx, io, err, eo):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < total:
        s = i % S
        r = i // S
        j = r % J
        p = r // J
        t = int64(idx[io + {"i" if along else "j"}])
        if t < 0:
            t += A
        if t >= 0 and t < A:
            cuda.atomic.add(out, oo + (p * A + t) * S + s, ct[cto + i])
        else:
            err[eo] = int32(1)
        i += step
"""
    return load(src, name)


class IndexCheck:
    """A device error flag that gather kernels set for an out-of-range index, and the check the
    program runs after its launches: one 4-byte copy to the host; when set, the flag is cleared
    and ``IndexError("<op>: index out of range")`` raised, as the reference and CPU do.

    Args:
        cuda: ``numba.cuda``.
        op: the op named in the error.
    """

    def __init__(self, cuda: Any, op: str):
        self.op = op
        self.flag = cuda.to_device(np.zeros(1, np.int32))
        self._host = np.zeros(1, np.int32)

    def __call__(self) -> None:
        self.flag.copy_to_host(self._host)
        if self._host[0]:
            self.flag.copy_to_device(np.zeros(1, np.int32))
            raise IndexError(f"{self.op}: index out of range")


def one_hot(dtype: str) -> Kernel:
    """out[i, d] = 1 where idx[i] == d. Arguments: ``total, depth, out, oo, idx, io``."""
    c = CTOR[dtype]
    src = f"""def k_one_hot(total, depth, out, oo, idx, io):
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < total:
        d = i % depth
        out[oo + i] = {c}(1) if int64(idx[io + i // depth]) == d else {c}(0)
        i += step
"""
    return load(src, "k_one_hot")


def fill(dtype: str) -> Kernel:
    """out[oo + i] = value for i < n. Arguments: ``n, out, oo, value``."""
    c = CTOR[dtype]
    src = f"""def k_fill(n, out, oo, value):
    v = {c}(value)
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        out[oo + i] = v
        i += step
"""
    return load(src, "k_fill")


# ---- random numbers (kiln/core/ops/random.py, bit for bit) -----------------------------------
def random(kind: str, dtype: str) -> Kernel:
    """SplitMix64 over a Weyl sequence keyed by (seed, counter, salt), like the reference.
    Arguments: ``n, out, oo, key, ko, salt``."""
    c = CTOR[dtype]
    if kind == "uniform":
        expr = f"{c}(_uniform(base, i))"
    else:
        expr = (f"{c}(math.sqrt(-2.0 * math.log(1.0 - _uniform(base, 2 * i))) * "
                f"math.cos(2.0 * math.pi * _uniform(base, 2 * i + 1)))")
    src = f"""def k_random(n, out, oo, key, ko, salt):
    base = _stream_base(key[ko], key[ko + 1], salt)
    i = cuda.grid(1)
    step = cuda.gridsize(1)
    while i < n:
        out[oo + i] = {expr}
        i += step
"""
    return load(src, "k_random")
