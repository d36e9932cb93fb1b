"""Native (LLVM IR) twins of the grouped convolution kernels of ``conv_groups.py``:
``conv_grouped_kernel``, ``conv_grouped_filter_kernel`` and ``conv_grouped_input_kernel``, and
the depthwise ones (one input and one output channel per group) ``conv_depthwise_kernel``,
``conv_depthwise_filter_kernel`` and ``conv_depthwise_input_kernel`` (docs/architecture.md,
"Native loops").

The same layout of arguments as ``native_conv.py`` (flat arrays; the parameter array holds
the arrays' shapes, then ``p = [sh, sw, dh, dw, pt, pl, groups]``, then the range ``n0, n1``)
and the same loops, order and float arithmetic as the numba kernels (the same bits).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.llvm_expr import Val
from kiln.core.backends.cpu.native_conv import _check, _div, _Kernel


def _windows(k: _Kernel, x_dims: list[str], w_dims: list[str], body: Callable,
             cog: int | None = None) -> None:
    """For each tap (a, b) of output pixel (n, i, j) = ``k.loop`` inside the image, each group
    g and input channel c of the group: ``body(x index, w row index, first, count)`` where the
    group's output channels are ``first <= o < first + count`` (``count`` the constant
    ``cog`` where given: a loop LLVM turns into whole vectors, no run-time trip count)."""
    f = k.f
    n, i, j = k.loop
    _, h, wd, ci = x_dims
    kh, kw, cig, co = w_dims
    sh, sw, dh, dw, pt, pl, groups = k.p
    per_group = _div(f, co, groups) if cog is None else str(cog)

    def tap(a: str, b: str, hi: str, wi: str) -> None:
        g, lg = f.begin(groups)
        c, lc = f.begin(cig)
        xi = f.add(k.index(x_dims, n, hi, wi), f.add(f.mul(g, cig), c))
        wrow = f.mul(f.add(f.mul(f.add(f.mul(a, kw), b), cig), c), co)
        body(xi, wrow, f.mul(g, per_group), per_group)
        f.end(c, lc)
        f.end(g, lg)

    k.window(i, j, h, wd, (kh, kw, sh, sw, dh, dw, pt, pl), tap)


def conv_grouped_ir(symbol: str, dtype: str, cog: int | None = None) -> str:
    """``(out (N, OH, OW, CO), x (N, H, W, G*CIG), w (KH, KW, CIG, CO), p)``: accumulated per
    output pixel in a scratch row (numba's ``acc``), then stored."""
    _check(dtype, "conv_grouped")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    _, oh, ow, co = k.dims[0]
    acc = f.tmp()
    f.emit(f"{acc} = alloca {'float' if dtype == 'float32' else 'double'}, i64 {co}")
    loops = k.open(oh, ow)
    k.loop = tuple(var for var, _ in loops)
    k.fill(acc, dtype, None, co)
    _windows(k, k.dims[1], k.dims[2], lambda xi, wrow, first, count: k.accumulate(
        dtype, acc, None, f.load("%x", dtype, xi), "%w", wrow, count, first), cog)
    orow = k.index(k.dims[0], *k.loop)
    o, lo = f.begin(co)
    f.store("%out", dtype, f.add(orow, o), f.load(acc, dtype, o))
    f.end(o, lo)
    k.close(loops)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def conv_grouped_filter_ir(symbol: str, dtype: str, cog: int | None = None) -> str:
    """``(dw (KH, KW, CIG, CO), x, ct (N, OH, OW, CO), p)``: the kernel gradient over the
    images n0 <= n < n1."""
    _check(dtype, "conv_grouped_filter")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    kh, kw, cig, co = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    k.fill("%dw", dtype, None, f.mul(f.mul(f.mul(kh, kw), cig), co))
    loops = k.open(oh, ow)
    k.loop = tuple(var for var, _ in loops)
    crow = k.index(k.dims[2], *k.loop)
    # drow[o] += v * ct[crow + o], o = first + t: dst row wrow, src row crow
    _windows(k, k.dims[1], k.dims[0], lambda xi, wrow, first, count: k.accumulate(
        dtype, "%dw", wrow, f.load("%x", dtype, xi), "%ct", crow, count, first), cog)
    k.close(loops)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


def conv_grouped_input_ir(symbol: str, dtype: str, cog: int | None = None) -> str:
    """``(dx (N, H, W, G*CIG), ct (N, OH, OW, CO), w (KH, KW, CIG, CO), p)``: the input
    gradient, each input element's sum over its group's output channels in a register."""
    _check(dtype, "conv_grouped_input")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    _, h, wd, ci = k.dims[0]
    _, oh, ow, _ = k.dims[1]
    f.var("s", f.expr.cast(f.scalar("0", {}), "f32" if dtype == "float32" else "f64"))
    n, ln = f.begin(k.n1, k.n0)
    k.fill("%dx", dtype, k.index(k.dims[0], n), f.mul(f.mul(h, wd), ci))
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

    _windows(k, k.dims[0], k.dims[2], body, cog)
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "ct", "w", "p"], noalias=True)


