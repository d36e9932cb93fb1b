"""Native (LLVM IR) twins of the convolution and pooling kernels of ``conv.py`` and
``pool.py``: ``im2col_kernel``, ``col2im_kernel``, ``conv_direct_kernel``,
``conv_filter_direct_kernel``, ``max_pool_kernel`` and ``max_pool_grad_tiled_kernel``
(docs/architecture.md, "Native loops").

Each generator writes its numba kernel's loops in the same order with the same float
arithmetic (no reassociation, no contraction: the same bits, checked by
``tests/core/backends/test_native_loops.py``). The arrays come flat; the parameter array
holds every array's shape (in argument order), then the kernel's own parameters ``p``, then
the range ``n0, n1`` of the outer loop that ``conv._call`` splits over threads. The pointers
are ``noalias`` (the outputs are fresh buffers, as for the numba kernels' ``noalias``).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.codegen import CodegenError
from kiln.core.backends.cpu.llvm_expr import Val
from kiln.core.backends.cpu.llvm_loop import Func

FLOAT = ("float32", "float64")


class _Kernel:
    """A Func with the parameter layout above: ``dims[k]`` are array k's sizes (SSA
    names), ``p`` the kernel's parameters, ``n0``/``n1`` the outer range."""

    def __init__(self, ranks: tuple[int, ...], n_p: int):
        self.f = f = Func("")
        at = 0
        self.dims = []
        for r in ranks:
            self.dims.append([f.param(at + d) for d in range(r)])
            at += r
        self.p = [f.param(at + k) for k in range(n_p)]
        self.n0, self.n1 = f.param(at + n_p), f.param(at + n_p + 1)

    def index(self, dims: list[str], *idx: str) -> str:
        """The flat index of ``idx`` (leading indices; the rest 0) in a C-contiguous array of
        sizes ``dims``."""
        f = self.f
        acc = idx[0]
        for d in range(1, len(dims)):
            acc = f.mul(acc, dims[d])
            if d < len(idx):
                acc = f.add(acc, idx[d])
        return acc

    def sub(self, a: str, b: str) -> str:
        v = self.f.tmp()
        self.f.emit(f"{v} = sub nsw i64 {a}, {b}")
        return v

    def inside(self, v: str, size: str) -> Val:
        """``0 <= v < size``."""
        return self.f.scalar("v >= 0 and v < n", {"v": Val(v, "i64"), "n": Val(size, "i64")})


