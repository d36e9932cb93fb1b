"""The convolution kernels (LLVM IR; their one implementation: docs/architecture.md, "One
implementation per kernel"), by the names ``conv._call`` knows them by: ``im2col_kernel``,
``col2im_kernel``, ``conv_direct_kernel`` and ``conv_filter_direct_kernel``, and the loop
helpers the grouped (``native_groups.py``) and pooling (``native_pool.py``) kernels share
(docs/architecture.md, "Native loops").

Plain loops with strict float arithmetic (no reassociation, no contraction; the numba
kernels they replaced gave the same bits), checked against the ops' NumPy references by
``tests/core/backends/test_native_loops.py``. The arrays come flat; the parameter array
holds every array's shape (in argument order), then the kernel's own parameters ``p``, then
the range ``n0, n1`` of the outer loop that ``conv._call`` splits over threads. The pointers
are ``noalias`` (the outputs are fresh buffers).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.codegen.ir_kernel import _check, _div, _Kernel
from kiln.core.backends.cpu.codegen.llvm_expr import Val


def im2col_ir(symbol: str, dtype: str) -> str:
    """``(cols (N, OH, OW, KH, KW*C), x (N, H, W*C), p = [sh, sw, dh, dw, pt, pl, c])``."""
    _check(dtype, "im2col")
    k = _Kernel((5, 3), 7)
    f = k.f
    _, oh, ow, kh, kwc = k.dims[0]
    _, h, wc = k.dims[1]
    sh, sw, dh, dw, pt, pl, c = k.p
    w = _div(f, wc, c)
    kw = _div(f, kwc, c)
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    w0 = k.sub(f.mul(j, sw), pl)
    a, la = f.begin(kh)
    crow = k.index(k.dims[0], n, i, j, a)
    row = k.position(i, sh, pt, a, dh)
    outside = f.when(f.scalar("not ok", {"ok": k.inside(row, h)}))
    k.fill("%cols", dtype, crow, kwc)
    f.done(outside)
    inside = f.when(k.inside(row, h))
    xrow = k.index(k.dims[1], n, row)
    fast = f.scalar("d == 1 and w0 >= 0 and w0 + kw <= w", {
        "d": Val(dw, "i64"), "w0": Val(w0, "i64"), "kw": Val(kw, "i64"), "w": Val(w, "i64")})
    run = f.when(fast)
    src = f.add(xrow, f.mul(w0, c))
    e, le = f.begin(kwc)
    f.store("%cols", dtype, f.add(crow, e), f.load("%x", dtype, f.add(src, e)))
    f.end(e, le)
    f.done(run)
    slow = f.when(f.scalar("not ok", {"ok": fast}))
    b, lb = f.begin(kw)
    wi = f.add(w0, f.mul(b, dw))
    dst = f.add(crow, f.mul(b, c))
    good = f.when(k.inside(wi, w))
    src = f.add(xrow, f.mul(wi, c))
    e, le = f.begin(c)
    f.store("%cols", dtype, f.add(dst, e), f.load("%x", dtype, f.add(src, e)))
    f.end(e, le)
    f.done(good)
    bad = f.when(f.scalar("not ok", {"ok": k.inside(wi, w)}))
    k.fill("%cols", dtype, dst, c)
    f.done(bad)
    f.end(b, lb)
    f.done(slow)
    f.done(inside)
    f.end(a, la)
    k.close(loops)
    return f.function(symbol, ["cols", "x", "p"], noalias=True)


def col2im_ir(symbol: str, dtype: str) -> str:
    """``(dx (N, H, W, C), cols (N, OH, OW, KH, KW, C), p = [sh, sw, dh, dw, pt, pl])``."""
    _check(dtype, "col2im")
    k = _Kernel((4, 6), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, kh, kw, _ = k.dims[1]
    sh, sw, dh, dw, pt, pl = k.p
    n, ln = f.begin(k.n1, k.n0)
    k.fill("%dx", dtype, k.index(k.dims[0], n), f.mul(f.mul(h, w), c))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)

    def body(a: str, b: str, r: str, wi: str) -> None:
        dst = k.index(k.dims[0], n, r, wi)
        src = k.index(k.dims[1], n, i, j, a, b)
        ch, lc = f.begin(c)
        at = f.add(dst, ch)
        f.store("%dx", dtype, at, f.expr.arith("+", f.load("%dx", dtype, at),
                                               f.load("%cols", dtype, f.add(src, ch))))
        f.end(ch, lc)

    k.window(i, j, h, w, (kh, kw, sh, sw, dh, dw, pt, pl), body)
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "cols", "p"], noalias=True)


def _taps(k: _Kernel, dtype: str, x_dims: list[str], w_dims: list[str],
          body: Callable) -> None:
    """The tap loops shared by the direct kernels: for each (a, b) inside the image, for each
    input channel c, ``body(x value, tap row (t + c) * CO)``; ``k.loop`` holds n, i, j."""
    f = k.f
    n, i, j = k.loop
    _, h, wd, ci = x_dims
    kh, kw, _, co = w_dims
    sh, sw, dh, dw, pt, pl = k.p

    def tap(a: str, b: str, r: str, wi: str) -> None:
        t = f.mul(f.add(f.mul(a, kw), b), ci)
        c, lc = f.begin(ci)
        body(f.load("%x", dtype, f.add(k.index(x_dims, n, r, wi), c)), f.mul(f.add(t, c), co))
        f.end(c, lc)

    k.window(i, j, h, wd, (kh, kw, sh, sw, dh, dw, pt, pl), tap)


def conv_direct_ir(symbol: str, dtype: str) -> str:
    """``(out (N, OH, OW, CO), x (N, H, W, CI), w (KH, KW, CI, CO), p = [sh, sw, dh, dw, pt,
    pl])``: for each output pixel, ``orow[o] += x * w[t + c, o]`` over the taps ``t`` inside
    the image (row-major), their input channels ``c`` in order."""
    _check(dtype, "conv_direct")
    k = _Kernel((4, 4, 4), 6)
    f = k.f
    _, oh, ow, co = k.dims[0]
    loops = k.open(oh, ow)
    k.loop = tuple(var for var, _ in loops)
    orow = k.index(k.dims[0], *k.loop)
    k.fill("%out", dtype, orow, co)
    _taps(k, dtype, k.dims[1], k.dims[2],
          lambda v, wrow: k.accumulate(dtype, "%out", orow, v, "%w", wrow, co))
    k.close(loops)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def conv_filter_direct_ir(symbol: str, dtype: str) -> str:
    """``(dw (KH, KW, CI, CO), x (N, H, W, CI), ct (N, OH, OW, CO), p)``: the kernel gradient
    over the images n0 <= n < n1, ``drow[o] += x * crow[o]`` pixel by pixel, the taps inside
    the image row-major."""
    _check(dtype, "conv_filter_direct")
    k = _Kernel((4, 4, 4), 6)
    f = k.f
    kh, kw, ci, co = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    k.fill("%dw", dtype, None, f.mul(f.mul(f.mul(kh, kw), ci), co))
    loops = k.open(oh, ow)
    k.loop = tuple(var for var, _ in loops)
    crow = k.index(k.dims[2], *k.loop)
    _taps(k, dtype, k.dims[1], k.dims[0],
          lambda v, drow: k.accumulate(dtype, "%dw", drow, v, "%ct", crow, co))
    k.close(loops)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


# kernel name (conv._call's) -> its generator
KERNELS: dict[str, Callable[[str, str], str]] = {
    "im2col_kernel": im2col_ir, "col2im_kernel": col2im_ir,
    "conv_direct_kernel": conv_direct_ir, "conv_filter_direct_kernel": conv_filter_direct_ir}
