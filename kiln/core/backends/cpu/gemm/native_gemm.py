"""Register-blocked native kernels for batches of small float32 products, the Winograd
convolutions' ``C[b] = A[b] @ B[b]`` (docs/architecture.md, "Winograd convolutions"), and
:func:`dot_ir` for products into one column.

OpenBLAS runs these products (a few hundred to a few thousand rows, 8-128 inner products and
columns) at a fraction of its speed on large ones: packing costs as much as the arithmetic
when an operand is 32 x 32. Here each block of ``R`` rows by ``V`` vectors of ``L`` lanes
keeps its ``R x V`` accumulators in registers over the whole inner dimension, ``B``'s
``K x (V L)`` slice stays in the L1 cache, and every ``A`` value is broadcast once per
block (the classic micro-kernel; no packing: ``A`` is read in place through its strides, so
``A`` may be the transposed view of the kernel gradient's ``V^T``).

Arguments (flat float32 arrays): ``(c, a, b, p)``; ``p = [c size, a size, b size, M, K, N,
a_batch, a_row, a_inner, b_batch, b_inner, c_batch, c_row, b0, b1]`` (strides in elements;
``B`` and ``C`` are unit-stride along the columns): products ``b0 <= b < b1``. The columns
run in blocks of ``V L``, then of ``L``; ``N`` must be a multiple of ``L`` (the caller
checks); rows in blocks of ``R``, then one by one.
"""

from __future__ import annotations

from kiln.core.backends.cpu.codegen.ir_kernel import _div, _Kernel, bias_relu_ir, splat_fma_ir
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.spec import CodegenError


def _start(name: str, dtype: str, lanes: int, ranks: tuple = (1, 1, 1),
           n_p: int = 10) -> tuple[_Kernel, str, str]:
    """The kernel (by default the parameter layout of the module docstring: three flat arrays,
    ten parameters), its vector type and the declared FMA intrinsic of ``lanes`` floats."""
    if dtype != "float32":
        raise CodegenError(f"native {name}: {dtype} not generated")
    k = _Kernel(ranks, n_p)
    vec = f"<{lanes} x float>"
    fma = f"@llvm.fma.v{lanes}f32"
    k.f.declare.add(f"declare {vec} {fma}({vec}, {vec}, {vec})")
    return k, vec, fma


def gemm_ir(symbol: str, dtype: str, lanes: int, rows: int, vecs: int,
            accumulate: bool = False) -> str:
    """The module of ``@symbol`` (see the module docstring) with ``L = lanes``, ``R = rows``,
    ``V = vecs``; ``accumulate``: ``C[b] += A[b] @ B[b]`` (the accumulators start from C)."""
    k, vec, fma = _start("gemm", dtype, lanes)
    f = k.f
    m, kk, n, sab, sar, sak, sbb, sbk, scb, scr = k.p
    bi, lb = f.begin(k.n1, k.n0)
    base = (f.mul(bi, sab), f.mul(bi, sbb), f.mul(bi, scb))
    _tiles(k, vec, fma, lanes, rows, vecs, base, (m, kk, n, sar, sak, sbk, scr), accumulate)
    f.end(bi, lb)
    return f.function(symbol, ["c", "a", "b", "p"], noalias=True)


def batched_ir(symbol: str, dtype: str, lanes: int, rows: int, vecs: int) -> str:
    """The module of ``@symbol``: ``C[i, j] = A[i, j] @ B[i, j]`` over two batch axes
    (``j < H``: an attention's heads, whose matrices sit inside each sample's rows, so no one
    stride reaches them all), each product as :func:`gemm_ir`'s. Arguments ``(c, a, b, p)``,
    ``p = [c size, a size, b size, M, K, N, H, a_i, a_j, a_row, a_inner, b_i, b_j, b_inner,
    c_i, c_j, c_row, p0, p1]`` (strides in elements; ``B`` and ``C`` unit-stride along the
    columns, ``N`` a multiple of ``L``): the products ``p0 <= i * H + j < p1``."""
    k, vec, fma = _start("batched", dtype, lanes, n_p=14)
    f = k.f
    m, kk, n, nh, sai, saj, sar, sak, sbi, sbj, sbk, sci, scj, scr = k.p
    q, lq = f.begin(k.n1, k.n0)
    i = _div(f, q, nh)
    j = k.sub(q, f.mul(i, nh))
    base = tuple(f.add(f.mul(i, si), f.mul(j, sj))
                 for si, sj in ((sai, saj), (sbi, sbj), (sci, scj)))
    _tiles(k, vec, fma, lanes, rows, vecs, base, (m, kk, n, sar, sak, sbk, scr))
    f.end(q, lq)
    return f.function(symbol, ["c", "a", "b", "p"], noalias=True)


