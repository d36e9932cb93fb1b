"""The small hand-written kernels that nearly every classifier's first step needs, in LLVM IR
(their one implementation: docs/architecture.md, "One implementation per kernel"): softmax
rows, sparse and dense softmax cross-entropy, one-hot and the uniform generator
(docs/architecture.md, "Native loops"). The builders are in ``nn.py``, ``movement.py`` and
``random.py``.

The scalar statements are lowered by :class:`...codegen.llvm_expr.Expr` under numba's typing
rules (a float32 row's sums in float64); the ops' NumPy references are the oracle
(``tests/core/backends/test_native_loops.py``; the uniform numbers and one-hot bit for bit).
Arrays are flat; the shapes come in the int64 parameter array (last argument). A dtype a
generator does not handle raises CodegenError: the builder then runs the op's reference.

A row's maximum and float64 sum of exps: float64 rows in order; float32 rows in eight lanes
(lane k takes the elements r = k mod 8 below n - n % 8, lane 0 the tail; combined pairwise in
a fixed order), whose strict operations the vectorizers run side by side without
reassociating anything, the exps by ``scalars.exp_neg32`` (exactly 0 below exp(-87.3), NaN
kept): a row gives the same bits wherever it sits in the batch.
"""

from __future__ import annotations

from kiln.core.backends.cpu.codegen.ir_kernel import _div
from kiln.core.backends.cpu.codegen.llvm_expr import Val
from kiln.core.backends.cpu.codegen.llvm_loop import Func
from kiln.core.backends.cpu.codegen.spec import CodegenError

FLOAT = ("float32", "float64")
INDEX = ("int32", "int64")


def _row_max(f: Func, dtype: str, row: str, n_r: str) -> None:
    """``m = x[row]; for r in 1..n_r: v = x[row + r]; if v > m: m = v`` into the variable m."""
    f.var("m", f.load("%x", dtype, row))
    r, lab = f.begin(n_r, "1")
    v = f.load("%x", dtype, f.add(row, r))
    m = f.get("m")
    f.set("m", f.expr.select(f.expr.compare(">", v, m), v, m))
    f.end(r, lab)


def _max_exp_sum(f: Func, dtype: str, row: str, n: str, buf: str,
                 buf_row: str) -> tuple[Val, Val]:
    """The first passes of the row kernels over ``x[row:row + n]``: its max m, then
    ``buf[buf_row + r] = exp(x - m)`` and their float64 sum s; float32 rows in eight lanes
    (exp_neg32), float64 in order (np.exp): see the module's docstring."""
    lanes = dtype == "float32"
    if lanes:
        m = _lanes_max(f, row, n)
    else:
        _row_max(f, dtype, row, n)
        m = f.get("m")
    r, lab = f.begin(n)
    f.store(buf, dtype, f.add(buf_row, r), f.scalar(
        "_exp_neg32(v - m)" if lanes else "np.exp(v - m)",
        {"v": f.load("%x", dtype, f.add(row, r)), "m": m}))
    f.end(r, lab)

    def term(r: str) -> Val:
        return f.expr.cast(f.load(buf, dtype, f.add(buf_row, r)), "f64")

    if lanes:
        return m, _lanes_sum(f, n, term)
    f.var("s", f.scalar("0.0", {}))
    r, lab = f.begin(n)
    f.set("s", f.scalar("s + t", {"s": f.get("s"), "t": term(r)}))
    f.end(r, lab)
    return m, f.get("s")


# The eight lanes' rules, shared by the loops below and the short rows: a lane
# keeps v where v > its value (so a NaN is kept only as the first element), the eight lanes'
# maxima combine from the first, their sums pairwise
def _keep(f: Func, v: Val, old: Val) -> Val:
    return f.expr.select(f.expr.compare(">", v, old), v, old)


def _combine_max(f: Func, lanes: list[Val]) -> Val:
    m = lanes[0]
    for v in lanes[1:]:
        m = _keep(f, v, m)
    return m


