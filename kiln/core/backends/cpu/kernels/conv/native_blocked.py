"""Register-blocked native kernels of grouped convolutions (docs/architecture.md, "Native
loops"): the float32 grouped forward and kernel gradient with their sums in registers
(:func:`conv_grouped_blocked_ir`, :func:`conv_grouped_filter_blocked_ir`: the kernels of
``native_groups.conv_grouped_ir`` and ``conv_grouped_filter_ir`` generated for the channels
per group as constants), and the vector helpers they share with the depthwise kernels of
``native_groups.py``. Per element they add the same products in the same order as those
loops, a multiply then an add: the same bits.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.codegen.ir_kernel import _div, _Kernel
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.spec import CodegenError


def _columns(k: _Kernel, b: str, geometry: tuple) -> tuple[str, str]:
    """The output columns ``jlo <= j < jhi`` whose tap ``b`` lies inside the image,
    ``0 <= j sw - pl + b dw < wd``; ``geometry = (ow, wd, sw, dw, pl)``."""
    f = k.f
    ow, wd, sw, dw, pl = geometry
    num = k.sub(pl, f.mul(b, dw))
    lo, pos, jlo = f.tmp(), f.tmp(), f.tmp()
    f.emit(f"{lo} = sdiv i64 {f.add(num, k.sub(sw, '1'))}, {sw}")
    f.emit(f"{pos} = icmp sgt i64 {num}, 0")
    f.emit(f"{jlo} = select i1 {pos}, i64 {lo}, i64 0")
    den = f.add(k.sub(wd, "1"), num)
    hi, ok, top, under, jhi = f.tmp(), f.tmp(), f.tmp(), f.tmp(), f.tmp()
    f.emit(f"{hi} = sdiv i64 {den}, {sw}")
    f.emit(f"{ok} = icmp sge i64 {den}, 0")
    f.emit(f"{top} = select i1 {ok}, i64 {f.add(hi, '1')}, i64 0")
    f.emit(f"{under} = icmp slt i64 {top}, {ow}")
    f.emit(f"{jhi} = select i1 {under}, i64 {top}, i64 {ow}")
    return jlo, jhi


def _splat(f, lanes: int, scalar: str) -> str:
    """A ``<lanes x float>`` of ``scalar`` in every lane."""
    one, out = f.tmp(), f.tmp()
    f.emit(f"{one} = insertelement <{lanes} x float> poison, float {scalar}, i64 0")
    f.emit(f"{out} = shufflevector <{lanes} x float> {one}, <{lanes} x float> poison, "
           f"<{lanes} x i32> zeroinitializer")
    return out


def _mul_add(f, vec: str, acc: str, a: str, b: str) -> None:
    """``*acc = *acc + a * b`` for the vector alloca ``acc`` (a multiply then an add, rounded
    as the scalar loops of ``native_groups`` round)."""
    sv, prod, new = f.tmp(), f.tmp(), f.tmp()
    f.emit(f"{sv} = load {vec}, ptr {acc}")
    f.emit(f"{prod} = fmul {vec} {a}, {b}")
    f.emit(f"{new} = fadd {vec} {sv}, {prod}")
    f.emit(f"store {vec} {new}, ptr {acc}")


def _vector(f, op: str, lanes: int, arr: str, index: str, value: str | None = None) -> str:
    """Loads (``op`` "load") or stores ``value`` at ``arr[index:index + lanes]``."""
    g = f.tmp()
    f.emit(f"{g} = getelementptr inbounds float, ptr {arr}, i64 {index}")
    if op == "store":
        f.emit(f"store <{lanes} x float> {value}, ptr {g}, align 4")
        return g
    v = f.tmp()
    f.emit(f"{v} = load <{lanes} x float>, ptr {g}, align 4")
    return v


def _filter_rows(k: _Kernel, x_dims: list, ct_dims: list, geometry: tuple,
                 block: Callable[[str, str, str, str, str, str, str], None]) -> None:
    """The blocked kernel gradients' loops: for each image, output row, tap row ``a`` inside
    the image and tap column ``b``, ``block(n, i, hi, a, b, jlo, jhi)`` where the output
    columns ``jlo <= j < jhi`` see tap (a, b) inside the image (no per-pixel checks)."""
    f = k.f
    kh, kw, sh, sw, dh, dw, pt, pl = geometry
    _, h, wd, _ = x_dims
    _, oh, ow, _ = ct_dims
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    a, la = f.begin(kh)
    hi = k.position(i, sh, pt, a, dh)
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(kw)
    jlo, jhi = _columns(k, b, (ow, wd, sw, dw, pl))
    block(n, i, hi, a, b, jlo, jhi)
    f.end(b, lb)
    f.done(row_ok)
    f.end(a, la)
    f.end(i, li)
    f.end(n, ln)


def grouped_filter_lanes(cog: int) -> int | None:
    """The vector width of :func:`conv_grouped_filter_blocked_ir` for ``cog`` output channels
    per group (whole vectors of 16, 8 or 4 floats, at most 4 of them), or None."""
    for lanes in (16, 8, 4):
        if cog % lanes == 0 and cog // lanes <= 4:
            return lanes
    return None


def _blocked_start(kind: str, dtype: str, cog: int) -> tuple[_Kernel, int, int]:
    """A register-blocked grouped kernel's Func, vector width and vectors per group."""
    lanes = grouped_filter_lanes(cog)
    if dtype != "float32" or lanes is None:
        raise CodegenError(f"native blocked grouped {kind}: {dtype}, {cog} per group")
    return _Kernel((4, 4, 4), 7), lanes, cog // lanes