def _tiles(k: _Kernel, vec: str, fma: str, lanes: int, rows: int, vecs: int, base: tuple,
           geo: tuple, accumulate: bool = False) -> None:
    """One product ``C = A @ B`` at the element offsets ``base`` (of A, B, C), ``geo = (M, K,
    N, a_row, a_inner, b_inner, c_row)``: the columns in blocks of ``V L`` (then ``L``), each
    over the rows in blocks of ``R`` (then one by one)."""
    f = k.f
    m, kk, n, sar, sak, sbk, scr = geo
    wide = lanes * vecs
    n_wide = f.mul(_div(f, n, str(wide)), str(wide))
    m_full = f.mul(_div(f, m, str(rows)), str(rows))

    def columns(start: str, stop: str, width: int, nv: int) -> None:
        q, lq = f.begin(_div(f, k.sub(stop, start), str(width)))
        n0 = f.add(start, f.mul(q, str(width)))
        r, lr = f.begin(_div(f, m_full, str(rows)))
        _block(f, vec, fma, lanes, rows, nv, f.mul(r, str(rows)), n0, base,
               (kk, sar, sak, sbk, scr), accumulate)
        f.end(r, lr)
        r1, lr1 = f.begin(m, m_full)
        _block(f, vec, fma, lanes, 1, nv, r1, n0, base, (kk, sar, sak, sbk, scr), accumulate)
        f.end(r1, lr1)
        f.end(q, lq)

    columns("0", n_wide, wide, vecs)
    columns(n_wide, n, lanes, 1)