def _combine_sum(f: Func, sums: list[Val]) -> Val:
    return f.scalar("((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))",
                    {f"s{k}": v for k, v in enumerate(sums)})


def _lanes_max(f: Func, row: str, n: str) -> Val:
    """The max of the float32 row ``x[row:row + n]`` in eight lanes (``v > m`` keeps m at a
    NaN after the first)."""
    first = f.load("%x", "float32", row)
    for k in range(8):
        f.var(f"m{k}", first)

    def keep(name: str, v: Val) -> None:
        f.set(name, _keep(f, v, f.get(name)))

    j, lab = f.begin(_div(f, n, "8"))
    base = f.add(row, f.mul(j, "8"))
    for k in range(8):
        keep(f"m{k}", f.load("%x", "float32", f.add(base, str(k))))
    f.end(j, lab)
    r, lab = f.begin(n, f.mul(_div(f, n, "8"), "8"))
    keep("m0", f.load("%x", "float32", f.add(row, r)))
    f.end(r, lab)
    return _combine_max(f, [f.get(f"m{k}") for k in range(8)])


def _lanes_sum(f: Func, n: str, term) -> Val:
    """The float64 sum over r < n of ``term(r)`` (a float64 Val of the index r) in eight
    lanes, added pairwise."""
    for k in range(8):
        f.var(f"s{k}", f.scalar("0.0", {}))

    def add(name: str, r: str) -> None:
        f.set(name, f.scalar("s + t", {"s": f.get(name), "t": term(r)}))

    j, lab = f.begin(_div(f, n, "8"))
    base = f.mul(j, "8")
    for k in range(8):
        add(f"s{k}", f.add(base, str(k)))
    f.end(j, lab)
    r, lab = f.begin(n, f.mul(_div(f, n, "8"), "8"))
    add("s0", r)
    f.end(r, lab)
    return _combine_sum(f, [f.get(f"s{k}") for k in range(8)])


def softmax_rows_ir(symbol: str, dtype: str, log: bool) -> str:
    """``(o, x, p = [P, R])``: softmax (or log-softmax) over rows of R: the exps into o, then
    o times the inverse of their sum, or ``(x - max) - log(sum)``."""
    if dtype not in FLOAT:
        raise CodegenError(f"native softmax rows: {dtype} not generated")
    f = Func("")
    n_p, n_r = f.param(0), f.param(1)
    i, li = f.begin(n_p)
    row = f.mul(i, n_r)
    m, total = _max_exp_sum(f, dtype, row, n_r, "%o", row)
    scale = f.scalar("np.log(s)" if log else "1.0 / s", {"s": total})
    r, lab = f.begin(n_r)
    at = f.add(row, r)
    f.store("%o", dtype, at, f.scalar("(v - m) - k" if log else "e * k", {
        "v": f.load("%x", dtype, at), "m": m, "e": f.load("%o", dtype, at), "k": scale}))
    f.end(r, lab)
    f.end(i, li)
    return f.function(symbol, ["o", "x", "p"])


def sparse_xent_ir(symbol: str, dtype: str, label_dtype: str) -> str:
    """``(o, x, labels, w, p = [P, C])``: ``o[i] = log(sum) - (x[i, k] - max)`` for the
    label k (negative: from the end; ``w`` a scratch row of exps); status 1 for a label out
    of range."""
    if dtype not in FLOAT or label_dtype not in INDEX:
        raise CodegenError(f"native sparse cross-entropy: {dtype}, {label_dtype} labels")
    f = Func("")
    n_p, n_c = f.param(0), f.param(1)
    i, li = f.begin(n_p)
    row = f.mul(i, n_c)
    m, total = _max_exp_sum(f, dtype, row, n_c, "%w", "0")
    n = Val(n_c, "i64")
    k = f.expr.cast(f.load("%labels", label_dtype, i), "i64")
    k = f.scalar("k + n if k < 0 else k", {"k": k, "n": n})
    f.fail_when(f.scalar("k < 0 or k >= n", {"k": k, "n": n}), 1)
    xk = f.load("%x", dtype, f.add(row, k.ref))
    f.store("%o", dtype, i, f.scalar("np.log(s) - (v - m)", {"s": total, "v": xk, "m": m}))
    f.end(i, li)
    return f.function(symbol, ["o", "x", "labels", "w", "p"], {
        1: ("index", "sparse_softmax_cross_entropy: label out of range")})