# Depthwise convolutions with one output channel per input channel (groups == Cin == Cout:
# Keras' DepthwiseConv2D and SeparableConv2D with depth_multiplier 1): the loops above run one
# channel per group, a scalar loop of one element; these vectorize over the channels instead
# (channel c of the image, of the kernel row and of the output line up), in the same order
# per element (taps, then images and pixels, as the loops above: the same bits).
def _depthwise_row(k: _Kernel, dtype: str, dst: str, dst_row: str, a: str, a_row: str,
                   b: str, b_row: str, count: str) -> None:
    """``dst[dst_row + c] += a[a_row + c] * b[b_row + c]`` for ``c < count``."""
    f = k.f
    c, lc = f.begin(count)
    at = f.add(dst_row, c)
    prod = f.expr.arith("*", f.load(a, dtype, f.add(a_row, c)), f.load(b, dtype, f.add(b_row, c)))
    f.store(dst, dtype, at, f.expr.arith("+", f.load(dst, dtype, at), prod))
    f.end(c, lc)


DEPTHWISE_BLOCK = 4  # output pixels of a row whose sums one pass over the taps keeps


def _depthwise_forward_vectors(symbol: str, k: _Kernel) -> str:
    """The float32 depthwise forward with each 16-channel vector's sums in registers over the
    window's taps (``<16 x float>``, a multiply then an add per tap: the grouped loops' order
    and roundings, the same bits): :data:`DEPTHWISE_BLOCK` pixels of a row at a time, each
    kernel vector loaded once for them (the row's last block ends at its end, recomputing a
    few pixels of the one before; rows narrower than a block one pixel at a time); the channels
    past the last whole vector in a scalar row, as :func:`depthwise_ir`'s loops."""
    f = k.f
    sh, sw, dh, dw, pt, pl, _ = k.p
    _, oh, ow, c = k.dims[0]
    _, h, wd, _ = k.dims[1]
    kh, kw = k.dims[2][:2]
    vec = "<16 x float>"
    rb = DEPTHWISE_BLOCK
    for r in range(rb):
        f.allocas.append(f"  %dwacc{r} = alloca {vec}")
    full = f.mul(_div(f, c, "16"), "16")

    def vectors(n: str, i: str, j0: str, width: int) -> None:
        """The whole channel vectors of pixels j0 <= j < j0 + width of row (n, i)."""
        q, lq = f.begin(_div(f, c, "16"))
        c0 = f.mul(q, "16")
        for r in range(width):
            f.emit(f"store {vec} zeroinitializer, ptr %dwacc{r}")
        a, la = f.begin(kh)
        hi = f.add(k.sub(f.mul(i, sh), pt), f.mul(a, dh))
        row_ok = f.when(k.inside(hi, h))
        b, lb = f.begin(kw)
        gw, wv = f.tmp(), f.tmp()
        f.emit(f"{gw} = getelementptr inbounds float, ptr %w, i64 "
               f"{f.add(f.mul(f.add(f.mul(a, kw), b), c), c0)}")
        f.emit(f"{wv} = load {vec}, ptr {gw}, align 4")
        for r in range(width):
            wi = f.add(k.sub(f.mul(f.add(j0, str(r)), sw), pl), f.mul(b, dw))
            col_ok = f.when(k.inside(wi, wd))
            gx, xv, sv, prod, new = (f.tmp() for _ in range(5))
            f.emit(f"{gx} = getelementptr inbounds float, ptr %x, i64 "
                   f"{f.add(k.index(k.dims[1], n, hi, wi), c0)}")
            f.emit(f"{xv} = load {vec}, ptr {gx}, align 4")
            f.emit(f"{sv} = load {vec}, ptr %dwacc{r}")
            f.emit(f"{prod} = fmul {vec} {xv}, {wv}")
            f.emit(f"{new} = fadd {vec} {sv}, {prod}")
            f.emit(f"store {vec} {new}, ptr %dwacc{r}")
            f.done(col_ok)
        f.end(b, lb)
        f.done(row_ok)
        f.end(a, la)
        for r in range(width):
            go, sv = f.tmp(), f.tmp()
            f.emit(f"{sv} = load {vec}, ptr %dwacc{r}")
            f.emit(f"{go} = getelementptr inbounds float, ptr %out, i64 "
                   f"{f.add(k.index(k.dims[0], n, i, f.add(j0, str(r))), c0)}")
            f.emit(f"store {vec} {sv}, ptr {go}, align 4")
        f.end(q, lq)

    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    wide = f.when(f.scalar("w >= r", {"w": Val(ow, "i64"), "r": Val(str(rb), "i64")}))
    jb, ljb = f.begin(_div(f, f.add(ow, str(rb - 1)), str(rb)))
    j0 = f.scalar("min(j, w)", {"j": Val(f.mul(jb, str(rb)), "i64"),
                                "w": Val(k.sub(ow, str(rb)), "i64")})
    vectors(n, i, j0.ref, rb)
    f.end(jb, ljb)
    f.done(wide)
    narrow = f.when(f.scalar("w < r", {"w": Val(ow, "i64"), "r": Val(str(rb), "i64")}))
    j, lj = f.begin(ow)
    vectors(n, i, j, 1)
    f.end(j, lj)
    f.done(narrow)
    f.end(i, li)
    f.end(n, ln)
    # the channels past the last whole vector, pixel by pixel
    acc = f.tmp()
    f.emit(f"{acc} = alloca float, i64 {c}")
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    orow = k.index(k.dims[0], n, i, j)
    rest = k.sub(c, full)
    k.fill(acc, "float32", None, rest)
    k.window(i, j, h, wd, (kh, kw, sh, sw, dh, dw, pt, pl),
             lambda a, b, hi, wi: _depthwise_row(
                 k, "float32", acc, "0", "%x", f.add(k.index(k.dims[1], n, hi, wi), full),
                 "%w", f.add(f.mul(f.add(f.mul(a, kw), b), c), full), rest))
    o, lo = f.begin(rest)
    f.store("%out", "float32", f.add(f.add(orow, full), o), f.load(acc, "float32", o))
    f.end(o, lo)
    k.close(loops)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def depthwise_ir(symbol: str, dtype: str, kind: str) -> str:
    """The depthwise twin of ``conv_grouped_kernel`` (``kind`` "forward": ``(out, x, w,
    p)``), ``conv_grouped_filter_kernel`` ("filter": ``(dw, x, ct, p)``) or
    ``conv_grouped_input_kernel`` ("input": ``(dx, ct, w, p)``) where every group has one
    input and one output channel; the arguments and parameters of those kernels."""
    _check(dtype, "depthwise")
    k = _Kernel((4, 4, 4), 7)
    f = k.f
    sh, sw, dh, dw, pt, pl, _ = k.p
    if kind == "forward" and dtype == "float32":
        return _depthwise_forward_vectors(symbol, k)
    if kind == "forward":
        _, oh, ow, c = k.dims[0]
        _, h, wd, _ = k.dims[1]
        kw = k.dims[2][1]
        acc = f.tmp()
        f.emit(f"{acc} = alloca {'float' if dtype == 'float32' else 'double'}, i64 {c}")
        loops = k.open(oh, ow)
        n, i, j = (var for var, _ in loops)
        k.fill(acc, dtype, None, c)
        k.window(i, j, h, wd, (k.dims[2][0], kw, sh, sw, dh, dw, pt, pl),
                 lambda a, b, hi, wi: _depthwise_row(
                     k, dtype, acc, "0", "%x", k.index(k.dims[1], n, hi, wi), "%w",
                     f.mul(f.add(f.mul(a, kw), b), c), c))
        orow = k.index(k.dims[0], n, i, j)
        o, lo = f.begin(c)
        f.store("%out", dtype, f.add(orow, o), f.load(acc, dtype, o))
        f.end(o, lo)
        k.close(loops)
        return f.function(symbol, ["out", "x", "w", "p"], noalias=True)
    if kind == "filter":
        kh, kw, _, c = k.dims[0]
        _, h, wd, _ = k.dims[1]
        _, oh, ow, _ = k.dims[2]
        k.fill("%dw", dtype, None, f.mul(f.mul(kh, kw), c))
        loops = k.open(oh, ow)
        n, i, j = (var for var, _ in loops)
        crow = k.index(k.dims[2], n, i, j)
        k.window(i, j, h, wd, (kh, kw, sh, sw, dh, dw, pt, pl),
                 lambda a, b, hi, wi: _depthwise_row(
                     k, dtype, "%dw", f.mul(f.add(f.mul(a, kw), b), c), "%x",
                     k.index(k.dims[1], n, hi, wi), "%ct", crow, c))
        k.close(loops)
        return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)
    if kind != "input":
        raise ValueError(f"depthwise_ir: unknown kind {kind!r}")
    _, h, wd, c = k.dims[0]
    _, oh, ow, _ = k.dims[1]
    kh, kw = k.dims[2][:2]
    n, ln = f.begin(k.n1, k.n0)
    k.fill("%dx", dtype, k.index(k.dims[0], n), f.mul(f.mul(h, wd), c))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    crow = k.index(k.dims[1], n, i, j)
    k.window(i, j, h, wd, (kh, kw, sh, sw, dh, dw, pt, pl),
             lambda a, b, hi, wi: _depthwise_row(
                 k, dtype, "%dx", k.index(k.dims[0], n, hi, wi), "%ct", crow, "%w",
                 f.mul(f.add(f.mul(a, kw), b), c), c))
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "ct", "w", "p"], noalias=True)


TWINS: dict[str, Callable[[str, str], str]] = {
    "conv_depthwise_kernel": lambda s, dt: depthwise_ir(s, dt, "forward"),
    "conv_depthwise_filter_kernel": lambda s, dt: depthwise_ir(s, dt, "filter"),
    "conv_depthwise_input_kernel": lambda s, dt: depthwise_ir(s, dt, "input"),
    "conv_grouped_kernel": conv_grouped_ir,
    "conv_grouped_filter_kernel": conv_grouped_filter_ir,
    "conv_grouped_input_kernel": conv_grouped_input_ir}