def _block(f, vec: str, fma: str, lanes: int, rows: int, nv: int, r0: str, n0: str,
           base: tuple, geo: tuple, accumulate: bool = False, bias: bool = False,
           relu: bool = False, mask: str | None = None,
           update: tuple[str, str] | None = None, apply: bool = False,
           gate: str | None = None, ends: tuple[str, str] | None = None) -> None:
    """``C[r0:r0+rows, n0:n0+nv*lanes] (+)= A[r0:r0+rows, :] @ B[:, n0:...]`` with the
    accumulators in registers (allocas that LLVM promotes); ``bias``: plus ``%bias[n0:...]``
    (one value per column), ``relu``: then kiln's ReLU, before the store; ``mask`` (a constant
    ``<lanes x i1>``): the columns of the lanes it sets only (loads and stores masked);
    ``update`` (two splat registers ``alpha``, ``beta``): ``C = alpha * (A @ B) + beta * C``,
    the ``gemm`` op's order (two products, then their sum: no FMA, so a NaN or infinity in
    ``C`` reaches the result as in the reference); ``apply``: then also ``W += C`` (``%w``,
    laid out as ``C``: SGD momentum's ``w + v`` after its velocity's update); ``gate`` (a
    splat register ``t``): ``C = (A @ B) * float(G > t)`` with ``%g`` laid out as ``C`` (a
    ReLU's gradient: the product's value times 1 or 0, so NaN and infinities stay as the
    separate kernel leaves them). ``ends`` (two ``i1`` registers ``first``, ``last``): one
    block of the inner dimension (``geo`` its length, ``base`` its start) of several: the
    accumulators start from ``C`` unless ``first``, and the epilogue applies only where
    ``last`` (the sums stored between blocks are the float32 values the registers held: the
    same order of operations, the same bits)."""
    kk, sar, sak, sbk, scr = geo
    a0, b0, c0 = base
    f.labels += 1
    tag = f"acc{f.labels}"
    accs = [[f"%{tag}.{i}.{v}" for v in range(nv)] for i in range(rows)]
    for i, row in enumerate(accs):
        crow = (f.add(f.add(c0, f.mul(f.add(r0, str(i)), scr)), n0)
                if accumulate or ends is not None else None)
        for v, name in enumerate(row):
            f.allocas.append(f"  {name} = alloca {vec}")
            if ends is not None:
                g, y = f.tmp(), f.tmp()
                f.emit(f"{g} = getelementptr inbounds float, ptr %c, i64 "
                       f"{f.add(crow, str(v * lanes))}")
                x = _load(f, vec, g, "0", mask)
                f.emit(f"{y} = select i1 {ends[0]}, {vec} zeroinitializer, {vec} {x}")
                f.emit(f"store {vec} {y}, ptr {name}")
            elif accumulate:
                x, g = f.tmp(), f.tmp()
                f.emit(f"{g} = getelementptr inbounds float, ptr %c, i64 "
                       f"{f.add(crow, str(v * lanes))}")
                f.emit(f"{x} = load {vec}, ptr {g}, align 4")
                f.emit(f"store {vec} {x}, ptr {name}")
            else:
                f.emit(f"store {vec} zeroinitializer, ptr {name}")
    arow = [f.add(a0, f.mul(f.add(r0, str(i)), sar)) for i in range(rows)]
    # what the next block's epilogue reads besides its accumulators (the block of the rows
    # below, which the loops run next), asked for now: its cache lines arrive while this
    # block's products run (the velocity and weights of an update leave the caches between
    # steps). The MLP's training step (784 x 512 and 512 x 256 updates, 512 x 128 gate),
    # median us in two A/B runs: 1,570 and 1,649 against 1,612 and 1,675 with this block's
    # own lines asked for at its start; the 784 x 512 update alone with both arrays evicted:
    # 626 against 664 (and 710-806 with none asked for). A row past the end is only a
    # hint: its address is computed without ``inbounds``, and a prefetch never faults.
    early = ([("%c", 1)] if update is not None else []) + ([("%w", 1)] if apply else []) + (
        [("%g", 0)] if gate is not None else [])
    if early:
        f.declare.add("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)")
    for arr, write in early:
        for i in range(rows):
            row = f.add(f.add(c0, f.mul(f.add(r0, str(rows + i)), scr)), n0)
            for v in range(nv):
                g = f.tmp()
                f.emit(f"{g} = getelementptr float, ptr {arr}, i64 "
                       f"{f.add(row, str(v * lanes))}")
                f.emit(f"call void @llvm.prefetch.p0(ptr {g}, i32 {write}, i32 3, i32 1)")
    t, lt = f.begin(kk)
    brow = f.add(f.add(b0, f.mul(t, sbk)), n0)
    bvals = []
    for v in range(nv):
        bvals.append(_load(f, vec, "%b", f.add(brow, str(v * lanes)), mask))
    for i in range(rows):
        splat_fma_ir(f, "float", 4, lanes, fma, f.add(arow[i], f.mul(t, sak)), bvals,
                     accs[i][:nv])
    f.end(t, lt)
    bvals = []
    for v in range(nv if bias else 0):
        bvals.append(_load(f, vec, "%bias", f.add(n0, str(v * lanes)), mask))
    for i in range(rows):
        crow = f.add(f.add(c0, f.mul(f.add(r0, str(i)), scr)), n0)
        for v in range(nv):
            x, g = f.tmp(), f.tmp()
            f.emit(f"{x} = load {vec}, ptr {accs[i][v]}")
            y = bias_relu_ir(f, vec, lanes, x, bvals[v] if bias else None, relu)
            if ends is not None and y != x:
                z = f.tmp()
                f.emit(f"{z} = select i1 {ends[1]}, {vec} {y}, {vec} {x}")
                y = z
            x = y
            f.emit(f"{g} = getelementptr inbounds float, ptr %c, i64 "
                   f"{f.add(crow, str(v * lanes))}")
            if gate is not None:
                gg, cmp, m, y = f.tmp(), f.tmp(), f.tmp(), f.tmp()
                f.emit(f"{gg} = getelementptr inbounds float, ptr %g, i64 "
                       f"{f.add(crow, str(v * lanes))}")
                h = _load(f, vec, gg, "0", mask)
                f.emit(f"{cmp} = fcmp ogt {vec} {h}, {gate}")
                f.emit(f"{m} = uitofp <{lanes} x i1> {cmp} to {vec}")
                f.emit(f"{y} = fmul {vec} {x}, {m}")
                x = y
            if update is not None:
                old = _load(f, vec, g, "0", mask)
                ax, bc, y = f.tmp(), f.tmp(), f.tmp()
                f.emit(f"{ax} = fmul {vec} {update[0]}, {x}")
                f.emit(f"{bc} = fmul {vec} {update[1]}, {old}")
                f.emit(f"{y} = fadd {vec} {ax}, {bc}")
                x = y
                if apply:
                    gw, w1 = f.tmp(), f.tmp()
                    f.emit(f"{gw} = getelementptr inbounds float, ptr %w, i64 "
                           f"{f.add(crow, str(v * lanes))}")
                    w0 = _load(f, vec, gw, "0", mask)
                    f.emit(f"{w1} = fadd {vec} {w0}, {x}")
                    if mask is None:
                        f.emit(f"store {vec} {w1}, ptr {gw}, align 4")
                    else:
                        f.emit(f"call void @llvm.masked.store.v{lanes}f32.p0({vec} {w1}, "
                               f"ptr {gw}, i32 4, <{lanes} x i1> {mask})")
            if mask is None:
                f.emit(f"store {vec} {x}, ptr {g}, align 4")
            else:
                f.emit(f"call void @llvm.masked.store.v{lanes}f32.p0({vec} {x}, ptr {g}, i32 4, "
                       f"<{lanes} x i1> {mask})")


