"""Native (LLVM IR) twins of the convolution kernels of ``conv.py``: ``im2col_kernel``,
``col2im_kernel``, ``conv_direct_kernel`` and ``conv_filter_direct_kernel``, and the loop
helpers the grouped (``native_groups.py``) and pooling (``native_pool.py``) twins share
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

from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.llvm_loop import Func
from kiln.core.backends.cpu.codegen.spec import CodegenError

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

    def position(self, o: str, stride: str, pad: str, tap: str, dilation: str) -> str:
        """The input position ``o * stride - pad + tap * dilation`` that output position ``o``
        reads through tap ``tap`` (one axis of a convolution's window)."""
        f = self.f
        return f.add(self.sub(f.mul(o, stride), pad), f.mul(tap, dilation))

    def inside(self, v: str, size: str) -> Val:
        """``0 <= v < size``."""
        return self.f.scalar("v >= 0 and v < n", {"v": Val(v, "i64"), "n": Val(size, "i64")})

    def open(self, *counts: str) -> list[tuple[str, str]]:
        """Opens the loop over the images ``n0 <= n < n1`` and, inside it, one loop per
        count; returns the (index, label) pairs for :meth:`close`."""
        loops = [self.f.begin(self.n1, self.n0)]
        loops += [self.f.begin(c) for c in counts]
        return loops

    def close(self, loops: list[tuple[str, str]]) -> None:
        for var, lab in reversed(loops):
            self.f.end(var, lab)

    def fill(self, arr: str, dtype: str, base: str | None, count: str, value: str = "0") -> None:
        """``arr[base + e] = value`` for ``e < count`` (``base`` None: 0)."""
        f = self.f
        e, lab = f.begin(count)
        f.store(arr, dtype, e if base is None else f.add(base, e), f.scalar(value, {}))
        f.end(e, lab)

    def accumulate(self, dtype: str, dst: str, dst_row: str | None, v: Val, src: str,
                   src_row: str, count: str, first: str | None = None) -> None:
        """``dst[dst_row + o] += v * src[src_row + o]`` for ``o = first + t``, ``t < count``
        (the numba kernels' ``row[o] += v * other[o]``; ``first`` None: 0, ``dst_row``
        None: 0). The trip count is ``count``, the same for every call of the enclosing
        loops: a loop over ``range(first, first + count)`` was not one LLVM saw as invariant,
        and its vectorization checks ran per group (2x slower on depthwise convolutions)."""
        f = self.f
        t, lab = f.begin(count)
        o = t if first is None else f.add(first, t)
        at = o if dst_row is None else f.add(dst_row, o)
        prod = f.expr.arith("*", v, f.load(src, dtype, f.add(src_row, o)))
        f.store(dst, dtype, at, f.expr.arith("+", f.load(dst, dtype, at), prod))
        f.end(t, lab)

    def window(self, i: str, j: str, h: str, w: str, geometry: tuple,
               body: Callable[[str, str, str, str], None]) -> None:
        """For each tap (a, b) of the window of output pixel (i, j) that lies inside the
        ``h`` x ``w`` image: ``body(a, b, row, column)``. ``geometry = (kh, kw, sh, sw, dh, dw,
        pt, pl)`` (``dh``/``dw`` None: dilation 1); rows outside are skipped before their
        columns, as the numba kernels' ``continue``."""
        f = self.f
        kh, kw, sh, sw, dh, dw, pt, pl = geometry
        a, la = f.begin(kh)
        r = f.add(self.sub(f.mul(i, sh), pt), a if dh is None else f.mul(a, dh))
        row_ok = f.when(self.inside(r, h))
        b, lb = f.begin(kw)
        c = f.add(self.sub(f.mul(j, sw), pl), b if dw is None else f.mul(b, dw))
        col_ok = f.when(self.inside(c, w))
        body(a, b, r, c)
        f.done(col_ok)
        f.end(b, lb)
        f.done(row_ok)
        f.end(a, la)


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
    pl])``: ``orow[o] += x * w[t + c, o]`` in the numba kernel's order."""
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
    over the images n0 <= n < n1, ``drow[o] += x * crow[o]`` in the numba kernel's order."""
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


def _div(f: Func, a: str, b: str) -> str:
    """``a // b`` for non-negative a and positive b."""
    v = f.tmp()
    f.emit(f"{v} = sdiv i64 {a}, {b}")
    return v


# numba kernel name -> its native twin's generator
TWINS: dict[str, Callable[[str, str], str]] = {
    "im2col_kernel": im2col_ir, "col2im_kernel": col2im_ir,
    "conv_direct_kernel": conv_direct_ir, "conv_filter_direct_kernel": conv_filter_direct_ir}


def bias_relu_ir(f: Func, ty: str, lanes: int, x: str, bias: str | None, relu: bool) -> str:
    """The epilogue of a product's accumulator ``x`` (a ``ty`` vector of ``lanes`` floats):
    ``+ bias`` where ``bias`` (a vector) is given, then kiln's ReLU where ``relu`` (``x <= 0 ?
    0 : x``: NaN stays NaN, -0 becomes 0); the register holding the result."""
    if bias is not None:
        y = f.tmp()
        f.emit(f"{y} = fadd {ty} {x}, {bias}")
        x = y
    if relu:
        neg, y = f.tmp(), f.tmp()
        f.emit(f"{neg} = fcmp ole {ty} {x}, zeroinitializer")
        f.emit(f"{y} = select <{lanes} x i1> {neg}, {ty} zeroinitializer, {ty} {x}")
        x = y
    return x