def dense_xent_ir(symbol: str, dtype: str) -> str:
    """``(o, x, y, w, p = [P, C])``: ``o[i] = -sum(y * ((x - max) - log(sum)))`` (``w`` a
    scratch row; float64 terms; a label of 0 adds nothing, also where x - m is -inf)."""
    if dtype not in FLOAT:
        raise CodegenError(f"native cross-entropy: {dtype} not generated")
    f = Func("")
    n_p, n_c = f.param(0), f.param(1)
    i, li = f.begin(n_p)
    row = f.mul(i, n_c)
    m, total = _max_exp_sum(f, dtype, row, n_c, "%w", "0")
    ls = f.scalar("np.log(s)", {"s": total})
    f.var("acc", f.scalar("0.0", {}))
    c, lab = f.begin(n_c)
    yc = f.load("%y", dtype, f.add(row, c))
    nonzero = f.when(f.scalar("yc != 0", {"yc": yc}))
    f.set("acc", f.scalar(
        "acc + np.float64(yc) * ((np.float64(v) - np.float64(m)) - ls)",
        {"acc": f.get("acc"), "yc": yc, "v": f.load("%x", dtype, f.add(row, c)), "m": m,
         "ls": ls}))
    f.done(nonzero)
    f.end(c, lab)
    f.store("%o", dtype, i, f.scalar("-acc", {"acc": f.get("acc")}))
    f.end(i, li)
    return f.function(symbol, ["o", "x", "y", "w", "p"])


# ---- short float32 rows ---------------------------------------------------------------------
# A classifier's rows are short (2 to 16 classes). In the kernels above, a row of 10 runs one
# pass of the eight lanes plus scalar tails, and its exps stay scalar. With the length fixed in
# the IR, every row is straight-line code (the same operations in the same order as the
# eight lanes, so the same bits), and LLVM vectorizes the loop
# over the rows instead. benchmarks/bench_kernels.py, 1,024 rows of 2 / of 10: softmax 19.9 /
# 37.9 -> 2.7 / 14.7 us, log-softmax 28.5 / 43.4 -> 7.1 / 18.5, sparse cross-entropy 28.0 /
# 39.4 -> 8.0 / 15.3 (rows of 16: about equal).
SHORT_ROW = 16  # float32 rows of at most this many elements: the *_short_ir kernels


def _short_row(f: Func, row: str, n: int) -> tuple[list[Val], Val, list[Val], Val]:
    """The float32 row ``x[row:row + n]`` (``n`` fixed) as ``_max_exp_sum`` computes it, with
    every value in a register: its elements, max m, exps ``exp_neg32(x - m)`` and their
    float64 sum in eight lanes."""
    xs = [f.load("%x", "float32", f.add(row, str(r))) for r in range(n)]
    full = n - n % 8  # elements past the last whole group of eight go to lane 0

    def lane(r: int) -> int:
        return r % 8 if r < full else 0

    lanes = [xs[0]] * 8
    for r in range(n):
        lanes[lane(r)] = _keep(f, xs[r], lanes[lane(r)])
    m = _combine_max(f, lanes)
    es = [f.scalar("_exp_neg32(v - m)", {"v": v, "m": m}) for v in xs]
    sums = [f.scalar("0.0", {})] * 8
    for r in range(n):
        sums[lane(r)] = f.scalar("s + t", {"s": sums[lane(r)], "t": f.expr.cast(es[r], "f64")})
    return xs, m, es, _combine_sum(f, sums)