def _load(f, vec: str, arr: str, index: str, mask: str | None) -> str:
    """The vector at ``arr[index:]``, masked by ``mask`` (None: a plain load)."""
    g, x = f.tmp(), f.tmp()
    f.emit(f"{g} = getelementptr inbounds float, ptr {arr}, i64 {index}")
    if mask is None:
        f.emit(f"{x} = load {vec}, ptr {g}, align 4")
    else:
        lanes = vec.split()[0][1:]
        f.emit(f"{x} = call {vec} @llvm.masked.load.v{lanes}f32.p0(ptr {g}, i32 4, "
               f"<{lanes} x i1> {mask}, {vec} zeroinitializer)")
    return x


def _mask(f, vec: str, lanes: int, tail: int) -> str:
    """The constant mask of the first ``tail`` lanes, with the masked intrinsics declared."""
    f.declare.add(f"declare {vec} @llvm.masked.load.v{lanes}f32.p0(ptr, i32, <{lanes} x i1>, "
                  f"{vec})")
    f.declare.add(f"declare void @llvm.masked.store.v{lanes}f32.p0({vec}, ptr, i32, "
                  f"<{lanes} x i1>)")
    return "<" + ", ".join(f"i1 {'true' if e < tail else 'false'}" for e in range(lanes)) + ">"