def conv_grouped_filter_blocked_ir(symbol: str, dtype: str, cig: int, cog: int) -> str:
    """The float32 grouped kernel gradient (``conv_grouped_filter_kernel``'s arguments) with
    ``cig`` input and ``cog`` output channels per group as constants: per group, tap and block
    of ``R`` input channels, the ``R x cog`` sums of ``dw`` in registers over an output row's
    columns (loaded and stored once per row), each pixel's ``cog`` cotangents loaded once for
    the block and each input value broadcast once: per element the same products added in the
    same pixel order, a multiply then an add (``native_groups.conv_grouped_filter_ir``'s
    bits)."""
    k, lanes, nv = _blocked_start("filter", dtype, cog)
    f = k.f
    sh, sw, dh, dw, pt, pl, groups = k.p
    kh, kw, _, co = k.dims[0]
    x_dims, ct_dims = k.dims[1], k.dims[2]
    rows = max(1, min(cig, 16 // nv))
    vec = f"<{lanes} x float>"
    k.fill("%dw", "float32", None, f.mul(f.mul(f.mul(kh, kw), str(cig)), co))

    def channels(tag, c0, r_count, n, i, hi, a, b, g, jlo, jhi):
        accs = [[f"%{tag}.{r}.{v}" for v in range(nv)] for r in range(r_count)]
        drows = []
        for r in range(r_count):
            drow = f.add(f.mul(f.add(f.mul(f.add(f.mul(a, kw), b), str(cig)),
                                     f.add(c0, str(r))), co), f.mul(g, str(cog)))
            drows.append(drow)
            for v in range(nv):
                f.allocas.append(f"  {accs[r][v]} = alloca {vec}")
                start = _vector(f, "load", lanes, "%dw", f.add(drow, str(v * lanes)))
                f.emit(f"store {vec} {start}, ptr {accs[r][v]}")
        j, lj = f.begin(jhi, jlo)
        wi = k.position(j, sw, pl, b, dw)
        crow = f.add(k.index(ct_dims, n, i, j), f.mul(g, str(cog)))
        cvs = [_vector(f, "load", lanes, "%ct", f.add(crow, str(v * lanes))) for v in range(nv)]
        xrow = f.add(f.add(k.index(x_dims, n, hi, wi), f.mul(g, str(cig))), c0)
        for r in range(r_count):
            xs = _splat(f, lanes, f.load("%x", "float32", f.add(xrow, str(r))).ref)
            for v in range(nv):
                _mul_add(f, vec, accs[r][v], xs, cvs[v])
        f.end(j, lj)
        for r in range(r_count):
            for v in range(nv):
                acc = f.tmp()
                f.emit(f"{acc} = load {vec}, ptr {accs[r][v]}")
                _vector(f, "store", lanes, "%dw", f.add(drows[r], str(v * lanes)), acc)

    def block(n, i, hi, a, b, jlo, jhi):
        g, lg = f.begin(groups)
        whole = cig // rows
        if whole:
            cb, lcb = f.begin(str(whole))
            channels("gfa", f.mul(cb, str(rows)), rows, n, i, hi, a, b, g, jlo, jhi)
            f.end(cb, lcb)
        if cig % rows:
            channels("gfb", str(whole * rows), cig % rows, n, i, hi, a, b, g, jlo, jhi)
        f.end(g, lg)

    _filter_rows(k, x_dims, ct_dims, (kh, kw, sh, sw, dh, dw, pt, pl), block)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


GROUPED_PIXELS = 8  # accumulators (pixels x vectors) of the blocked grouped forward


def conv_grouped_blocked_ir(symbol: str, dtype: str, cig: int, cog: int) -> str:
    """The float32 grouped forward (``native_groups.conv_grouped_ir``'s arguments) with ``cig``
    input and ``cog`` output channels per group as constants: per group, the ``cog`` sums of
    ``P`` pixels of a row in registers over the window's taps and the group's input channels
    (the scalar loops add into a scratch row in memory), each kernel vector loaded once for the
    ``P`` pixels and each input value broadcast once (``P = GROUPED_PIXELS / vectors``; the
    row's last block ends at its end, recomputing a few pixels of the one before; rows narrower
    than a block pixel by pixel): per element the same products added in the same order (taps,
    then input channels), a multiply then an add (the scalar loops' bits)."""
    k, lanes, nv = _blocked_start("forward", dtype, cog)
    f = k.f
    sh, sw, dh, dw, pt, pl, groups = k.p
    _, oh, ow, co = k.dims[0]
    x_dims = k.dims[1]
    _, h, wd, _ = x_dims
    kh, kw = k.dims[2][:2]
    rb = max(1, GROUPED_PIXELS // nv)
    vec = f"<{lanes} x float>"
    accs = [[f"%gbacc.{r}.{v}" for v in range(nv)] for r in range(rb)]
    for row in accs:
        for name in row:
            f.allocas.append(f"  {name} = alloca {vec}")

    def pixels(n: str, i: str, j0: str, width: int, checked: bool = True) -> None:
        g, lg = f.begin(groups)
        for r in range(width):
            for v in range(nv):
                f.emit(f"store {vec} zeroinitializer, ptr {accs[r][v]}")
        a, la = f.begin(kh)
        hi = k.position(i, sh, pt, a, dh)
        row_ok = f.when(k.inside(hi, h))
        b, lb = f.begin(kw)
        cols = [k.position(f.add(j0, str(r)), sw, pl, b, dw)
                for r in range(width)]
        c, lc = f.begin(str(cig))
        wrow = f.add(f.mul(f.add(f.mul(f.add(f.mul(a, kw), b), str(cig)), c), co),
                     f.mul(g, str(cog)))
        wvs = [_vector(f, "load", lanes, "%w", f.add(wrow, str(v * lanes))) for v in range(nv)]
        for r in range(width):
            col_ok = f.when(k.inside(cols[r], wd)) if checked else None
            xi = f.add(f.add(k.index(x_dims, n, hi, cols[r]), f.mul(g, str(cig))), c)
            xs = _splat(f, lanes, f.load("%x", "float32", xi).ref)
            for v in range(nv):
                _mul_add(f, vec, accs[r][v], xs, wvs[v])
            if col_ok is not None:
                f.done(col_ok)
        f.end(c, lc)
        f.end(b, lb)
        f.done(row_ok)
        f.end(a, la)
        for r in range(width):
            orow = f.add(k.index(k.dims[0], n, i, f.add(j0, str(r))), f.mul(g, str(cog)))
            for v in range(nv):
                acc = f.tmp()
                f.emit(f"{acc} = load {vec}, ptr {accs[r][v]}")
                _vector(f, "store", lanes, "%out", f.add(orow, str(v * lanes)), acc)
        f.end(g, lg)

    def block(n: str, i: str, j0: str, width: int) -> None:
        if width == 1:
            pixels(n, i, j0, 1)
            return
        # every tap of every pixel of the block inside the row: no checks per pixel
        first = k.sub(f.mul(j0, sw), pl)
        last = f.add(k.sub(f.mul(f.add(j0, str(width - 1)), sw), pl),
                     f.mul(k.sub(kw, "1"), dw))
        inner = f.scalar("a >= 0 and b < w", {"a": Val(first, "i64"), "b": Val(last, "i64"),
                                              "w": Val(wd, "i64")})
        fast = f.when(inner)
        pixels(n, i, j0, width, checked=False)
        f.done(fast)
        slow = f.when(f.scalar("not t", {"t": inner}))
        pixels(n, i, j0, width)
        f.done(slow)

    _row_blocks(k, oh, ow, rb, block)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def _row_blocks(k: _Kernel, oh: str, ow: str, rb: int,
                block: Callable[[str, str, str, int], None]) -> None:
    """For each image ``n0 <= n < n1`` and output row ``i``: ``block(n, i, j0, rb)`` for
    blocks of ``rb`` pixels ``j0 <= j < j0 + rb`` covering the row (the last one ending at its
    end, recomputing a few pixels of the one before), or ``block(n, i, j, 1)`` for each pixel
    of a row narrower than ``rb``."""
    f = k.f
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    wide = f.when(f.scalar("w >= r", {"w": Val(ow, "i64"), "r": Val(str(rb), "i64")}))
    jb, ljb = f.begin(_div(f, f.add(ow, str(rb - 1)), str(rb)))
    j0 = f.scalar("min(j, w)", {"j": Val(f.mul(jb, str(rb)), "i64"),
                                "w": Val(k.sub(ow, str(rb)), "i64")})
    block(n, i, j0.ref, rb)
    f.end(jb, ljb)
    f.done(wide)
    narrow = f.when(f.scalar("w < r", {"w": Val(ow, "i64"), "r": Val(str(rb), "i64")}))
    j, lj = f.begin(ow)
    block(n, i, j, 1)
    f.end(j, lj)
    f.done(narrow)
    f.end(i, li)
    f.end(n, ln)
