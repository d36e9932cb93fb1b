"""Native (LLVM IR) twins of the grouped convolution kernels of ``conv_groups.py`` (depthwise
included): ``conv_grouped_kernel``, ``conv_grouped_filter_kernel`` and
``conv_grouped_input_kernel`` (docs/architecture.md, "Native loops").

The same layout of arguments as ``native_conv.py`` (flat arrays; the parameter array holds
the arrays' shapes, then ``p = [sh, sw, dh, dw, pt, pl, groups]``, then the range ``n0, n1``)
and the same loops, order and float arithmetic as the numba kernels (the same bits).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.native_conv import _check, _div, _Kernel


def _windows(k: _Kernel, x_dims: list[str], w_dims: list[str], body: Callable) -> None:
    """For each tap (a, b) of output pixel (n, i, j) = ``k.loop`` inside the image, each group
    g and input channel c of the group: ``body(x index, w row index, first, count)`` where the
    group's output channels are ``first <= o < first + count``."""
    f = k.f
    n, i, j = k.loop
    _, h, wd, ci = x_dims
    kh, kw, cig, co = w_dims
    sh, sw, dh, dw, pt, pl, groups = k.p
    cog = _div(f, co, groups)
    a, la = f.begin(kh)
    hi = f.add(k.sub(f.mul(i, sh), pt), f.mul(a, dh))
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(kw)
    wi = f.add(k.sub(f.mul(j, sw), pl), f.mul(b, dw))
    col_ok = f.when(k.inside(wi, wd))
    g, lg = f.begin(groups)
    c, lc = f.begin(cig)
    xi = f.add(k.index(x_dims, n, hi, wi), f.add(f.mul(g, cig), c))
    wrow = f.mul(f.add(f.mul(f.add(f.mul(a, kw), b), cig), c), co)
    # the group's channels as first + t for t < cog: a trip count LLVM sees is the same for
    # every group (range(first, first + cog) was not, and its vectorization checks ran per
    # group: 2x slower than numba's loop on depthwise convolutions)
    body(xi, wrow, f.mul(g, cog), cog)
    f.end(c, lc)
    f.end(g, lg)
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    f.end(a, la)


def conv_grouped_ir(symbol: str, dtype: str) -> str:
    """``(out (N, OH, OW, CO), x (N, H, W, G*CIG), w (KH, KW, CIG, CO), p)``: accumulated per
    output pixel in a scratch row (numba's ``acc``), then stored."""
    _check(dtype, "conv_grouped")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    _, oh, ow, co = k.dims[0]
    acc = f.tmp()
    f.emit(f"{acc} = alloca {'float' if dtype == 'float32' else 'double'}, i64 {co}")
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    k.loop = (n, i, j)
    o, lo = f.begin(co)
    f.store(acc, dtype, o, f.scalar("0", {}))
    f.end(o, lo)

    def body(xi: str, wrow: str, first: str, count: str) -> None:
        v = f.load("%x", dtype, xi)
        t, lo = f.begin(count)
        o = f.add(first, t)
        prod = f.expr.arith("*", v, f.load("%w", dtype, f.add(wrow, o)))
        f.store(acc, dtype, o, f.expr.arith("+", f.load(acc, dtype, o), prod))
        f.end(t, lo)

    _windows(k, k.dims[1], k.dims[2], body)
    orow = k.index(k.dims[0], n, i, j)
    o, lo = f.begin(co)
    f.store("%out", dtype, f.add(orow, o), f.load(acc, dtype, o))
    f.end(o, lo)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def conv_grouped_filter_ir(symbol: str, dtype: str) -> str:
    """``(dw (KH, KW, CIG, CO), x, ct (N, OH, OW, CO), p)``: the kernel gradient over the
    images n0 <= n < n1."""
    _check(dtype, "conv_grouped_filter")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    kh, kw, cig, co = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    e, le = f.begin(f.mul(f.mul(f.mul(kh, kw), cig), co))
    f.store("%dw", dtype, e, f.scalar("0", {}))
    f.end(e, le)
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    k.loop = (n, i, j)
    crow = k.index(k.dims[2], n, i, j)

    def body(xi: str, wrow: str, first: str, count: str) -> None:
        v = f.load("%x", dtype, xi)
        t, lo = f.begin(count)
        o = f.add(first, t)
        at = f.add(wrow, o)
        prod = f.expr.arith("*", v, f.load("%ct", dtype, f.add(crow, o)))
        f.store("%dw", dtype, at, f.expr.arith("+", f.load("%dw", dtype, at), prod))
        f.end(t, lo)

    _windows(k, k.dims[1], k.dims[0], body)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


def conv_grouped_input_ir(symbol: str, dtype: str) -> str:
    """``(dx (N, H, W, G*CIG), ct (N, OH, OW, CO), w (KH, KW, CIG, CO), p)``: the input
    gradient, each input element's sum over its group's output channels in a register."""
    _check(dtype, "conv_grouped_input")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    _, h, wd, ci = k.dims[0]
    _, oh, ow, _ = k.dims[1]
    zero = f.scalar("0", {})
    f.var("s", f.expr.cast(zero, "f32" if dtype == "float32" else "f64"))
    n, ln = f.begin(k.n1, k.n0)
    base = k.index(k.dims[0], n)
    e, le = f.begin(f.mul(f.mul(h, wd), ci))
    f.store("%dx", dtype, f.add(base, e), zero)
    f.end(e, le)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    k.loop = (n, i, j)
    crow = k.index(k.dims[1], n, i, j)

    def body(xi: str, wrow: str, first: str, count: str) -> None:
        f.set("s", f.load("%dx", dtype, xi))
        t, lo = f.begin(count)
        o = f.add(first, t)
        prod = f.expr.arith("*", f.load("%ct", dtype, f.add(crow, o)),
                            f.load("%w", dtype, f.add(wrow, o)))
        f.set("s", f.expr.arith("+", f.get("s"), prod))
        f.end(t, lo)
        f.store("%dx", dtype, xi, f.get("s"))

    _windows(k, k.dims[0], k.dims[2], body)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dx", "ct", "w", "p"], noalias=True)


TWINS: dict[str, Callable[[str, str], str]] = {
    "conv_grouped_kernel": conv_grouped_ir,
    "conv_grouped_filter_kernel": conv_grouped_filter_ir,
    "conv_grouped_input_kernel": conv_grouped_input_ir}