def matmul_ir(symbol: str, dtype: str, lanes: int, rows: int, vecs: int, chunk: int,
              tail: int = 0, bias: bool = False, relu: bool = False,
              update: bool = False, apply: bool = False, gate: bool = False,
              inner: int = 0) -> str:
    """The module of ``@symbol`` for rows ``r0 <= r < r1`` and columns ``c0 <= c < c1`` of
    one product ``C = A @ B`` (``native_matmul``: a Dense layer's GEMM, its rows or its
    columns split over kiln's threads: the split range is the kernel's outer range, the
    other one two parameters, and a parameter says which is which), with the
    optional epilogue ``relu?(C + bias)`` applied before the store, or (``update``) the
    ``gemm`` op's ``C = alpha * (A @ B) + beta * C`` (an optimizer's update of its velocity
    by the kernel gradient), and with ``apply`` ``W += C`` after it (the update of the
    weights by that velocity); or (``gate``) ``C = (A @ B) * float(G > t)`` (an input
    gradient through a ReLU: ``G`` the ReLU's output, laid out as ``C``, and may be ``C``'s
    own storage, read before the store; ``t`` a float32 scalar array).

    Arguments (flat float32 arrays): ``(c, a, b[, bias][, alpha, beta[, w]][, g, t], p)``;
    ``p = [c size, a size, b size, (bias size,) (1, 1, (w size,)) (g size, 1,) M, K, N,
    a_row, a_inner, b_inner, c_row, by_columns, o0, o1, n0, n1]``: ``(n0, n1)`` the split
    range (rows; columns where ``by_columns`` is 1), ``(o0, o1)`` the other (strides in
    elements;
    ``B`` and ``C`` unit-stride along the columns, ``N % lanes == tail``: the last ``tail``
    columns are one masked vector, in a column range that ends at ``N``; a column range
    starts at a multiple of ``lanes``). The rows
    run in chunks of ``chunk`` (``chunk x K`` of ``A`` stays in the L2 cache: read from memory
    once); per chunk, the columns in blocks of ``V L`` (then of ``L``), whose ``K x (V L)``
    slice of ``B`` stays in cache while the chunk's rows pass in blocks of ``R`` (then one by
    one). ``inner`` > 0 (not with ``update``, ``apply`` or ``gate``: ``C`` holds an input
    of their epilogue): per chunk, the inner dimension in blocks of ``inner``, each over
    every column block, the sums kept in ``C`` between blocks (:func:`_block`'s ``ends``):
    ``B``'s slice of a block then stays in the L2 cache. The MNIST MLP's 784 x 512 layer on a
    2-core Xeon (Emerald Rapids): its ``K x 64`` slices (200 KB, rows 2 KB apart) did not,
    and the product ran at 0.66-0.75x OpenBLAS's speed (docs/performance.md)."""
    if inner and (update or apply or gate):
        raise CodegenError("native matmul: inner blocks with an update or gate epilogue")
    ranks = (1, 1, 1) + ((1,) if bias else ()) + ((1, 1) if update else ()) + (
        (1,) if apply else ()) + ((1, 1) if gate else ())
    k, vec, fma = _start("matmul", dtype, lanes, ranks, 10)
    f = k.f
    f.declare.add("declare i64 @llvm.smin.i64(i64, i64)")
    scales: tuple[str, str] | None = None
    if update:
        splats = []
        for arr in ("%alpha", "%beta"):
            s, one, splat = f.tmp(), f.tmp(), f.tmp()
            f.emit(f"{s} = load float, ptr {arr}, align 4")
            f.emit(f"{one} = insertelement {vec} poison, float {s}, i64 0")
            f.emit(f"{splat} = shufflevector {vec} {one}, {vec} poison, "
                   f"<{lanes} x i32> zeroinitializer")
            splats.append(splat)
        scales = (splats[0], splats[1])
    threshold = None
    if gate:
        s, one, threshold = f.tmp(), f.tmp(), f.tmp()
        f.emit(f"{s} = load float, ptr %t, align 4")
        f.emit(f"{one} = insertelement {vec} poison, float {s}, i64 0")
        f.emit(f"{threshold} = shufflevector {vec} {one}, {vec} poison, "
               f"<{lanes} x i32> zeroinitializer")
    _, kk, _, sar, sak, sbk, scr, by_columns, o0, o1 = k.p
    cols = Val(by_columns, "i64")
    r0, r1, c0, c1 = (f.expr.select(cols, Val(x, "i64"), Val(y, "i64")).ref
                      for x, y in ((o0, k.n0), (o1, k.n1), (k.n0, o0), (k.n1, o1)))
    base = ("0", "0", "0")
    geo = (kk, sar, sak, sbk, scr)
    wide = lanes * vecs
    n_wide = f.add(c0, f.mul(_div(f, k.sub(c1, c0), str(wide)), str(wide)))
    ch, lc = f.begin(_div(f, f.add(k.sub(r1, r0), str(chunk - 1)), str(chunk)))
    lo, hi = f.add(r0, f.mul(ch, str(chunk))), f.tmp()
    f.emit(f"{hi} = call i64 @llvm.smin.i64(i64 {f.add(lo, str(chunk))}, i64 {r1})")
    full = f.add(lo, f.mul(_div(f, k.sub(hi, lo), str(rows)), str(rows)))

    ends: tuple[str, str] | None = None
    if inner:  # the inner dimension's blocks: kb of nkb, from k0, klen long
        nkb = _div(f, f.add(kk, str(inner - 1)), str(inner))
        kb, lkb = f.begin(nkb)
        k0, klen, first, last = f.mul(kb, str(inner)), f.tmp(), f.tmp(), f.tmp()
        f.emit(f"{klen} = call i64 @llvm.smin.i64(i64 {str(inner)}, i64 {k.sub(kk, k0)})")
        f.emit(f"{first} = icmp eq i64 {kb}, 0")
        f.emit(f"{last} = icmp eq i64 {kb}, {k.sub(nkb, '1')}")
        base, geo, ends = (f.mul(k0, sak), f.mul(k0, sbk), "0"), (klen, *geo[1:]), (first, last)

    def columns(start: str, stop: str, width: int, nv: int, mask: str | None = None) -> None:
        q, lq = f.begin(_div(f, k.sub(stop, start), str(width)))
        n0 = f.add(start, f.mul(q, str(width)))
        blk, lb = f.begin(_div(f, k.sub(full, lo), str(rows)))
        _block(f, vec, fma, lanes, rows, nv, f.add(lo, f.mul(blk, str(rows))), n0, base, geo,
               bias=bias, relu=relu, mask=mask, update=scales, apply=apply, gate=threshold,
               ends=ends)
        f.end(blk, lb)
        one, lo1 = f.begin(hi, full)
        _block(f, vec, fma, lanes, 1, nv, one, n0, base, geo, bias=bias, relu=relu, mask=mask,
               update=scales, apply=apply, gate=threshold, ends=ends)
        f.end(one, lo1)
        f.end(q, lq)

    n_full = k.sub(c1, str(tail))
    columns(c0, n_wide, wide, vecs)
    columns(n_wide, n_full, lanes, 1)
    if tail:
        columns(n_full, f.add(n_full, str(lanes)), lanes, 1, _mask(f, vec, lanes, tail))
    if inner:
        f.end(kb, lkb)
    f.end(ch, lc)
    names = (["c", "a", "b"] + (["bias"] if bias else []) + (["alpha", "beta"] if update else [])
             + (["w"] if apply else []) + (["g", "t"] if gate else []))
    # the gate may be the result's own storage (the gradient written over the ReLU's output):
    # neither is noalias then, so each block's gate is read before its result is stored
    only = frozenset(n for n in names if not (gate and n in ("c", "g")))
    return f.function(symbol, names + ["p"], noalias=only)


