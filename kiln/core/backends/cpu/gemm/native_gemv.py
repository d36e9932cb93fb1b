"""Products of a few rows, ``C = A @ B`` with ``A`` of ``M <= MAX_ROWS`` rows (a Dense layer
at serving batch sizes: row vector times matrix), on kiln's own kernel generated as LLVM IR
for the target's vector width (:func:`gemv_ir`), with the bias add and ReLU that follow the
product as its epilogue (issue 47: batch-1 serving).

At batch 1 OpenBLAS's ``sgemv`` (behind NumPy's dispatch or kiln's kept call) costs about
what onnxruntime's whole MLP call does, and its ``sgemm`` at 2-4 rows 4x more; the bias add
and ReLU were one more step and one more pass. Two ways to run the product, both reading
``B`` once whatever ``M`` (docs/performance.md, "Row-vector products"):

* :func:`_stream`: ``B`` read row after row as one sequential stream, ``U`` of its rows a
  pass added into ``C``'s rows (which stay in the L1 cache), the epilogue in one pass over
  ``C`` at the end: the faster where the rows are few (:func:`streams`);
* :func:`_strips`: the columns in strips of ``V`` vectors, each strip's ``M x V``
  accumulators in registers over the whole inner dimension (``V``: within half the
  registers, :func:`_vectors`), the epilogue applied before the one store.

Over kiln's threads (from ``gemv_split_work`` multiply-adds) the product splits over its inner
dimension, each part reading one contiguous block of ``B``'s rows, then one step adds the
parts and applies the epilogue (:func:`_split_inner`, :func:`combine_ir`).

The vector width is the target's (:attr:`kiln.core.backends.cpu.target.CpuTarget.vector_lanes`:
512-bit vectors on AVX-512, 256-bit on AVX2); float32 and float64. One kernel holds the code
for every ``M`` up to :data:`MAX_ROWS` and branches on it, so a plan at a new serving batch
size compiles nothing.

Arguments (flat arrays of one dtype): ``(c, a, b[, bias], p)``; ``p = [c size, a size,
b size, (bias size,) M, K, N, a_row, a_inner, b_row, n0, n1]`` (strides in elements; ``B``
and ``C`` unit-stride along the columns, ``C`` C-contiguous): the columns ``n0 <= n < n1``
(``n0`` a multiple of ``L``; a range that does not end at ``N`` holds whole vectors), whole
vectors first, then one masked vector of ``N % L`` lanes.
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.codegen.ir_kernel import _div, _Kernel, bias_relu_ir, splat_fma_ir
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.spec import CodegenError
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.backends.cpu.runtime.parts import native_split

# Rows of A up to which a product runs here (OpenBLAS's GEMM takes more rows).
MAX_ROWS = 4
# Multiply-adds from which the inner dimension is split over kiln's threads:
# options.gemv_split_work (its own rule: serial.py leaves the split as it is). A Dense layer at
# batch 1 in a native plan (runtime/native_plan.py), us, one thread / split in two (2-core
# Zen 5; benchmarks/bench_serving.py --modes products): quiet, 128 x 128 0.70 / 0.53,
# 256 x 256 2.0 / 1.37, 512 x 512 8.6 / 4.1, 1024 x 512 19.1 / 9.3; beside another CPU-bound
# job, 128 x 128 1.10x, 256 x 256 1.08x, 512 x 512 0.91x, 784 x 512 0.47x: from 2^18
# multiply-adds, where the split pays on a busy machine too. The kernel itself:
# options.native_gemv.
# Which kernel (:func:`streams`, options.gemv_stream_rows / gemv_stream_vectors). The MNIST
# MLP's three products (784 x 512, 512 x 512, 512 x 10) one after the other, median us each,
# 2-core Zen 4 under load, AVX-512:
# M = 1: strips 19.2 / 12.5 / 0.8, stream (4 rows of B a pass) 15.4 / 10.4 / 1.3;
# M = 2: 19.5 / 13.2 / 0.8 against 17.9 / 12.5 / 2.3; M = 3: 27.6 / 18.4 against 19.9 / 13.2;
# M = 4: 18.0 / 11.7 against 20.3 / 13.1 (the strips' 16 accumulators pay there). AVX2
# (KILN_CPU=x86-64-v3), the same host: M = 1: 22.8 / 15.3 against 19.1 / 12.4; M = 3:
# 38.7 / 25.4 against 19.6 / 13.2; M = 4: 53.4 / 34.5 against 27.2 / 20.8.
UNROLL = 4
_SCALAR = {"float32": ("float", "f32", 4), "float64": ("double", "f64", 8)}


def lanes(dtype: str) -> int:
    """Elements of ``dtype`` per vector register of the current target."""
    return target.current().vector_lanes * 4 // _SCALAR[dtype][2]


def registers() -> int:
    """Vector registers of the current target (32 with AVX-512, 16 with AVX2)."""
    return 32 if target.current().has_avx512 else 16


def _vectors(rows: int, regs: int) -> int:
    """``V``: vectors per row of a block, so that the ``rows x V`` accumulators take at most
    half the registers (the rest hold ``B``'s vectors and the broadcast), at most 8."""
    v = 8
    while v > 1 and rows * v > regs // 2:
        v //= 2
    return v


def streams(m: int, n: int, width: int) -> bool:
    """Whether the product takes :func:`stream_ir` (``B`` read as one sequential stream) rather
    than :func:`gemv_ir` (``B`` read in column strips, the accumulators in registers): for up
    to ``gemv_stream_rows`` rows with AVX-512 (any with AVX2: its 16 registers make the strips
    too narrow) and at least ``gemv_stream_vectors`` vectors of columns (options)."""
    opts = options.current()
    return ((m <= opts.gemv_stream_rows or registers() < 32)
            and n >= opts.gemv_stream_vectors * width)


def suits(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``out = a @ b`` runs here: float32 or float64 matrices of one dtype, ``a`` of
    at most :data:`MAX_ROWS` rows with positive strides, ``b`` unit-stride along its columns
    (a weight as stored, not its transposed view), ``out`` C-contiguous and apart from both."""
    if not (options.current().native_gemv and a.ndim == b.ndim == out.ndim == 2
            and a.dtype.name in _SCALAR):
        return False
    if not (a.dtype == b.dtype == out.dtype):
        return False
    (m, k), n = a.shape, b.shape[1]
    size = a.itemsize
    if not (1 <= m <= MAX_ROWS and k >= 1 and n >= 1 and b.shape[0] == k
            and out.shape == (m, n)):
        return False
    if b.strides[1] != size or b.strides[0] < size * n or b.strides[0] % size:
        return False
    if any(s <= 0 or s % size for s in a.strides) or not out.flags.c_contiguous:
        return False
    if np.shares_memory(out, a) or np.shares_memory(out, b):
        return False
    return native.enabled()


def _ranges(m: int, k: int, n: int) -> list[tuple[int, int]]:
    """The ranges of ``B``'s rows (the inner dimension) of the kernel's parts: the runtime's
    split of the ``k`` rows (one range where the product is under ``gemv_split_work``
    multiply-adds, options), one range where a part would have under :data:`UNROLL` rows."""
    ranges = workers.split(k, work=m * k * n, min_work=options.current().gemv_split_work)
    return ranges if min(hi - lo for lo, hi in ranges) >= UNROLL else [(0, k)]


def kinds(n: int, width: int) -> tuple[tuple[str, int], ...]:
    """Per number of rows ``M = 1 .. MAX_ROWS``, the kernel that computes it: ``("s",
    UNROLL)`` the stream, ``("v", V)`` the column strips of ``V`` vectors (:func:`streams`)."""
    regs = registers()
    return tuple(("s", UNROLL) if streams(m, n, width) else ("v", _vectors(m, regs))
                 for m in range(1, MAX_ROWS + 1))


def add(b, a: np.ndarray, bm: np.ndarray, out: np.ndarray,
        epilogue: tuple[np.ndarray, bool] | None = None) -> bool:
    """Adds ``out = relu?(a @ bm + bias)`` (``epilogue = (bias, relu)``, a bias of one value
    per column in ``out``'s dtype; None: the plain product) to the plan being built; False
    where :func:`suits` says no or the kernel does not build. One kernel serves every number
    of rows up to :data:`MAX_ROWS` (the count is a parameter): a plan for a new serving batch
    size compiles nothing new."""
    if not suits(a, bm, out):
        return False
    bias, relu = epilogue if epilogue is not None else (None, False)
    if bias is not None and (bias.shape != (out.shape[1],) or bias.dtype != out.dtype
                             or not bias.flags.c_contiguous or np.shares_memory(out, bias)):
        return False
    dtype = out.dtype.name
    (m, k), n = a.shape, bm.shape[1]
    width = lanes(dtype)
    size = a.itemsize
    arrays = (out.reshape(-1), _flat(a), _flat(bm)) + ((bias,) if bias is not None else ())
    p = [m, k, n, a.strides[0] // size, a.strides[1] // size, bm.strides[0] // size]
    plan = kinds(n, width)
    name = (f"dense_gemv_l{width}t{n % width}{'b' if bias is not None else ''}"
            f"{'r' if relu else ''}_{''.join(f'{c}{v}' for c, v in plan)}")

    def make(symbol: str, dt: str) -> str:
        return gemv_ir(symbol, dt, width, n % width, plan, bias is not None, relu)

    tag = ("_bias_relu" if relu else "_bias") if bias is not None else ""
    ranges = _ranges(m, k, n)
    if len(ranges) > 1 and _split_inner(b, a, bm, out, bias, relu, ranges, width, tag):
        return True
    return native_split(b, name, make, arrays, p, ranges=[(0, n)],
                        label=f"{b.node.op}:gemv{tag}")


def _split_inner(b, a: np.ndarray, bm: np.ndarray, out: np.ndarray, bias: np.ndarray | None,
                 relu: bool, ranges: list[tuple[int, int]], width: int, tag: str) -> bool:
    """``out = relu?(a @ bm + bias)`` as two steps: the parts, each the product over its
    range of ``B``'s rows (part 0 into ``out``, part ``j`` into a buffer of its own), then
    one pass adding the parts in order and applying the epilogue (:func:`combine_ir`).

    Split over the inner dimension, each part reads one contiguous block of ``B``: two
    parts of a 784 x 512 float32 product took 6.8 us at once against 10.6 split over the
    columns (each reading half of every row) and 14.1 on one thread, 1568 x 512 15.6
    against 30.2 and 31.8 (2-core Zen 5, AVX-512; docs/performance.md, "Row-vector
    products"). The parts are fixed with the plan, and a busy machine runs the same parts
    in order: the same bits with any load (not with another thread count: the sums' order
    follows the parts)."""
    dtype = out.dtype.name
    m, n = a.shape[0], bm.shape[1]
    size = a.itemsize
    sar, sak, sbr = a.strides[0] // size, a.strides[1] // size, bm.strides[0] // size
    flat_a, flat_b = _flat(a), _flat(bm)
    sums = [np.empty((m, n), out.dtype) for _ in ranges[1:]]
    plan = kinds(n, width)
    name = f"dense_gemv_l{width}t{n % width}_{''.join(f'{c}{v}' for c, v in plan)}"

    def part(j: int, lo: int, hi: int) -> tuple:
        dst = (out if j == 0 else sums[j - 1]).reshape(-1)
        pa = flat_a[lo * sak:]
        pb = flat_b[lo * sbr:(hi - 1) * sbr + n]
        p = [dst.size, pa.size, pb.size, m, hi - lo, n, sar, sak, sbr, 0, n]
        return dst, pa, pb, np.asarray(p, np.int64)

    first = part(0, *ranges[0])
    found = native.try_kernel(f"{name} {dtype}", first[:3], list(first[3]),
                              lambda sym: gemv_ir(sym, dtype, width, n % width, plan))
    arrays = [out.reshape(-1), *(x.reshape(-1) for x in sums)] + (
        [bias] if bias is not None else [])
    adds = native.try_kernel(
        f"gemv_sum{len(sums)}{'b' if bias is not None else ''}{'r' if relu else ''}"
        f"_l{width}t{n % width} {dtype}", arrays, [*(x.size for x in arrays), m, n, 0, n],
        lambda sym: combine_ir(sym, dtype, width, n % width, len(sums), bias is not None,
                               relu))
    if found is None or adds is None:
        return False
    parts = [part(j, lo, hi) for j, (lo, hi) in enumerate(ranges)]
    workers.add_parts(b, found[0], parts[0], ranges=ranges,
                      vary=lambda j, lo, hi: dict(enumerate(parts[j])),
                      label=f"{b.node.op}:gemv_parts", sized=True)
    b.add(adds[0], adds[1], label=f"{b.node.op}:gemv_sum{tag}")
    return True


def combine_ir(symbol: str, dtype: str, lanes: int, tail: int, count: int, bias: bool,
               relu: bool) -> str:
    """``@symbol(c, s_1 .. s_count[, bias], p)``, ``p = [sizes, M, N, 0, N]``: ``C = relu?(C
    + s_1 + ... + s_count + bias)`` over ``M x N`` C-contiguous arrays (the sums in order),
    in vectors of ``lanes``, the last ``tail`` columns of each row in a masked one."""
    if dtype not in _SCALAR:
        raise CodegenError(f"native gemv: {dtype} not generated")
    ty, suffix, size = _SCALAR[dtype]
    k = _Kernel((1,) * (1 + count + bias), 2)
    f = k.f
    vec = f"<{lanes} x {ty}>"
    m, nn = k.p
    mask = _mask_ir(f, vec, lanes, suffix, tail)
    ctx = (f, ty, vec, None, lanes, size)
    full = f.mul(_div(f, nn, str(lanes)), str(lanes))
    i, li = f.begin(m)
    row = f.mul(i, nn)

    def body(n0: str, msk: str | None) -> None:
        at = f.add(row, n0)
        x = _load(ctx, "%c", at, msk)
        for j in range(count):
            y, s_ = f.tmp(), _load(ctx, f"%s{j}", at, msk)
            f.emit(f"{y} = fadd {vec} {x}, {s_}")
            x = y
        x = bias_relu_ir(f, vec, lanes, x, _load(ctx, "%bias", n0, msk) if bias else None,
                         relu)
        g = f.tmp()
        f.emit(f"{g} = getelementptr inbounds {ty}, ptr %c, i64 {at}")
        _store_ir(ctx, x, g, msk)

    q, lq = f.begin(_div(f, full, str(lanes)))
    body(f.mul(q, str(lanes)), None)
    f.end(q, lq)
    if mask is not None:
        body(full, mask)
    f.end(i, li)
    names = ["c"] + [f"s{j}" for j in range(count)] + (["bias"] if bias else [])
    return f.function(symbol, names + ["p"], noalias=True)


def _flat(a: np.ndarray) -> np.ndarray:
    """A 1-D unit-stride view from ``a``'s first element to its last (positive strides)."""
    if a.flags.c_contiguous:
        return a.reshape(-1)
    extent = 1 + sum((d - 1) * s for d, s in zip(a.shape, a.strides)) // a.itemsize
    return np.lib.stride_tricks.as_strided(a, shape=(extent,), strides=(a.itemsize,))


def gemv_ir(symbol: str, dtype: str, lanes: int, tail: int, plan: tuple[tuple[str, int], ...],
            bias: bool = False, relu: bool = False) -> str:
    """The module of ``@symbol`` (the module docstring's arguments) for ``L = lanes``,
    ``N % L = tail``: for ``M = r`` rows it runs ``plan[r - 1]`` (``("s", U)``: :func:`_stream`
    with ``U`` rows of ``B`` a pass; ``("v", V)``: :func:`_strips` of ``V`` vectors);
    ``bias``/``relu``: the epilogue."""
    if dtype not in _SCALAR:
        raise CodegenError(f"native gemv: {dtype} not generated")
    ty, suffix, size = _SCALAR[dtype]
    k = _Kernel((1, 1, 1) + ((1,) if bias else ()), 6)
    f = k.f
    vec = f"<{lanes} x {ty}>"
    fma = f"@llvm.fma.v{lanes}{suffix}"
    f.declare.add(f"declare {vec} {fma}({vec}, {vec}, {vec})")
    m, kk, nn, sar, sak, sbr = k.p
    mask = _mask_ir(f, vec, lanes, suffix, tail)
    for rows, (kind, param) in enumerate(plan, 1):
        # the code for M == rows, branched to
        same = f.tmp()
        f.emit(f"{same} = icmp eq i64 {m}, {rows}")
        lab = f.when(Val(same, "b"))
        ctx = (f, ty, vec, fma, lanes, size, rows, kk, sar, sak, sbr, bias, relu, nn)
        (_stream if kind == "s" else _strips)(k, ctx, param, mask)
        f.done(lab)
    names = ["c", "a", "b"] + (["bias"] if bias else [])
    return f.function(symbol, names + ["p"], noalias=True)


def _strips(k: _Kernel, ctx: tuple, vecs: int, mask: str | None) -> None:
    """The columns ``n0 <= n < n1`` in strips of ``V L`` (then ``L``, then the masked tail),
    each computed by :func:`_block` with all rows' accumulators in registers."""
    f, lanes = ctx[0], ctx[4]
    c0, c1 = k.n0, k.n1

    def columns(start: str, stop: str, width: int, nv: int, m: str | None = None) -> None:
        q, lq = f.begin(_div(f, f.add(k.sub(stop, start), str(width - 1)), str(width)))
        _block(ctx, f.add(start, f.mul(q, str(width))), nv, m)
        f.end(q, lq)

    wide = lanes * vecs
    n_wide = f.add(c0, f.mul(_div(f, k.sub(c1, c0), str(wide)), str(wide)))
    n_vec = f.add(c0, f.mul(_div(f, k.sub(c1, c0), str(lanes)), str(lanes)))
    if vecs > 1:
        columns(c0, n_wide, wide, vecs)
    columns(n_wide if vecs > 1 else c0, n_vec, lanes, 1)
    if mask is not None:
        # a range ending at N leaves N % L columns: one masked vector (ceil division of the
        # rest by L: 0 or 1 blocks)
        columns(n_vec, c1, lanes, 1, mask)


def _mask_ir(f, vec: str, lanes: int, suffix: str, tail: int) -> str | None:
    """The mask of a row's last ``tail`` columns (their masked load and store declared), or
    None where the rows hold whole vectors."""
    if not tail:
        return None
    f.declare.add(f"declare {vec} @llvm.masked.load.v{lanes}{suffix}.p0(ptr, i32, "
                  f"<{lanes} x i1>, {vec})")
    f.declare.add(f"declare void @llvm.masked.store.v{lanes}{suffix}.p0({vec}, ptr, i32, "
                  f"<{lanes} x i1>)")
    return "<" + ", ".join(f"i1 {'true' if e < tail else 'false'}" for e in range(lanes)) + ">"


def _store_ir(ctx: tuple, x: str, g: str, mask: str | None) -> None:
    """Stores the vector ``x`` at the pointer ``g`` (its lanes under ``mask`` where given)."""
    f, ty, vec, _, lanes, size, *_ = ctx
    if mask is None:
        f.emit(f"store {vec} {x}, ptr {g}, align {size}")
    else:
        suffix = "f32" if ty == "float" else "f64"
        f.emit(f"call void @llvm.masked.store.v{lanes}{suffix}.p0({vec} {x}, ptr {g}, "
               f"i32 {size}, <{lanes} x i1> {mask})")


def _load(ctx: tuple, arr: str, index: str, mask: str | None) -> str:
    f, ty, vec, _, lanes, size, *_ = ctx
    g, x = f.tmp(), f.tmp()
    f.emit(f"{g} = getelementptr inbounds {ty}, ptr {arr}, i64 {index}")
    if mask is None:
        f.emit(f"{x} = load {vec}, ptr {g}, align {size}")
    else:
        suffix = "f32" if ty == "float" else "f64"
        f.emit(f"{x} = call {vec} @llvm.masked.load.v{lanes}{suffix}.p0(ptr {g}, i32 {size}, "
               f"<{lanes} x i1> {mask}, {vec} zeroinitializer)")
    return x


def _block(ctx: tuple, n0: str, nv: int, mask: str | None) -> None:
    """``C[:, n0:n0 + nv L] = relu?(A @ B[:, n0:...] + bias)`` for all the rows, the
    accumulators in registers (allocas LLVM promotes) over the whole inner dimension."""
    f, ty, vec, fma, lanes, size, rows, kk, sar, sak, sbr, bias, relu, nn = ctx
    f.labels += 1
    tag = f"gv{f.labels}"
    accs = [[f"%{tag}.{i}.{v}" for v in range(nv)] for i in range(rows)]
    for row in accs:
        for name in row:
            f.allocas.append(f"  {name} = alloca {vec}")
            f.emit(f"store {vec} zeroinitializer, ptr {name}")
    t, lt = f.begin(kk)
    brow = f.add(f.mul(t, sbr), n0)
    bvals = [_load(ctx, "%b", f.add(brow, str(v * lanes)), mask) for v in range(nv)]
    for i in range(rows):
        index = f.add(f.mul(str(i), sar), f.mul(t, sak))
        splat_fma_ir(f, ty, size, lanes, fma, index, bvals, accs[i][:nv])
    f.end(t, lt)
    biases = [_load(ctx, "%bias", f.add(n0, str(v * lanes)), mask) if bias else None
              for v in range(nv)]
    for i in range(rows):
        for v in range(nv):
            x, g = f.tmp(), f.tmp()
            f.emit(f"{x} = load {vec}, ptr {accs[i][v]}")
            x = bias_relu_ir(f, vec, lanes, x, biases[v], relu)
            # C is C-contiguous: row i starts at i * N
            at = f.add(f.add(f.mul(str(i), nn), n0), str(v * lanes))
            f.emit(f"{g} = getelementptr inbounds {ty}, ptr %c, i64 {at}")
            _store_ir(ctx, x, g, mask)


def _stream(k: _Kernel, ctx: tuple, unroll: int, mask: str | None) -> None:
    """The columns ``n0 <= n < n1`` with ``B`` read row after row (one sequential stream):
    ``C``'s rows stay in the L1 cache and take ``unroll`` rows of ``B`` per pass,
    ``C[:, n] += sum_u A[:, t + u] * B[t + u, n]``, then the epilogue in one pass over ``C``."""
    f, ty, vec, fma, lanes, size, rows, kk, sar, sak, sbr, bias, relu, nn = ctx
    c0, c1 = k.n0, k.n1
    n_vec = f.add(c0, f.mul(_div(f, k.sub(c1, c0), str(lanes)), str(lanes)))
    n_tail = _div(f, f.add(k.sub(c1, n_vec), str(lanes - 1)), str(lanes))  # 0 or 1

    def vectors(body) -> None:
        q, lq = f.begin(_div(f, k.sub(n_vec, c0), str(lanes)))
        body(f.add(c0, f.mul(q, str(lanes))), None)
        f.end(q, lq)
        if mask is not None:
            q, lq = f.begin(n_tail)
            body(n_vec, mask)
            f.end(q, lq)

    def crow(i: int, n0: str) -> str:
        g = f.tmp()
        f.emit(f"{g} = getelementptr inbounds {ty}, ptr %c, i64 {f.add(f.mul(str(i), nn), n0)}")
        return g

    def store(x: str, g: str, m: str | None) -> None:
        _store_ir(ctx, x, g, m)

    def zero(n0: str, m: str | None) -> None:
        for i in range(rows):
            store("zeroinitializer", crow(i, n0), m)

    vectors(zero)

    def splats(t: str, u: int) -> list[str]:
        out = []
        for i in range(rows):
            g, s, one, splat = f.tmp(), f.tmp(), f.tmp(), f.tmp()
            f.emit(f"{g} = getelementptr inbounds {ty}, ptr %a, i64 "
                   f"{f.add(f.mul(str(i), sar), f.mul(f.add(t, str(u)), sak))}")
            f.emit(f"{s} = load {ty}, ptr {g}, align {size}")
            f.emit(f"{one} = insertelement {vec} poison, {ty} {s}, i64 0")
            f.emit(f"{splat} = shufflevector {vec} {one}, {vec} poison, "
                   f"<{lanes} x i32> zeroinitializer")
            out.append(splat)
        return out

    def passes(start: str, count: str, width: int) -> None:
        blk, lb = f.begin(count)
        t = f.add(start, f.mul(blk, str(width)))
        a_vals = [splats(t, u) for u in range(width)]

        def body(n0: str, m: str | None) -> None:
            bvals = [_load(ctx, "%b", f.add(f.mul(f.add(t, str(u)), sbr), n0), m)
                     for u in range(width)]
            for i in range(rows):
                g = crow(i, n0)
                x = _load(ctx, g, "0", m)
                for u in range(width):
                    y = f.tmp()
                    f.emit(f"{y} = call {vec} {fma}({vec} {a_vals[u][i]}, {vec} {bvals[u]}, "
                           f"{vec} {x})")
                    x = y
                store(x, g, m)

        vectors(body)
        f.end(blk, lb)

    k_full = _div(f, kk, str(unroll))
    passes("0", k_full, unroll)
    passes(f.mul(k_full, str(unroll)), k.sub(kk, f.mul(k_full, str(unroll))), 1)
    if bias or relu:
        def epilogue(n0: str, m: str | None) -> None:
            b = _load(ctx, "%bias", n0, m) if bias else None
            for i in range(rows):
                g = crow(i, n0)
                x = bias_relu_ir(f, vec, lanes, _load(ctx, g, "0", m), b, relu)
                store(x, g, m)

        vectors(epilogue)