def _short_check(name: str, dtype: str, n: int) -> None:
    if dtype != "float32" or not 1 <= n <= SHORT_ROW:
        raise CodegenError(f"native {name}: rows of {n} {dtype} not generated")


def softmax_short_ir(symbol: str, dtype: str, log: bool, n: int) -> str:
    """``softmax_rows_ir`` for float32 rows of exactly ``n <= SHORT_ROW`` (``p = [P, n]``)."""
    _short_check("softmax rows", dtype, n)
    f = Func("")
    i, li = f.begin(f.param(0))
    row = f.mul(i, str(n))
    xs, m, es, total = _short_row(f, row, n)
    scale = f.scalar("np.log(s)" if log else "1.0 / s", {"s": total})
    for r in range(n):
        f.store("%o", dtype, f.add(row, str(r)), f.scalar(
            "(v - m) - k" if log else "e * k", {"v": xs[r], "m": m, "e": es[r], "k": scale}))
    f.end(i, li)
    return f.function(symbol, ["o", "x", "p"])


def sparse_xent_short_ir(symbol: str, dtype: str, label_dtype: str, n: int) -> str:
    """``sparse_xent_ir`` for float32 rows of exactly ``n <= SHORT_ROW`` (``(o, x, labels,
    p = [P, n])``, no scratch row); status 1 for a label out of range."""
    _short_check("sparse cross-entropy", dtype, n)
    if label_dtype not in INDEX:
        raise CodegenError(f"native sparse cross-entropy: {label_dtype} labels")
    f = Func("")
    size = Val(str(n), "i64")

    def label(i: str) -> Val:
        k = f.expr.cast(f.load("%labels", label_dtype, i), "i64")
        return f.scalar("k + n if k < 0 else k", {"k": k, "n": size})

    # the labels first: the rows' loop then has no exit, and picks x[k] among its registers
    # (a chain of selects, no load at a computed address), so that it runs in vectors
    i, li = f.begin(f.param(0))
    k = label(i)
    f.fail_when(f.scalar("k < 0 or k >= n", {"k": k, "n": size}), 1)
    f.end(i, li)
    i, li = f.begin(f.param(0))
    row = f.mul(i, str(n))
    xs, m, _, total = _short_row(f, row, n)
    k = label(i)
    xk = xs[0]
    for r in range(1, n):
        xk = f.expr.select(f.scalar(f"k == {r}", {"k": k}), xs[r], xk)
    f.store("%o", dtype, i, f.scalar("np.log(s) - (v - m)", {"s": total, "v": xk, "m": m}))
    f.end(i, li)
    return f.function(symbol, ["o", "x", "labels", "p"], {
        1: ("index", "sparse_softmax_cross_entropy: label out of range")})


def dense_xent_short_ir(symbol: str, dtype: str, n: int) -> str:
    """``dense_xent_ir`` for float32 rows of exactly ``n <= SHORT_ROW`` (``(o, x, y,
    p = [P, n])``, no scratch row; a label of 0 adds nothing)."""
    _short_check("cross-entropy", dtype, n)
    f = Func("")
    i, li = f.begin(f.param(0))
    row = f.mul(i, str(n))
    xs, m, _, total = _short_row(f, row, n)
    ls = f.scalar("np.log(s)", {"s": total})
    acc = f.scalar("0.0", {})
    for r in range(n):
        yc = f.load("%y", dtype, f.add(row, str(r)))
        term = f.scalar("acc + np.float64(yc) * ((np.float64(v) - np.float64(m)) - ls)",
                        {"acc": acc, "yc": yc, "v": xs[r], "m": m, "ls": ls})
        acc = f.expr.select(f.scalar("yc != 0", {"yc": yc}), term, acc)
    f.store("%o", dtype, i, f.scalar("-acc", {"acc": acc}))
    f.end(i, li)
    return f.function(symbol, ["o", "x", "y", "p"])


