"""The skeleton the hand-written native (LLVM IR) kernels share: :class:`_Kernel` (a
:class:`~.llvm_loop.Func` with flat array arguments, their sizes, a parameter array ``p`` and an
outer range ``n0 <= n < n1``), the dtype check, ``//`` on indices and the bias / ReLU epilogue
of a product's accumulators. Used by the convolution, pooling, nn and GEMM kernels; imports only
codegen.
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

    # the indices of the loops a kernel opened, which its body helpers read (set by the
    # convolution kernels after :meth:`open`)
    loop: tuple[str, ...]

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


def _div(f: Func, a: str, b: str) -> str:
    """``a // b`` for non-negative a and positive b."""
    v = f.tmp()
    f.emit(f"{v} = sdiv i64 {a}, {b}")
    return v


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


def splat_fma_ir(f: Func, ty: str, size: int, lanes: int, fma: str, index: str,
                 bvals: list[str], accs: list[str]) -> None:
    """One rank-1 step of a register-blocked product: ``a[index]`` (a ``ty`` scalar of
    ``size`` bytes in ``%a``) broadcast over a vector of ``lanes`` and multiplied-added with
    each of ``bvals`` into the accumulators ``accs`` (pointers to vectors), by ``fma``."""
    vec = f"<{lanes} x {ty}>"
    g, s, one, splat = f.tmp(), f.tmp(), f.tmp(), f.tmp()
    f.emit(f"{g} = getelementptr inbounds {ty}, ptr %a, i64 {index}")
    f.emit(f"{s} = load {ty}, ptr {g}, align {size}")
    f.emit(f"{one} = insertelement {vec} poison, {ty} {s}, i64 0")
    f.emit(f"{splat} = shufflevector {vec} {one}, {vec} poison, <{lanes} x i32> zeroinitializer")
    for b, acc in zip(bvals, accs):
        old, new = f.tmp(), f.tmp()
        f.emit(f"{old} = load {vec}, ptr {acc}")
        f.emit(f"{new} = call {vec} {fma}({vec} {splat}, {vec} {b}, {vec} {old})")
        f.emit(f"store {vec} {new}, ptr {acc}")