def transpose_ir(symbol: str, dtype: str, lanes: int = 16) -> str:
    """The module of ``@symbol`` for ``D = S.T`` over source rows ``r0 <= r < r1`` (a
    ``d @ W.T`` product's ``W.T`` laid out for :func:`matmul_ir`, whose ``B`` is unit-stride
    along its columns). Arguments: ``(d, s, p)``, ``p = [d size, s size, R, C, r0, r1]``
    (``S`` is ``R x C`` and ``D`` ``C x R``, both C-contiguous). Tiles of ``lanes x lanes``
    are read as ``lanes`` row vectors and transposed in registers (log2(lanes) rounds of
    two-source shuffles: round ``b`` swaps the row and column bits ``b``); the rest of the
    columns, and of the rows, one element at a time."""
    if dtype != "float32":
        raise CodegenError(f"native transpose: {dtype} not generated")
    k = _Kernel((1, 1), 2)
    f = k.f
    vec = f"<{lanes} x float>"
    big, c = k.p
    r0, r1 = k.n0, k.n1
    tiles = _div(f, k.sub(r1, r0), str(lanes))
    cols = f.mul(_div(f, c, str(lanes)), str(lanes))
    ti, lti = f.begin(tiles)
    rb = f.add(r0, f.mul(ti, str(lanes)))
    tj, ltj = f.begin(_div(f, c, str(lanes)))
    cb = f.mul(tj, str(lanes))
    rows = [_load(f, vec, "%s", f.add(f.mul(f.add(rb, str(i)), c), cb), None)
            for i in range(lanes)]
    b = 1
    while b < lanes:
        lo = [j if j & b == 0 else lanes + j - b for j in range(lanes)]
        hi = [j + b if j & b == 0 else lanes + j for j in range(lanes)]
        new = list(rows)
        for i in range(lanes):
            if i & b == 0:
                for target, mask in ((i, lo), (i + b, hi)):
                    v = f.tmp()
                    f.emit(f"{v} = shufflevector {vec} {rows[i]}, {vec} {rows[i + b]}, "
                           f"<{lanes} x i32> <" + ", ".join(f"i32 {m}" for m in mask) + ">")
                    new[target] = v
        rows = new
        b *= 2
    for j in range(lanes):
        g = f.tmp()
        f.emit(f"{g} = getelementptr inbounds float, ptr %d, i64 "
               f"{f.add(f.mul(f.add(cb, str(j)), big), rb)}")
        f.emit(f"store {vec} {rows[j]}, ptr {g}, align 4")
    f.end(tj, ltj)
    ct, lct = f.begin(c, cols)
    for i in range(lanes):
        r = f.add(rb, str(i))
        x = f.load("%s", "float32", f.add(f.mul(r, c), ct))
        f.store("%d", "float32", f.add(f.mul(ct, big), r), x)
    f.end(ct, lct)
    f.end(ti, lti)
    r, lr = f.begin(r1, f.add(r0, f.mul(tiles, str(lanes))))
    cc, lcc = f.begin(c)
    x = f.load("%s", "float32", f.add(f.mul(r, c), cc))
    f.store("%d", "float32", f.add(f.mul(cc, big), r), x)
    f.end(cc, lcc)
    f.end(r, lr)
    return f.function(symbol, ["d", "s", "p"], noalias=True)