def one_hot_ir(symbol: str, dtype: str, idx_dtype: str) -> str:
    """``(o, idx, p = [depth, n])``: ``o`` zeroed, then ``o[m * depth + idx[m]] = 1`` (an
    index outside ``[0, depth)`` gives a row of zeros)."""
    if idx_dtype not in INDEX or dtype not in ("float32", "float64", "int32", "int64"):
        raise CodegenError(f"native one_hot: {dtype} from {idx_dtype}")
    f = Func("")
    depth, n = f.param(0), f.param(1)
    j, lab = f.begin(f.mul(n, depth))
    f.store("%o", dtype, j, f.scalar("0", {}))
    f.end(j, lab)
    m, lab = f.begin(n)
    k = f.expr.cast(f.load("%idx", idx_dtype, m), "i64")
    inside = f.when(f.scalar("k >= 0 and k < d", {"k": k, "d": Val(depth, "i64")}))
    f.store("%o", dtype, f.add(f.mul(m, depth), k.ref), f.scalar("1", {}))
    f.done(inside)
    f.end(m, lab)
    return f.function(symbol, ["o", "idx", "p"])


def uniform_ir(symbol: str, dtype: str, key_dtype: str) -> str:
    """``(o, key, p = [salt, n])``: ``o[i]``, the i-th uniform [0, 1) number of the stream
    (key, salt) of kiln/core/ops/random.py's reference (SplitMix64, uint64 arithmetic with
    wraparound: LLVM's i64 ``mul``/``xor``/``lshr`` are exactly that; the top 24 bits)."""
    if dtype not in FLOAT or key_dtype not in ("int64", "uint64"):
        raise CodegenError(f"native uniform: {dtype} from {key_dtype} keys")
    f = Func("")
    salt, n = f.param(0), f.param(1)
    k0 = f.load("%key", "int64", "0").ref  # the bits, whichever of the two dtypes
    k1 = f.load("%key", "int64", "1").ref

    def mix(z: str) -> str:
        for shift, mul in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            t, x = f.tmp(), f.tmp()
            f.emit(f"{t} = lshr i64 {z}, {shift}")
            f.emit(f"{x} = xor i64 {z}, {t}")
            z = f.tmp()
            f.emit(f"{z} = mul i64 {x}, {_signed(mul)}")
        t, x = f.tmp(), f.tmp()
        f.emit(f"{t} = lshr i64 {z}, 31")
        f.emit(f"{x} = xor i64 {z}, {t}")
        return x

    def mul(a: str, c: int) -> str:
        v = f.tmp()
        f.emit(f"{v} = mul i64 {a}, {_signed(c)}")
        return v

    z = f.tmp()
    f.emit(f"{z} = add i64 {mul(k0, 0xD1B54A32D192ED03)}, {mul(salt, 0x8CB92BA72F3D8DD7)}")
    z = mix(z)
    z2 = f.tmp()
    f.emit(f"{z2} = xor i64 {z}, {mul(k1, 0x9E3779B97F4A7C15)}")
    base = mix(z2)
    i, lab = f.begin(n)
    h = f.tmp()
    f.emit(f"{h} = add i64 {base}, {mul(f.add(i, '1'), 0x9E3779B97F4A7C15)}")
    h = mix(h)
    top, fl, val = f.tmp(), f.tmp(), f.tmp()
    f.emit(f"{top} = lshr i64 {h}, 40")
    f.emit(f"{fl} = uitofp i64 {top} to double")
    f.emit(f"{val} = fmul double {fl}, 0x3E70000000000000")  # 1 / 2**24, exact
    f.store("%o", dtype, i, Val(val, "f64"))
    f.end(i, lab)
    return f.function(symbol, ["o", "key", "p"])


def _signed(c: int) -> int:
    """A uint64 constant as LLVM's i64 literal."""
    return c - (1 << 64) if c >= 1 << 63 else c
