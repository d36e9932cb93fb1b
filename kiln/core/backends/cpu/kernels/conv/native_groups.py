"""The grouped convolution kernels (LLVM IR, their one implementation) that ``conv_groups.py``
runs: ``conv_grouped_kernel``, ``conv_grouped_filter_kernel`` and ``conv_grouped_input_kernel``
(direct loops over the taps, vectorized over each group's output channels), and the depthwise
ones (one input and one output channel per group) ``conv_depthwise_kernel``,
``conv_depthwise_filter_kernel`` and ``conv_depthwise_input_kernel`` (docs/architecture.md,
"Native loops").

The same layout of arguments as ``native_conv.py`` (flat arrays; the parameter array holds
the arrays' shapes, then ``p = [sh, sw, dh, dw, pt, pl, groups]``, then the range ``n0, n1``)
and its strict float arithmetic (checked against the NumPy references).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.codegen.ir_kernel import _check, _div, _Kernel
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.kernels.conv.native_blocked import (
    _filter_rows,
    _mul_add,
    _row_blocks,
    _vector,
)


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
    output pixel in a scratch row ``acc``, then stored."""
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
DEPTHWISE_FILTER_VECTORS = 4  # channel vectors whose kernel-gradient sums one pass keeps


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
        hi = k.position(i, sh, pt, a, dh)
        row_ok = f.when(k.inside(hi, h))
        b, lb = f.begin(kw)
        wv = _vector(f, "load", 16, "%w", f.add(f.mul(f.add(f.mul(a, kw), b), c), c0))
        for r in range(width):
            wi = k.position(f.add(j0, str(r)), sw, pl, b, dw)
            col_ok = f.when(k.inside(wi, wd))
            xv = _vector(f, "load", 16, "%x", f.add(k.index(k.dims[1], n, hi, wi), c0))
            _mul_add(f, vec, f"%dwacc{r}", xv, wv)
            f.done(col_ok)
        f.end(b, lb)
        f.done(row_ok)
        f.end(a, la)
        for r in range(width):
            sv = f.tmp()
            f.emit(f"{sv} = load {vec}, ptr %dwacc{r}")
            _vector(f, "store", 16, "%out",
                    f.add(k.index(k.dims[0], n, i, f.add(j0, str(r))), c0), sv)
        f.end(q, lq)

    _row_blocks(k, oh, ow, rb, vectors)
    # the channels past the last whole vector, pixel by pixel
    acc = f.tmp()
    f.emit(f"{acc} = alloca float, i64 {c}")
    rest = k.sub(c, full)
    tail = f.when(f.scalar("r > 0", {"r": Val(rest, "i64")}))
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    orow = k.index(k.dims[0], n, i, j)
    k.fill(acc, "float32", None, rest)
    k.window(i, j, h, wd, (kh, kw, sh, sw, dh, dw, pt, pl),
             lambda a, b, hi, wi: _depthwise_row(
                 k, "float32", acc, "0", "%x", f.add(k.index(k.dims[1], n, hi, wi), full),
                 "%w", f.add(f.mul(f.add(f.mul(a, kw), b), c), full), rest))
    o, lo = f.begin(rest)
    f.store("%out", "float32", f.add(f.add(orow, full), o), f.load(acc, "float32", o))
    f.end(o, lo)
    k.close(loops)
    f.done(tail)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def _depthwise_filter_vectors(symbol: str, k: _Kernel) -> str:
    """The float32 depthwise kernel gradient with each tap's 16-channel sums in registers over
    an output row's columns (loaded from and stored to ``dw`` once per row and tap: the scalar
    loops read and write ``dw`` at every pixel), :data:`DEPTHWISE_FILTER_VECTORS` vectors at a
    time (independent chains of adds: one alone waits for each add's latency), then the
    remaining vectors one by one: per element the same products added in the same pixel order,
    a multiply then an add (the same bits). The columns of a tap are those inside the image
    (``native_blocked._columns``); the channels past the last whole vector as
    :func:`depthwise_ir`'s loops."""
    f = k.f
    sh, sw, dh, dw, pt, pl, _ = k.p
    kh, kw, _, c = k.dims[0]
    x_dims, ct_dims = k.dims[1], k.dims[2]
    vec = "<16 x float>"
    qb = DEPTHWISE_FILTER_VECTORS
    for v in range(qb):
        f.allocas.append(f"  %dfacc{v} = alloca {vec}")
    full = f.mul(_div(f, c, "16"), "16")
    blocks = _div(f, c, str(16 * qb))
    k.fill("%dw", "float32", None, f.mul(f.mul(kh, kw), c))

    def vectors(n, i, hi, a, b, jlo, jhi, c0, width):
        """Channels ``c0 <= ch < c0 + 16 width`` of tap (a, b) over the row's columns."""
        drow = f.add(f.mul(f.add(f.mul(a, kw), b), c), c0)
        for v in range(width):
            f.emit(f"store {vec} {_vector(f, 'load', 16, '%dw', f.add(drow, str(16 * v)))}, "
                   f"ptr %dfacc{v}")
        j, lj = f.begin(jhi, jlo)
        wi = k.position(j, sw, pl, b, dw)
        xrow = f.add(k.index(x_dims, n, hi, wi), c0)
        crow = f.add(k.index(ct_dims, n, i, j), c0)
        for v in range(width):
            xv = _vector(f, "load", 16, "%x", f.add(xrow, str(16 * v)))
            cv = _vector(f, "load", 16, "%ct", f.add(crow, str(16 * v)))
            _mul_add(f, vec, f"%dfacc{v}", xv, cv)
        f.end(j, lj)
        for v in range(width):
            acc = f.tmp()
            f.emit(f"{acc} = load {vec}, ptr %dfacc{v}")
            _vector(f, "store", 16, "%dw", f.add(drow, str(16 * v)), acc)

    def block(n, i, hi, a, b, jlo, jhi):
        q, lq = f.begin(blocks)
        vectors(n, i, hi, a, b, jlo, jhi, f.mul(q, str(16 * qb)), qb)
        f.end(q, lq)
        q, lq = f.begin(_div(f, c, "16"), f.mul(blocks, str(qb)))
        vectors(n, i, hi, a, b, jlo, jhi, f.mul(q, "16"), 1)
        f.end(q, lq)

    _filter_rows(k, x_dims, ct_dims, (kh, kw, sh, sw, dh, dw, pt, pl), block)
    # the channels past the last whole vector, pixel by pixel
    rest = k.sub(c, full)
    tail = f.when(f.scalar("r > 0", {"r": Val(rest, "i64")}))
    loops = k.open(ct_dims[1], ct_dims[2])
    n, i, j = (var for var, _ in loops)
    crow = f.add(k.index(ct_dims, n, i, j), full)
    k.window(i, j, x_dims[1], x_dims[2], (kh, kw, sh, sw, dh, dw, pt, pl),
             lambda a, b, hi, wi: _depthwise_row(
                 k, "float32", "%dw", f.add(f.mul(f.add(f.mul(a, kw), b), c), full), "%x",
                 f.add(k.index(x_dims, n, hi, wi), full), "%ct", crow, rest))
    k.close(loops)
    f.done(tail)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


def depthwise_ir(symbol: str, dtype: str, kind: str) -> str:
    """The depthwise form of ``conv_grouped_ir`` (``kind`` "forward": ``(out, x, w, p)``),
    ``conv_grouped_filter_ir`` ("filter": ``(dw, x, ct, p)``) or ``conv_grouped_input_ir``
    ("input": ``(dx, ct, w, p)``) where every group has one input and one output channel; the
    arguments and parameters of those kernels, the same sums per element."""
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
    if kind == "filter" and dtype == "float32":
        return _depthwise_filter_vectors(symbol, k)
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


KERNELS: dict[str, Callable[[str, str], str]] = {
    "conv_depthwise_kernel": lambda s, dt: depthwise_ir(s, dt, "forward"),
    "conv_depthwise_filter_kernel": lambda s, dt: depthwise_ir(s, dt, "filter"),
    "conv_depthwise_input_kernel": lambda s, dt: depthwise_ir(s, dt, "input"),
    "conv_grouped_kernel": conv_grouped_ir,
    "conv_grouped_filter_kernel": conv_grouped_filter_ir,
    "conv_grouped_input_kernel": conv_grouped_input_ir}