def dot_ir(symbol: str, dtype: str, lanes: int) -> str:
    """The module of ``@symbol`` for products into one column (``N = 1``; a Conv2D(1) output
    layer's forward): each output a dot product of an ``A`` row (unit-stride along the inner
    dimension) and ``B``'s column (unit-stride), ``L``-lane vectors along the inner dimension,
    a scalar tail; the same arguments as :func:`gemm_ir`."""
    k, vec, _ = _start("dot", dtype, lanes)
    f = k.f
    m, kk, _, sab, sar, _, sbb, _, scb, scr = k.p
    fma = f"@llvm.fma.v{lanes}f32"
    red = f"@llvm.vector.reduce.fadd.v{lanes}f32"
    f.declare.add(f"declare float {red}(float, {vec})")
    bi, lb = f.begin(k.n1, k.n0)
    a0, b0, c0 = f.mul(bi, sab), f.mul(bi, sbb), f.mul(bi, scb)
    k_vec = f.mul(_div(f, kk, str(lanes)), str(lanes))
    r, lr = f.begin(m)
    arow = f.add(a0, f.mul(r, sar))
    f.labels += 1
    acc, tail = f"%dot{f.labels}.v", f"%dot{f.labels}.s"
    f.allocas += [f"  {acc} = alloca {vec}", f"  {tail} = alloca float"]
    f.emit(f"store {vec} zeroinitializer, ptr {acc}")
    f.emit(f"store float 0.0, ptr {tail}")
    q, lq = f.begin(_div(f, k_vec, str(lanes)))
    _fma_step(f, vec, fma, acc, arow, b0, f.mul(q, str(lanes)))
    f.end(q, lq)
    t, lt = f.begin(kk, k_vec)
    f.declare.add("declare float @llvm.fma.f32(float, float, float)")
    _fma_step(f, "float", "@llvm.fma.f32", tail, arow, b0, t)
    f.end(t, lt)
    v, s, total, g = f.tmp(), f.tmp(), f.tmp(), f.tmp()
    f.emit(f"{v} = load {vec}, ptr {acc}")
    f.emit(f"{s} = load float, ptr {tail}")
    f.emit(f"{total} = call reassoc float {red}(float {s}, {vec} {v})")
    f.emit(f"{g} = getelementptr inbounds float, ptr %c, i64 {f.add(c0, f.mul(r, scr))}")
    f.emit(f"store float {total}, ptr {g}, align 4")
    f.end(r, lr)
    f.end(bi, lb)
    return f.function(symbol, ["c", "a", "b", "p"], noalias=True)


def _fma_step(f, ty: str, fma: str, acc: str, arow: str, brow: str, at: str) -> None:
    """``*acc = fma(a[arow + at], b[brow + at], *acc)`` on ``ty`` (a vector or a float)."""
    vals = []
    for arr, first in (("%a", arow), ("%b", brow)):
        g, x = f.tmp(), f.tmp()
        f.emit(f"{g} = getelementptr inbounds float, ptr {arr}, i64 {f.add(first, at)}")
        f.emit(f"{x} = load {ty}, ptr {g}, align 4")
        vals.append(x)
    old, new = f.tmp(), f.tmp()
    f.emit(f"{old} = load {ty}, ptr {acc}")
    f.emit(f"{new} = call {ty} {fma}({ty} {vals[0]}, {ty} {vals[1]}, {ty} {old})")
    f.emit(f"store {ty} {new}, ptr {acc}")
