"""Register-blocked native convolution kernels that read the input in place (no im2col
buffer), vectorized over the output channels (docs/architecture.md, "Convolutions"):

* :func:`forward_ir`: ``out (N, OH, OW, CO)`` = the valid convolution of ``x`` (N, H, W, CI)
  (already zero-padded) with ``w`` (T, CP): ``T = kh * kw * CI`` taps, the kernel's columns
  zero-padded to ``CP = V * L`` (``V`` vectors of ``L`` lanes). A block of ``R`` output
  pixels of a row by ``V`` vectors keeps its ``R x V`` accumulators in registers over all the
  taps; each tap loads ``V`` kernel vectors and broadcasts ``R`` input values. Optionally a
  bias (CP,) is added and ReLU applied before the store (the epilogue).
* :func:`filter_ir`: ``dw (T, CO)`` = the kernel gradient, the sum over the output pixels of
  the tap values of ``x`` times the cotangent ``ct`` (N, OH, OW, CO): a block of ``R`` taps
  by ``V`` vectors keeps its accumulators in registers over a chunk of output rows (whose
  cotangent stays in the cache across the tap blocks); each pixel loads ``V`` cotangent
  vectors and broadcasts ``R`` input values.

Where ``CO`` is not a multiple of ``L``, the last vector's loads and stores are masked (the
lanes past ``CO`` are neither read nor written). The tap ``t`` reads ``x`` at a fixed offset
from the output pixel's first input value: ``off[t] = (a dh W + b dw) CI + c`` for the tap
``(a, b, c)`` (the strides and dilations of any geometry become these offsets).

Arguments (flat arrays, one float32 dtype, then the int64 parameters)::

    forward_ir: (out, x, w[, bias], p)   p = [shapes..., xs_n, xs_i, xs_j, T, q0, q1, off...]
    filter_ir:  (dw, x, ct, p)           p = [shapes..., xs_n, xs_i, xs_j, T, OH, OW,
                                              rows per chunk, c0, c1, off...]

``xs_n, xs_i, xs_j`` are the strides in ``x`` of an image, of an output row (``sh W CI``)
and of an output column (``sw CI``); the forward runs the output rows ``q0 <= q < q1``
(``q = n OH + i``), the kernel gradient the chunks ``c0 <= c < c1`` of ``rows per chunk``
output rows into its own ``dw`` (zeroed first; ``conv._call_summed`` adds the parts).
"""

from __future__ import annotations

from kiln.core.backends.cpu.codegen.ir_kernel import _div, _Kernel, bias_relu_ir
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.spec import CodegenError

# accumulators + the V kernel (or cotangent) vectors + one broadcast, within the registers
REGISTERS = {16: 30, 8: 15}
FORWARD_ACCUMULATORS = 24