def _check(dtype: str, name: str) -> None:
    if dtype not in FLOAT:
        raise CodegenError(f"native {name}: {dtype} not generated")


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
    zero = f.scalar("0.0", {})
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    w0 = k.sub(f.mul(j, sw), pl)
    a, la = f.begin(kh)
    crow = k.index(k.dims[0], n, i, j, a)
    row = f.add(k.sub(f.mul(i, sh), pt), f.mul(a, dh))
    outside = f.when(f.expr.truth(f.scalar("not ok", {"ok": k.inside(row, h)})))
    e, le = f.begin(kwc)
    f.store("%cols", dtype, f.add(crow, e), zero)
    f.end(e, le)
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
    e, le = f.begin(c)
    f.store("%cols", dtype, f.add(dst, e), zero)
    f.end(e, le)
    f.done(bad)
    f.end(b, lb)
    f.done(slow)
    f.done(inside)
    for var, lab in ((a, la), (j, lj), (i, li), (n, ln)):
        f.end(var, lab)
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
    base = k.index(k.dims[0], n)
    e, le = f.begin(f.mul(f.mul(h, w), c))
    f.store("%dx", dtype, f.add(base, e), f.scalar("0", {}))
    f.end(e, le)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    a, la = f.begin(kh)
    r = f.add(k.sub(f.mul(i, sh), pt), f.mul(a, dh))
    row_ok = f.when(k.inside(r, h))
    b, lb = f.begin(kw)
    wi = f.add(k.sub(f.mul(j, sw), pl), f.mul(b, dw))
    col_ok = f.when(k.inside(wi, w))
    dst = k.index(k.dims[0], n, r, wi)
    src = k.index(k.dims[1], n, i, j, a, b)
    ch, lc = f.begin(c)
    at = f.add(dst, ch)
    f.store("%dx", dtype, at, f.expr.arith("+", f.load("%dx", dtype, at),
                                           f.load("%cols", dtype, f.add(src, ch))))
    f.end(ch, lc)
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    for var, lab in ((a, la), (j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dx", "cols", "p"], noalias=True)


def _taps(k: _Kernel, x_dims: list[str], w_dims: list[str], body: Callable) -> None:
    """The tap loops shared by the direct kernels: for each (a, b) inside the image, for each
    input channel c, ``body(x index, tap row t + c)``; ``k.loop`` holds n, i, j."""
    f = k.f
    n, i, j = k.loop
    _, h, wd, ci = x_dims
    kh, kw = w_dims[0], w_dims[1]
    sh, sw, dh, dw, pt, pl = k.p
    a, la = f.begin(kh)
    r = f.add(k.sub(f.mul(i, sh), pt), f.mul(a, dh))
    b, lb = f.begin(kw)
    wi = f.add(k.sub(f.mul(j, sw), pl), f.mul(b, dw))
    ok = f.when(f.scalar("p and q", {"p": k.inside(r, h), "q": k.inside(wi, wd)}))
    t = f.mul(f.add(f.mul(a, kw), b), ci)
    c, lc = f.begin(ci)
    body(f.add(k.index(x_dims, n, r, wi), c), f.add(t, c))
    f.end(c, lc)
    f.done(ok)
    f.end(b, lb)
    f.end(a, la)


def conv_direct_ir(symbol: str, dtype: str) -> str:
    """``(out (N, OH, OW, CO), x (N, H, W, CI), w (KH, KW, CI, CO), p = [sh, sw, dh, dw, pt,
    pl])``: ``orow[o] += x * w[t + c, o]`` in the numba kernel's order."""
    _check(dtype, "conv_direct")
    k = _Kernel((4, 4, 4), 6)
    f = k.f
    _, oh, ow, co = k.dims[0]
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    k.loop = (n, i, j)
    orow = k.index(k.dims[0], n, i, j)
    o, lo = f.begin(co)
    f.store("%out", dtype, f.add(orow, o), f.scalar("0", {}))
    f.end(o, lo)

    def body(xi: str, tap: str) -> None:
        v = f.load("%x", dtype, xi)
        wrow = f.mul(tap, co)
        o, lo = f.begin(co)
        at = f.add(orow, o)
        prod = f.expr.arith("*", v, f.load("%w", dtype, f.add(wrow, o)))
        f.store("%out", dtype, at, f.expr.arith("+", f.load("%out", dtype, at), prod))
        f.end(o, lo)

    _taps(k, k.dims[1], k.dims[2], body)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["out", "x", "w", "p"], noalias=True)


def conv_filter_direct_ir(symbol: str, dtype: str) -> str:
    """``(dw (KH, KW, CI, CO), x (N, H, W, CI), ct (N, OH, OW, CO), p)``: the kernel gradient
    over the images n0 <= n < n1, ``drow[o] += x * crow[o]`` in the numba kernel's order."""
    _check(dtype, "conv_filter_direct")
    k = _Kernel((4, 4, 4), 6)
    f = k.f
    kh, kw, ci, co = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    e, le = f.begin(f.mul(f.mul(f.mul(kh, kw), ci), co))
    f.store("%dw", dtype, e, f.scalar("0", {}))
    f.end(e, le)
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    k.loop = (n, i, j)
    crow = k.index(k.dims[2], n, i, j)

    def body(xi: str, tap: str) -> None:
        v = f.load("%x", dtype, xi)
        drow = f.mul(tap, co)
        o, lo = f.begin(co)
        at = f.add(drow, o)
        prod = f.expr.arith("*", v, f.load("%ct", dtype, f.add(crow, o)))
        f.store("%dw", dtype, at, f.expr.arith("+", f.load("%dw", dtype, at), prod))
        f.end(o, lo)

    _taps(k, k.dims[1], k.dims[0], body)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


def max_pool_ir(symbol: str, dtype: str) -> str:
    """``(out (N, OH, OW, C), x (N, H, W, C), p = [ph, pw, sh, sw, pt, pl])``: the first
    element of the window in row-major order, then ``v if (v > m or v != v) else m``."""
    _check(dtype, "max_pool")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, oh, ow, c = k.dims[0]
    _, h, w, _ = k.dims[1]
    ph, pw, sh, sw, pt, pl = k.p
    f.var("first", f.scalar("True", {}))
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[0], n, i, j)
    f.set("first", f.scalar("True", {}))
    a, la = f.begin(ph)
    hi = f.add(k.sub(f.mul(i, sh), pt), a)
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(pw)
    wi = f.add(k.sub(f.mul(j, sw), pl), b)
    col_ok = f.when(k.inside(wi, w))
    src = k.index(k.dims[1], n, hi, wi)
    first = f.get("first")
    then = f.when(first)
    ch, lc = f.begin(c)
    f.store("%out", dtype, f.add(orow, ch), f.load("%x", dtype, f.add(src, ch)))
    f.end(ch, lc)
    f.set("first", f.scalar("False", {}))
    f.done(then)
    other = f.when(f.scalar("not first", {"first": first}))
    ch, lc = f.begin(c)
    at = f.add(orow, ch)
    f.store("%out", dtype, at, f.scalar("v if (v > m or v != v) else m", {
        "v": f.load("%x", dtype, f.add(src, ch)), "m": f.load("%out", dtype, at)}))
    f.end(ch, lc)
    f.done(other)
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    for var, lab in ((a, la), (j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["out", "x", "p"], noalias=True)


def max_pool_grad_tiled_ir(symbol: str, dtype: str) -> str:
    """``(dx, x, out, ct, p)``, windows that tile the input (``pool._tiled``): each input
    element written once, the cotangent to the first maximal element of its window."""
    _check(dtype, "max_pool_grad_tiled")
    k = _Kernel((4, 4, 4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    ph, pw, sh, sw = k.p[:4]
    pending = f.tmp()
    f.emit(f"{pending} = alloca i8, i64 {c}")  # numba's np.empty(c, np.bool_)
    zero = f.scalar("0", {})
    n, ln = f.begin(k.n1, k.n0)
    ohs, ows = f.mul(oh, sh), f.mul(ow, sw)
    hi, lh = f.begin(h, ohs)
    e, le = f.begin(f.mul(w, c))
    f.store("%dx", dtype, f.add(k.index(k.dims[0], n, hi), e), zero)
    f.end(e, le)
    f.end(hi, lh)
    hi, lh = f.begin(ohs)
    wi, lw = f.begin(w, ows)
    base = k.index(k.dims[0], n, hi, wi)
    ch, lc = f.begin(c)
    f.store("%dx", dtype, f.add(base, ch), zero)
    f.end(ch, lc)
    f.end(wi, lw)
    f.end(hi, lh)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[2], n, i, j)
    ch, lc = f.begin(c)
    f.store(pending, "bool", ch, f.scalar("True", {}))
    f.end(ch, lc)
    a, la = f.begin(ph)
    hi = f.add(f.mul(i, sh), a)
    b, lb = f.begin(pw)
    wi = f.add(f.mul(j, sw), b)
    src = k.index(k.dims[0], n, hi, wi)
    ch, lc = f.begin(c)
    pend = f.load(pending, "bool", ch)
    hit = f.scalar("p and v == m", {"p": pend, "v": f.load("%x", dtype, f.add(src, ch)),
                                    "m": f.load("%out", dtype, f.add(orow, ch))})
    f.store("%dx", dtype, f.add(src, ch), f.scalar("g if hit else 0", {
        "g": f.load("%ct", dtype, f.add(orow, ch)), "hit": hit}))
    f.store(pending, "bool", ch, f.scalar("p and not hit", {"p": pend, "hit": hit}))
    f.end(ch, lc)
    for var, lab in ((b, lb), (a, la), (j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dx", "x", "out", "ct", "p"], noalias=True)


def max_pool_grad_ir(symbol: str, dtype: str) -> str:
    """``(dx, x, out, ct, p = [ph, pw, sh, sw, pt, pl])``, any windows: zeroed, then each
    window's cotangent added to its first maximal element (row-major in the window)."""
    _check(dtype, "max_pool_grad")
    k = _Kernel((4, 4, 4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    ph, pw, sh, sw, pt, pl = k.p
    pending = f.tmp()
    f.emit(f"{pending} = alloca i8, i64 {c}")
    n, ln = f.begin(k.n1, k.n0)
    base = k.index(k.dims[0], n)
    e, le = f.begin(f.mul(f.mul(h, w), c))
    f.store("%dx", dtype, f.add(base, e), f.scalar("0", {}))
    f.end(e, le)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[2], n, i, j)
    ch, lc = f.begin(c)
    f.store(pending, "bool", ch, f.scalar("True", {}))
    f.end(ch, lc)
    a, la = f.begin(ph)
    hi = f.add(k.sub(f.mul(i, sh), pt), a)
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(pw)
    wi = f.add(k.sub(f.mul(j, sw), pl), b)
    col_ok = f.when(k.inside(wi, w))
    src = k.index(k.dims[0], n, hi, wi)
    ch, lc = f.begin(c)
    at = f.add(src, ch)
    hit = f.when(f.scalar("p and v == m", {
        "p": f.load(pending, "bool", ch), "v": f.load("%x", dtype, at),
        "m": f.load("%out", dtype, f.add(orow, ch))}))
    f.store("%dx", dtype, at, f.expr.arith("+", f.load("%dx", dtype, at),
                                           f.load("%ct", dtype, f.add(orow, ch))))
    f.store(pending, "bool", ch, f.scalar("False", {}))
    f.done(hit)
    f.end(ch, lc)
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    for var, lab in ((a, la), (j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dx", "x", "out", "ct", "p"], noalias=True)


def _window_count(k: _Kernel, i: str, j: str, h: str, w: str) -> None:
    """The variable ``cnt``: how many elements of window (i, j) lie inside the image."""
    f = k.f
    ph, pw, sh, sw, pt, pl = k.p
    f.set("cnt", f.scalar("0", {}))
    a, la = f.begin(ph)
    hi = f.add(k.sub(f.mul(i, sh), pt), a)
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(pw)
    wi = f.add(k.sub(f.mul(j, sw), pl), b)
    col_ok = f.when(k.inside(wi, w))
    f.set("cnt", f.scalar("c + 1", {"c": f.get("cnt")}))
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    f.end(a, la)


def avg_pool_ir(symbol: str, dtype: str) -> str:
    """``(out, x, p)``: the sum over the window's elements inside the image, then divided by
    their count (as ``pool.avg_pool_kernel``: accumulated in ``out``)."""
    _check(dtype, "avg_pool")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, oh, ow, c = k.dims[0]
    _, h, w, _ = k.dims[1]
    ph, pw, sh, sw, pt, pl = k.p
    f.var("cnt", f.scalar("0", {}))
    n, ln = f.begin(k.n1, k.n0)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[0], n, i, j)
    ch, lc = f.begin(c)
    f.store("%out", dtype, f.add(orow, ch), f.scalar("0", {}))
    f.end(ch, lc)
    _window_count(k, i, j, h, w)
    a, la = f.begin(ph)
    hi = f.add(k.sub(f.mul(i, sh), pt), a)
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(pw)
    wi = f.add(k.sub(f.mul(j, sw), pl), b)
    col_ok = f.when(k.inside(wi, w))
    src = k.index(k.dims[1], n, hi, wi)
    ch, lc = f.begin(c)
    at = f.add(orow, ch)
    f.store("%out", dtype, at, f.expr.arith("+", f.load("%out", dtype, at),
                                            f.load("%x", dtype, f.add(src, ch))))
    f.end(ch, lc)
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    f.end(a, la)
    cnt = f.get("cnt")
    ch, lc = f.begin(c)
    at = f.add(orow, ch)
    f.store("%out", dtype, at, f.expr.arith("/", f.load("%out", dtype, at), cnt))
    f.end(ch, lc)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["out", "x", "p"], noalias=True)


def avg_pool_grad_ir(symbol: str, dtype: str) -> str:
    """``(dx, ct, p)``: each window's cotangent divided by its count, added to its elements
    inside the image (as ``pool.avg_pool_grad_kernel``)."""
    _check(dtype, "avg_pool_grad")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[1]
    ph, pw, sh, sw, pt, pl = k.p
    f.var("cnt", f.scalar("0", {}))
    n, ln = f.begin(k.n1, k.n0)
    base = k.index(k.dims[0], n)
    e, le = f.begin(f.mul(f.mul(h, w), c))
    f.store("%dx", dtype, f.add(base, e), f.scalar("0", {}))
    f.end(e, le)
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    _window_count(k, i, j, h, w)
    cnt = f.get("cnt")
    crow = k.index(k.dims[1], n, i, j)
    a, la = f.begin(ph)
    hi = f.add(k.sub(f.mul(i, sh), pt), a)
    row_ok = f.when(k.inside(hi, h))
    b, lb = f.begin(pw)
    wi = f.add(k.sub(f.mul(j, sw), pl), b)
    col_ok = f.when(k.inside(wi, w))
    dst = k.index(k.dims[0], n, hi, wi)
    ch, lc = f.begin(c)
    at = f.add(dst, ch)
    share = f.expr.arith("/", f.load("%ct", dtype, f.add(crow, ch)), cnt)
    f.store("%dx", dtype, at, f.expr.arith("+", f.load("%dx", dtype, at), share))
    f.end(ch, lc)
    f.done(col_ok)
    f.end(b, lb)
    f.done(row_ok)
    f.end(a, la)
    for var, lab in ((j, lj), (i, li), (n, ln)):
        f.end(var, lab)
    return f.function(symbol, ["dx", "ct", "p"], noalias=True)


def _div(f: Func, a: str, b: str) -> str:
    """``a // b`` for non-negative a and positive b."""
    v = f.tmp()
    f.emit(f"{v} = sdiv i64 {a}, {b}")
    return v


# numba kernel name -> its native twin's generator
TWINS: dict[str, Callable[[str, str], str]] = {
    "im2col_kernel": im2col_ir, "col2im_kernel": col2im_ir,
    "conv_direct_kernel": conv_direct_ir, "conv_filter_direct_kernel": conv_filter_direct_ir,
    "max_pool_kernel": max_pool_ir, "max_pool_grad_tiled_kernel": max_pool_grad_tiled_ir,
    "max_pool_grad_kernel": max_pool_grad_ir, "avg_pool_kernel": avg_pool_ir,
    "avg_pool_grad_kernel": avg_pool_grad_ir}
