"""The pooling kernels (LLVM IR, their one implementation) that ``pool.py`` runs:
``max_pool_kernel``, ``max_pool_grad_tiled_kernel``, ``max_pool_grad_kernel``,
``avg_pool_kernel`` and ``avg_pool_grad_kernel``, and the unrolled max pooling with its
winners' index (docs/architecture.md, "Native loops").

The argument layout and helpers of ``native_conv.py`` (flat arrays; the parameter array holds
the arrays' shapes, then ``p = [ph, pw, sh, sw, pt, pl]``, then ``n0, n1``). Max pooling keeps
the first maximal element of each window (row-major; NaN kept) and routes the gradient to it:
the reference's bits (tests/core/backends/test_native_loops.py).
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.core.backends.cpu.codegen.ir_kernel import _check, _Kernel
from kiln.core.backends.cpu.codegen.llvm_expr import Val


def _geometry(k: _Kernel) -> tuple:
    """The window geometry of ``_Kernel.window`` from the pooling parameters (dilation 1)."""
    ph, pw, sh, sw, pt, pl = k.p
    return (ph, pw, sh, sw, None, None, pt, pl)


def _pending(k: _Kernel, c: str) -> str:
    """A scratch row of ``c`` flags (one per channel), allocated once."""
    pending = k.f.tmp()
    k.f.emit(f"{pending} = alloca i8, i64 {c}")
    return pending


def max_pool_ir(symbol: str, dtype: str) -> str:
    """``(out (N, OH, OW, C), x (N, H, W, C), p)``: the first element of the window in
    row-major order, then ``v if (v > m or v != v) else m``."""
    _check(dtype, "max_pool")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, oh, ow, c = k.dims[0]
    _, h, w, _ = k.dims[1]
    f.var("first", f.scalar("True", {}))
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    orow = k.index(k.dims[0], n, i, j)
    f.set("first", f.scalar("True", {}))

    def body(a: str, b: str, hi: str, wi: str) -> None:
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

    k.window(i, j, h, w, _geometry(k), body)
    k.close(loops)
    return f.function(symbol, ["out", "x", "p"], noalias=True)


def _zero_past_windows(k: _Kernel, dtype: str, n: str, ohs: str, ows: str) -> None:
    """Zeros image ``n`` of ``%dx`` (``k.dims[0]``) below row ``ohs`` and right of column
    ``ows`` (past the last window of a tiled pooling)."""
    f = k.f
    _, h, w, c = k.dims[0]
    hi, lh = f.begin(h, ohs)
    k.fill("%dx", dtype, k.index(k.dims[0], n, hi), f.mul(w, c))
    f.end(hi, lh)
    hi, lh = f.begin(ohs)
    wi, lw = f.begin(w, ows)
    k.fill("%dx", dtype, k.index(k.dims[0], n, hi, wi), c)
    f.end(wi, lw)
    f.end(hi, lh)


def max_pool_grad_tiled_ir(symbol: str, dtype: str) -> str:
    """``(dx, x, out, ct, p)``, windows that tile the input (``pool._tiled``): each input
    element written once, the cotangent to the first maximal element of its window."""
    _check(dtype, "max_pool_grad_tiled")
    k = _Kernel((4, 4, 4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    ph, pw, sh, sw = k.p[:4]
    pending = _pending(k, c)
    n, ln = f.begin(k.n1, k.n0)
    _zero_past_windows(k, dtype, n, f.mul(oh, sh), f.mul(ow, sw))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[2], n, i, j)
    k.fill(pending, "bool", None, c, "True")
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
    k.close([(n, ln), (i, li), (j, lj), (a, la), (b, lb)])
    return f.function(symbol, ["dx", "x", "out", "ct", "p"], noalias=True)


def max_pool_grad_ir(symbol: str, dtype: str) -> str:
    """``(dx, x, out, ct, p)``, any windows: zeroed, then each window's cotangent added to
    its first maximal element (row-major in the window)."""
    _check(dtype, "max_pool_grad")
    k = _Kernel((4, 4, 4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[2]
    pending = _pending(k, c)
    n, ln = f.begin(k.n1, k.n0)
    k.fill("%dx", dtype, k.index(k.dims[0], n), f.mul(f.mul(h, w), c))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[2], n, i, j)
    k.fill(pending, "bool", None, c, "True")

    def body(a: str, b: str, hi: str, wi: str) -> None:
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

    k.window(i, j, h, w, _geometry(k), body)
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "x", "out", "ct", "p"], noalias=True)


# The argmax index of max pooling (pool.py, "index"): one byte per pooled element, the
# window's first maximal element (tap a * pw + b, row-major), NONE where there is none (a NaN
# window: ``x == out`` nowhere, as in the gradient kernels).
NONE = 255


def _load_index(k: _Kernel, at: str) -> str:
    """``idx[at]`` (uint8): an i8 SSA name (compared as bytes: vectors of 64 lanes)."""
    f = k.f
    g, v = f.tmp(), f.tmp()
    f.emit(f"{g} = getelementptr inbounds i8, ptr %idx, i64 {at}")
    f.emit(f"{v} = load i8, ptr {g}")
    return v


def _store_index(k: _Kernel, at: str, value: str) -> None:
    f = k.f
    g = f.tmp()
    f.emit(f"{g} = getelementptr inbounds i8, ptr %idx, i64 {at}")
    f.emit(f"store i8 {value}, ptr {g}")


def max_pool_unrolled_ir(symbol: str, dtype: str, ph: int, pw: int, index: bool = True) -> str:
    """``(out (N, OH, OW, C), idx (N, OH, OW, C) uint8, x (N, H, W, C), p)``, ``ph`` x ``pw``
    windows that tile the input (``pool._tiled``; unrolled: every tap of a channel in
    registers): ``out`` as :func:`max_pool_ir` computes it (the same fold in the same order,
    the same bits), and ``idx`` the tap of the first element equal to it (:data:`NONE` where
    none is: a NaN window), which :func:`max_pool_grad_index_ir` routes the cotangent to.
    ``index`` False: ``(out, x, p)``, no index."""
    _check(dtype, "max_pool_index")
    k = _Kernel((4, 4, 4) if index else (4, 4), 6)
    f = k.f
    x_dims = k.dims[-1]
    _, oh, ow, c = k.dims[0]
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    orow = k.index(k.dims[0], n, i, j)
    taps = [k.index(x_dims, n, f.add(f.mul(i, str(ph)), str(a)),
                    f.add(f.mul(j, str(pw)), str(b))) for a in range(ph) for b in range(pw)]
    ch, lc = f.begin(c)
    values = [f.load("%x", dtype, f.add(t, ch)) for t in taps]
    m = values[0]
    for v in values[1:]:
        m = f.scalar("v if (v > m or v != v) else m", {"v": v, "m": m})
    at = f.add(orow, ch)
    f.store("%out", dtype, at, m)
    if index:
        held = str(NONE - 256)  # i8 constants are signed
        for t in reversed(range(len(values))):  # the first equal tap wins: set last
            equal = f.expr.truth(f.scalar("v == m", {"v": values[t], "m": m})).ref
            nxt = f.tmp()
            f.emit(f"{nxt} = select i1 {equal}, i8 {t}, i8 {held}")
            held = nxt
        _store_index(k, at, held)
    f.end(ch, lc)
    k.close(loops)
    return f.function(symbol, ["out", "idx", "x", "p"] if index else ["out", "x", "p"],
                      noalias=True)


def max_pool_grad_index_ir(symbol: str, dtype: str, ph: int, pw: int) -> str:
    """``(dx (N, H, W, C), idx (N, OH, OW, C) uint8, ct (N, OH, OW, C), p)``, ``ph`` x ``pw``
    windows that tile the input: the cotangent to the tap ``idx`` names (none for
    :data:`NONE`), zeros elsewhere; each element written once. The same bits as
    :func:`max_pool_grad_tiled_ir` when ``idx`` is :func:`max_pool_unrolled_ir`'s of the same
    input."""
    _check(dtype, "max_pool_grad_index")
    k = _Kernel((4, 4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[1]
    n, ln = f.begin(k.n1, k.n0)
    _zero_past_windows(k, dtype, n, f.mul(oh, str(ph)), f.mul(ow, str(pw)))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    orow = k.index(k.dims[1], n, i, j)
    taps = [k.index(k.dims[0], n, f.add(f.mul(i, str(ph)), str(a)),
                    f.add(f.mul(j, str(pw)), str(b))) for a in range(ph) for b in range(pw)]
    ch, lc = f.begin(c)
    at = f.add(orow, ch)
    g, q = f.load("%ct", dtype, at), _load_index(k, at)
    for t, tap in enumerate(taps):
        hit = f.tmp()
        f.emit(f"{hit} = icmp eq i8 {q}, {t}")
        f.store("%dx", dtype, f.add(tap, ch), f.scalar("g if hit else 0", {
            "g": g, "hit": Val(hit, "b")}))
    f.end(ch, lc)
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "idx", "ct", "p"], noalias=True)


def _window_count(k: _Kernel, i: str, j: str, h: str, w: str) -> None:
    """The variable ``cnt``: how many elements of window (i, j) lie inside the image."""
    f = k.f
    f.set("cnt", f.scalar("0", {}))
    k.window(i, j, h, w, _geometry(k),
             lambda *_: f.set("cnt", f.scalar("c + 1", {"c": f.get("cnt")})))


def avg_pool_ir(symbol: str, dtype: str) -> str:
    """``(out, x, p)``: the sum over the window's elements inside the image, then divided by
    their count (accumulated in ``out``)."""
    _check(dtype, "avg_pool")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, oh, ow, c = k.dims[0]
    _, h, w, _ = k.dims[1]
    f.var("cnt", f.scalar("0", {}))
    loops = k.open(oh, ow)
    n, i, j = (var for var, _ in loops)
    orow = k.index(k.dims[0], n, i, j)
    k.fill("%out", dtype, orow, c)
    _window_count(k, i, j, h, w)

    def body(a: str, b: str, hi: str, wi: str) -> None:
        src = k.index(k.dims[1], n, hi, wi)
        ch, lc = f.begin(c)
        at = f.add(orow, ch)
        f.store("%out", dtype, at, f.expr.arith("+", f.load("%out", dtype, at),
                                                f.load("%x", dtype, f.add(src, ch))))
        f.end(ch, lc)

    k.window(i, j, h, w, _geometry(k), body)
    cnt = f.get("cnt")
    ch, lc = f.begin(c)
    at = f.add(orow, ch)
    f.store("%out", dtype, at, f.expr.arith("/", f.load("%out", dtype, at), cnt))
    f.end(ch, lc)
    k.close(loops)
    return f.function(symbol, ["out", "x", "p"], noalias=True)


def avg_pool_grad_ir(symbol: str, dtype: str) -> str:
    """``(dx, ct, p)``: each window's cotangent divided by its count, added to its elements
    inside the image (as ``pool.avg_pool_grad_kernel``)."""
    _check(dtype, "avg_pool_grad")
    k = _Kernel((4, 4), 6)
    f = k.f
    _, h, w, c = k.dims[0]
    _, oh, ow, _ = k.dims[1]
    f.var("cnt", f.scalar("0", {}))
    n, ln = f.begin(k.n1, k.n0)
    k.fill("%dx", dtype, k.index(k.dims[0], n), f.mul(f.mul(h, w), c))
    i, li = f.begin(oh)
    j, lj = f.begin(ow)
    _window_count(k, i, j, h, w)
    cnt = f.get("cnt")
    crow = k.index(k.dims[1], n, i, j)

    def body(a: str, b: str, hi: str, wi: str) -> None:
        dst = k.index(k.dims[0], n, hi, wi)
        ch, lc = f.begin(c)
        at = f.add(dst, ch)
        share = f.expr.arith("/", f.load("%ct", dtype, f.add(crow, ch)), cnt)
        f.store("%dx", dtype, at, f.expr.arith("+", f.load("%dx", dtype, at), share))
        f.end(ch, lc)

    k.window(i, j, h, w, _geometry(k), body)
    k.close([(n, ln), (i, li), (j, lj)])
    return f.function(symbol, ["dx", "ct", "p"], noalias=True)


KERNELS: dict[str, Callable[[str, str], str]] = {
    "max_pool_kernel": max_pool_ir, "max_pool_grad_tiled_kernel": max_pool_grad_tiled_ir,
    "max_pool_grad_kernel": max_pool_grad_ir, "avg_pool_kernel": avg_pool_ir,
    "avg_pool_grad_kernel": avg_pool_grad_ir}