def block_shape(lanes: int, co: int, taps: int | None = None,
                width: int | None = None) -> tuple[int, int]:
    """``(R, V)``: ``V`` vectors cover ``co`` channels, ``R`` rows of accumulators fill the
    registers (at most 12). For the kernel gradient, at most ``taps``; for the forward (at
    most 8 rows and 24 accumulators), the
    fewest blocks that cover an output row of ``width`` pixels, as even as can be (the
    forward kernel's last block ends at the row's end, overlapping the one before: 26
    pixels run as 3 blocks of 9, not 12 + 12 + 2 one-pixel steps, which load as many
    vectors as they do FMAs)."""
    vecs = -(-co // lanes)
    rows = max(1, min(12, (REGISTERS[lanes] - vecs - 1) // vecs))
    if taps is not None:
        rows = min(rows, taps)
    if width is not None:
        # the forward: at most 8 x 3 accumulators (one core, GFLOPS, CIFAR's first layer
        # 3 -> 32 channels / MNIST's 1 -> 32: 8 x 2 104 / 72, 11 x 2 98 / 63, 12 x 2 93 / 58)
        rows = min(rows, 8, FORWARD_ACCUMULATORS // vecs) or 1
        rows = -(-width // -(-width // rows))
    return rows, vecs


class _Vec:
    """Vector helpers over a Func: ``L`` lanes of float, the last of ``V`` vectors masked
    to ``tail`` lanes (0: none)."""

    def __init__(self, f, lanes: int, vecs: int, co: int):
        self.f, self.lanes, self.vecs = f, lanes, vecs
        self.ty = f"<{lanes} x float>"
        self.tail = co - (vecs - 1) * lanes if co % lanes else 0
        self.fma = f"@llvm.fma.v{lanes}f32"
        f.declare.add(f"declare {self.ty} {self.fma}({self.ty}, {self.ty}, {self.ty})")
        if self.tail:
            bits = ", ".join(f"i1 {'true' if e < self.tail else 'false'}" for e in range(lanes))
            self.mask = f"<{bits}>"
            f.declare.add(f"declare {self.ty} @llvm.masked.load.v{lanes}f32.p0(ptr, i32, "
                          f"<{lanes} x i1>, {self.ty})")
            f.declare.add(f"declare void @llvm.masked.store.v{lanes}f32.p0({self.ty}, ptr, "
                          f"i32, <{lanes} x i1>)")

    def ptr(self, arr: str, index: str) -> str:
        g = self.f.tmp()
        self.f.emit(f"{g} = getelementptr inbounds float, ptr {arr}, i64 {index}")
        return g

    def load(self, arr: str, index: str, v: int, masked: bool = True) -> str:
        """Vector ``v`` at ``arr[index + v L]`` (masked when it is the last one)."""
        f, g, x = self.f, self.ptr(arr, self.f.add(index, str(v * self.lanes))), self.f.tmp()
        if masked and self.tail and v == self.vecs - 1:
            f.emit(f"{x} = call {self.ty} @llvm.masked.load.v{self.lanes}f32.p0(ptr {g}, i32 4, "
                   f"<{self.lanes} x i1> {self.mask}, {self.ty} zeroinitializer)")
        else:
            f.emit(f"{x} = load {self.ty}, ptr {g}, align 4")
        return x

    def store(self, arr: str, index: str, v: int, x: str) -> None:
        f, g = self.f, self.ptr(arr, self.f.add(index, str(v * self.lanes)))
        if self.tail and v == self.vecs - 1:
            f.emit(f"call void @llvm.masked.store.v{self.lanes}f32.p0({self.ty} {x}, ptr {g}, "
                   f"i32 4, <{self.lanes} x i1> {self.mask})")
        else:
            f.emit(f"store {self.ty} {x}, ptr {g}, align 4")

    def splat(self, arr: str, index: str) -> str:
        f, s, one, out = self.f, self.f.tmp(), self.f.tmp(), self.f.tmp()
        f.emit(f"{s} = load float, ptr {self.ptr(arr, index)}, align 4")
        f.emit(f"{one} = insertelement {self.ty} poison, float {s}, i64 0")
        f.emit(f"{out} = shufflevector {self.ty} {one}, {self.ty} poison, "
               f"<{self.lanes} x i32> zeroinitializer")
        return out

    def accumulators(self, rows: int) -> list[list[str]]:
        f = self.f
        f.labels += 1
        names = [[f"%acc{f.labels}.{i}.{v}" for v in range(self.vecs)] for i in range(rows)]
        for row in names:
            for name in row:
                f.allocas.append(f"  {name} = alloca {self.ty}")
        return names

    def fma_into(self, acc: str, a: str, b: str) -> None:
        f, old, new = self.f, self.f.tmp(), self.f.tmp()
        f.emit(f"{old} = load {self.ty}, ptr {acc}")
        f.emit(f"{new} = call {self.ty} {self.fma}({self.ty} {a}, {self.ty} {b}, {self.ty} {old})")
        f.emit(f"store {self.ty} {new}, ptr {acc}")


def _check(dtype: str, name: str) -> None:
    if dtype != "float32":
        raise CodegenError(f"native {name}: {dtype} not generated")


def forward_ir(symbol: str, dtype: str, lanes: int, rows: int, vecs: int, co: int,
               step: int, bias: bool = False, relu: bool = False) -> str:
    """The module of the forward kernel (module docstring) with ``L, R, V = lanes, rows,
    vecs``, ``co`` output channels and ``step = xs_j`` (a constant here); ``bias``: a bias
    argument added, ``relu``: ReLU applied, before the store."""
    _check(dtype, "conv forward")
    tap_loops: list[str] = []
    k = _Kernel((4, 4, 2, 1) if bias else (4, 4, 2), 4)
    f = k.f
    vx = _Vec(f, lanes, vecs, co)
    oh, ow = k.dims[0][1], k.dims[0][2]
    xs_n, xs_i, xs_j, taps = k.p
    first_off = str((11 if bias else 10) + 4 + 2)  # the index in p of off[0]
    cp = str(vecs * lanes)
    bias_vals = [vx.load("%bias", "0", v, masked=False) for v in range(vecs)] if bias else []
    q, lq = f.begin(k.n1, k.n0)
    n, i = _div(f, q, oh), f.tmp()
    f.emit(f"{i} = srem i64 {q}, {oh}")
    xrow = f.add(f.mul(n, xs_n), f.mul(i, xs_i))
    orow = f.mul(f.mul(q, ow), str(co))

    def block(r: int, j0: str) -> None:
        accs = vx.accumulators(r)
        for row in accs:
            for name in row:
                f.emit(f"store {vx.ty} zeroinitializer, ptr {name}")
        # pixel e's value of a tap sits e * step floats after pixel 0's: with the step a
        # constant, every broadcast addresses one register plus a displacement (with the
        # step a run-time value, 11 pixels kept 11 address registers and spilled them)
        first = f.add(xrow, f.mul(j0, xs_j))
        t, lt = f.begin(taps)
        tap_loops.append(lt)
        off = f.load("%p", "int64", f.add(first_off, t)).ref
        wrow = f.mul(t, cp)
        wv = [vx.load("%w", wrow, v, masked=False) for v in range(vecs)]
        for e in range(r):
            s = vx.splat("%x", f.add(f.add(first, off), str(e * step)))
            for v in range(vecs):
                vx.fma_into(accs[e][v], s, wv[v])
        f.end(t, lt)
        for e in range(r):
            at = f.add(orow, f.mul(f.add(j0, str(e)), str(co)))
            for v in range(vecs):
                x = f.tmp()
                f.emit(f"{x} = load {vx.ty}, ptr {accs[e][v]}")
                x = bias_relu_ir(f, vx.ty, lanes, x, bias_vals[v] if bias else None, relu)
                vx.store("%out", at, v, x)

    # ceil(OW / R) blocks, the last one shifted back to end at the row's end (it recomputes
    # a few pixels of the one before, writing the same values): no one-pixel tail loop
    jb, lj = f.begin(_div(f, f.add(ow, str(rows - 1)), str(rows)))
    j0 = f.tmp()
    f.emit(f"{j0} = call i64 @llvm.smin.i64(i64 {f.mul(jb, str(rows))}, i64 "
           f"{k.sub(ow, str(rows))})")
    f.declare.add("declare i64 @llvm.smin.i64(i64, i64)")
    block(rows, j0)
    f.end(jb, lj)
    f.end(q, lq)
    args = ["out", "x", "w", "bias", "p"] if bias else ["out", "x", "w", "p"]
    return _no_unroll(f.function(symbol, args, noalias=True), tap_loops)


def _no_unroll(ir: str, loops: list[str]) -> str:
    """``ir`` with the loops labelled ``loops`` marked not to be unrolled: unrolled twice, the
    tap loop's accumulators, kernel vectors and broadcasts outgrow the registers (spills:
    56 against 103 GFLOPS on one core for 11 pixels x 2 vectors)."""
    meta = []
    for k, lab in enumerate(loops):
        ident = 900 + 2 * k
        ir = ir.replace(f"  br label %{lab}.head\n{lab}.exit:",
                        f"  br label %{lab}.head, !llvm.loop !{ident}\n{lab}.exit:", 1)
        meta += [f"!{ident} = distinct !{{!{ident}, !{ident + 1}}}",
                 f'!{ident + 1} = !{{!"llvm.loop.unroll.disable"}}']
    return ir + "\n".join(meta) + "\n"


def _gradient_kernel(dw_rank: int, lanes: int, vecs: int, width: int) -> tuple:
    """``(kernel, func, vectors, index of off[0] in p)`` of a kernel gradient's arguments
    ``(dw (rank dw_rank), x (4), ct (4), p)`` with 7 parameters before the range."""
    k = _Kernel((dw_rank, 4, 4), 7)
    return k, k.f, _Vec(k.f, lanes, vecs, width), str(dw_rank + 8 + 7 + 2)


def filter_ir(symbol: str, dtype: str, lanes: int, rows: int, vecs: int, co: int,
              tail: int) -> str:
    """The module of the kernel-gradient kernel (module docstring) with ``L, R, V = lanes,
    rows, vecs`` and ``co`` output channels, for a number of taps ``T`` with ``T % R ==
    tail`` (the last ``tail`` taps one block)."""
    _check(dtype, "conv kernel gradient")
    k, f, vx, first_off = _gradient_kernel(2, lanes, vecs, co)
    xs_n, xs_i, xs_j, taps, oh, ow, per = k.p
    q_all = f.mul(k.dims[2][0], oh)
    t0, lt0 = f.begin(taps)  # zero this part's dw
    for v in range(vecs):
        vx.store("%dw", f.mul(t0, str(co)), v, "zeroinitializer")
    f.end(t0, lt0)
    full = f.mul(_div(f, taps, str(rows)), str(rows))
    c, lc = f.begin(k.n1, k.n0)
    q_first = f.mul(c, per)
    q_stop = f.tmp()
    f.emit(f"{q_stop} = call i64 @llvm.smin.i64(i64 {f.add(q_first, per)}, i64 {q_all})")
    f.declare.add("declare i64 @llvm.smin.i64(i64, i64)")

    def block(r: int, tap0: str) -> None:
        accs = vx.accumulators(r)
        offs = [f.load("%p", "int64", f.add(first_off, f.add(tap0, str(e)))).ref
                for e in range(r)]
        for e in range(r):
            for v in range(vecs):
                x = vx.load("%dw", f.mul(f.add(tap0, str(e)), str(co)), v)
                f.emit(f"store {vx.ty} {x}, ptr {accs[e][v]}")
        q, lq = f.begin(q_stop, q_first)
        n, i = _div(f, q, oh), f.tmp()
        f.emit(f"{i} = srem i64 {q}, {oh}")
        xrow = f.add(f.mul(n, xs_n), f.mul(i, xs_i))
        crow = f.mul(f.mul(q, ow), str(co))
        j, lj = f.begin(ow)
        xpix = f.add(xrow, f.mul(j, xs_j))
        cv = [vx.load("%ct", f.add(crow, f.mul(j, str(co))), v) for v in range(vecs)]
        for e in range(r):
            s = vx.splat("%x", f.add(xpix, offs[e]))
            for v in range(vecs):
                vx.fma_into(accs[e][v], s, cv[v])
        f.end(j, lj)
        f.end(q, lq)
        for e in range(r):
            for v in range(vecs):
                x = f.tmp()
                f.emit(f"{x} = load {vx.ty}, ptr {accs[e][v]}")
                vx.store("%dw", f.mul(f.add(tap0, str(e)), str(co)), v, x)

    _tap_blocks(f, block, full, rows, tail)
    f.end(c, lc)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)


def _tap_blocks(f, block, full: str, rows: int, tail: int) -> None:
    """``block(R, first tap)`` over the ``full // R`` whole blocks of taps, then
    ``block(tail, full)`` for the last ``tail`` taps."""
    tb, ltb = f.begin(_div(f, full, str(rows)))
    block(rows, f.mul(tb, str(rows)))
    f.end(tb, ltb)
    if tail:
        block(tail, full)


# ---- few output channels: vectors over the input channels ------------------------------------
# A convolution into 1-4 channels (a Conv2D(1) output layer) fills a vector of output channels
# with padding; these kernels put the input channels in the vectors instead (``CI`` in ``C``
# vectors of ``L`` lanes, the last one masked), one output value being the sum of a vector
# of products (the autoencoder's Conv2D(32 -> 1, 3x3) on 28 x 28, batch 128: 4.9 ms through
# Winograd, whose input tiles are 2.25 times the input).
def dot_forward_ir(symbol: str, dtype: str, lanes: int, rows: int, cvecs: int, ci: int,
                   co: int, step: int) -> str:
    """``(out (N, OH, OW, CO), x (N, H, W, CI) padded, w (CO, KK, C L), p)``; ``p = [shapes...,
    xs_n, xs_i, xs_j, KK, q0, q1, off...]`` with ``off[ab] = (a dh W + b dw) CI`` for the
    ``KK = kh kw`` spatial taps: blocks of ``R`` pixels of an output row (the last block
    ending at the row's end), per output channel ``R`` vector accumulators over the taps and
    the input channels, summed across their lanes at the end."""
    _check(dtype, "conv forward (few outputs)")
    k = _Kernel((4, 4, 3), 4)
    f = k.f
    vx = _Vec(f, lanes, cvecs, ci)
    oh, ow = k.dims[0][1], k.dims[0][2]
    xs_n, xs_i, xs_j, kk = k.p
    first_off = str(11 + 4 + 2)
    cp = cvecs * lanes
    red = f"@llvm.vector.reduce.fadd.v{lanes}f32"
    f.declare.add(f"declare float {red}(float, {vx.ty})")
    f.declare.add("declare i64 @llvm.smin.i64(i64, i64)")
    loops: list[str] = []
    q, lq = f.begin(k.n1, k.n0)
    n, i = _div(f, q, oh), f.tmp()
    f.emit(f"{i} = srem i64 {q}, {oh}")
    xrow = f.add(f.mul(n, xs_n), f.mul(i, xs_i))
    jb, lj = f.begin(_div(f, f.add(ow, str(rows - 1)), str(rows)))
    j0 = f.tmp()
    f.emit(f"{j0} = call i64 @llvm.smin.i64(i64 {f.mul(jb, str(rows))}, i64 "
           f"{k.sub(ow, str(rows))})")
    first = f.add(xrow, f.mul(j0, xs_j))
    for o in range(co):
        accs = [row[0] for row in _Vec(f, lanes, 1, lanes).accumulators(rows)]
        for name in accs:
            f.emit(f"store {vx.ty} zeroinitializer, ptr {name}")
        t, lt = f.begin(kk)
        loops.append(lt)
        off = f.load("%p", "int64", f.add(first_off, t)).ref
        wrow = f.mul(f.add(f.mul(str(o), kk), t), str(cp))
        base = f.add(first, off)
        for c in range(cvecs):
            wv = vx.load("%w", wrow, c, masked=False)
            for e in range(rows):
                xv = vx.load("%x", f.add(base, str(e * step)), c)
                vx.fma_into(accs[e], xv, wv)
        f.end(t, lt)
        for e in range(rows):
            x, s = f.tmp(), f.tmp()
            f.emit(f"{x} = load {vx.ty}, ptr {accs[e]}")
            f.emit(f"{s} = call reassoc float {red}(float 0.0, {vx.ty} {x})")
            at = f.add(f.mul(f.add(f.mul(q, ow), f.add(j0, str(e))), str(co)), str(o))
            f.store("%out", "float32", at, Val(s, "f32"))
    f.end(jb, lj)
    f.end(q, lq)
    return _no_unroll(f.function(symbol, ["out", "x", "w", "p"], noalias=True), loops)


def dot_filter_ir(symbol: str, dtype: str, lanes: int, rows: int, cvecs: int, ci: int,
                  co: int, tail: int) -> str:
    """``(dw (KK, CO, C L), x (N, H, W, CI) padded, ct (N, OH, OW, CO), p)``; ``p = [shapes...,
    xs_n, xs_i, xs_j, KK, OH, OW, rows per chunk, c0, c1, off...]`` (``off`` as
    :func:`dot_forward_ir`'s): this part's kernel gradient over the chunks ``c0 <= c < c1``
    of output rows, in blocks of ``R`` spatial taps (``KK % R == tail``) whose ``R x CO x C``
    accumulators stay in registers over a chunk; each pixel broadcasts its ``CO`` cotangent
    values. The lanes past ``CI`` hold zeros."""
    _check(dtype, "conv kernel gradient (few outputs)")
    k, f, vx, first_off = _gradient_kernel(3, lanes, cvecs, ci)
    xs_n, xs_i, xs_j, kk, oh, ow, per = k.p
    cp = cvecs * lanes
    f.declare.add("declare i64 @llvm.smin.i64(i64, i64)")
    t0, lt0 = f.begin(f.mul(kk, str(co)))
    for c in range(cvecs):
        at = vx.ptr("%dw", f.add(f.mul(t0, str(cp)), str(c * lanes)))
        f.emit(f"store {vx.ty} zeroinitializer, ptr {at}, align 4")
    f.end(t0, lt0)
    full = f.mul(_div(f, kk, str(rows)), str(rows))
    q_all = f.mul(k.dims[2][0], oh)
    ch, lc = f.begin(k.n1, k.n0)
    q_first = f.mul(ch, per)
    q_stop = f.tmp()
    f.emit(f"{q_stop} = call i64 @llvm.smin.i64(i64 {f.add(q_first, per)}, i64 {q_all})")

    def block(r: int, tap0: str) -> None:
        accs = vx.accumulators(r * co)  # [e * co + o][c]
        offs = [f.load("%p", "int64", f.add(first_off, f.add(tap0, str(e)))).ref
                for e in range(r)]
        for e in range(r):
            for o in range(co):
                row = f.mul(f.add(f.mul(f.add(tap0, str(e)), str(co)), str(o)), str(cp))
                for c in range(cvecs):
                    x = vx.load("%dw", row, c, masked=False)
                    f.emit(f"store {vx.ty} {x}, ptr {accs[e * co + o][c]}")
        q, lq = f.begin(q_stop, q_first)
        n, i = _div(f, q, oh), f.tmp()
        f.emit(f"{i} = srem i64 {q}, {oh}")
        xrow = f.add(f.mul(n, xs_n), f.mul(i, xs_i))
        j, lj = f.begin(ow)
        xpix = f.add(xrow, f.mul(j, xs_j))
        crow = f.mul(f.add(f.mul(q, ow), j), str(co))
        dys = [vx.splat("%ct", f.add(crow, str(o))) for o in range(co)]
        for e in range(r):
            for c in range(cvecs):
                xv = vx.load("%x", f.add(xpix, offs[e]), c)
                for o in range(co):
                    vx.fma_into(accs[e * co + o][c], xv, dys[o])
        f.end(j, lj)
        f.end(q, lq)
        for e in range(r):
            for o in range(co):
                row = f.mul(f.add(f.mul(f.add(tap0, str(e)), str(co)), str(o)), str(cp))
                for c in range(cvecs):
                    x = f.tmp()
                    f.emit(f"{x} = load {vx.ty}, ptr {accs[e * co + o][c]}")
                    f.emit(f"store {vx.ty} {x}, ptr {vx.ptr('%dw', f.add(row, str(c * lanes)))}, "
                           "align 4")

    _tap_blocks(f, block, full, rows, tail)
    f.end(ch, lc)
    return f.function(symbol, ["dw", "x", "ct", "p"], noalias=True)
