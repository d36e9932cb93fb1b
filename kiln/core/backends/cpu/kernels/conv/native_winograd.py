"""Native (LLVM IR) tile transforms of the Winograd convolutions of ``winograd.py``
(docs/architecture.md, "Winograd convolutions").

One generator, :func:`transform_ir`, writes the three transforms of F(m x m, 3 x 3) (and of
F(1 x m, 1 x 3), whose tiles are one row: the row matrices below become ``[[1]]``): each
reads an ``s x s`` grid of channel rows of one tile, applies an integer matrix ``L`` on both
sides (``dst = L src L^T``) and writes a ``d x d`` grid of channel rows:

* ``"input"``: an ``alpha x alpha`` window of the image (rows ``ty * m - pt + a``), ``L =
  B^T``, into the tile buffer;
* ``"output"``: the tile buffer's ``alpha x alpha`` products, ``L = A^T``, into the ``m x m``
  output pixels of the tile;
* ``"gradient"``: the ``m x m`` cotangent pixels of the tile, ``L = A``, into the tile buffer
  (the kernel gradient's right-hand factor);
* ``"input_adjoint"``: the adjoint of ``"input"``: the tile buffer's ``alpha x alpha`` values,
  ``L = B``, added into the ``alpha x alpha`` image window of the tile (the windows of
  neighbouring tiles overlap; each image is zeroed first, its tiles added in order by the
  one thread that runs it): the input gradient over the forward's tiles.

The tile buffer holds ``alpha * alpha`` blocks of ``S`` floats (``S`` a parameter, past the
``tiles * channels`` it needs: see ``winograd.block_stride``), block ``xi`` holding tile
``t``'s channel row at ``xi * S + t * C``. Image pixels outside the image read a row of zeros
(the argument ``zeros``, at least C floats) and are written to a scratch row (``sink``): the
channel loop has no branch. It runs 16 lanes at a time (AVX-512 hosts: ``<16 x float>``),
then eight, then the rest one at a time. The arrays come flat; the parameter array holds
every array's shape (in argument order), then ``[TH, TW, pt, pl, S]``, then the range
``n0 <= n < n1`` of images that ``runtime.parts.native_split`` splits over threads.
"""

from __future__ import annotations

from fractions import Fraction

from kiln.core.backends.cpu.codegen.ir_kernel import _div, _Kernel
from kiln.core.backends.cpu.codegen.llvm_loop import Func
from kiln.core.backends.cpu.codegen.spec import CodegenError

LANES = 8

# F(m x m, 3 x 3): the input (B^T), output (A^T) and kernel (G) transforms (Lavin and Gray,
# "Fast Algorithms for Convolutional Neural Networks", 2016). F(2x2): interpolation points 0,
# +-1 and infinity. F(4x4): points 0, +-3/2, +-2/3 and infinity (the Toom-Cook matrices of
# those points, each column of A^T and row of B^T scaled to integers, G taking the inverse
# scales), not Lavin's 0, +-1, +-2: in float32 a convolution's error is dominated by the
# products' rounding amplified by the output transform, and these points gave the smallest
# RMS error of a simulated float32 F(4x4) (32 -> 16 channels) among the 3,060 choices of four
# of +-1, +-2, +-3, +-4, +-1/2, +-1/3, +-1/4, +-3/2, +-2/3 beside 0 (the method: Barabasz
# et al., "Error analysis and improving the accuracy of Winograd convolution for deep neural
# networks", 2020). A 48 x 48 x 32 -> 32 layer's largest error
# 7.5 eps of the products' magnitudes against 34 (im2col + GEMM 3.9, F(2x2) 1.3;
# benchmarks/bench_accuracy.py --float32-step), which took a VGG-style conv + BN + ReLU +
# max-pool model's float32 SGD step from 7e-3..1.1e-2 off the float64 one on 3 of 10 seeds
# (ReLU and max-pool masks flipped) to <= 7e-6 on all ten. The points come in +-p pairs, so
# ``_apply`` shares the even and odd parts as it did for Lavin's.
_F2: dict[str, list[list]] = {
    "BT": [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    "AT": [[1, 1, 1, 0], [0, 1, -1, -1]],
    "G": [[1, 0, 0], [Fraction(1, 2)] * 3, [Fraction(1, 2), Fraction(-1, 2), Fraction(1, 2)],
          [0, 0, 1]],
}
_F4: dict[str, list[list]] = {
    "BT": [[36, 0, -97, 0, 36, 0], [0, -12, -8, 27, 18, 0], [0, 12, -8, -27, 18, 0],
           [0, -18, -27, 8, 12, 0], [0, 18, -27, -8, 12, 0], [0, 36, 0, -97, 0, 36]],
    "AT": [[1, 8, 8, 27, 27, 0], [0, 12, -12, 18, -18, 0], [0, 18, 18, 12, 12, 0],
           [0, 27, -27, 8, -8, 1]],
    "G": [[Fraction(1, 36), 0, 0],
          [Fraction(1, 1170), Fraction(1, 780), Fraction(1, 520)],
          [Fraction(1, 1170), Fraction(-1, 780), Fraction(1, 520)],
          [Fraction(-1, 520), Fraction(-1, 780), Fraction(-1, 1170)],
          [Fraction(-1, 520), Fraction(1, 780), Fraction(-1, 1170)], [0, 0, Fraction(1, 36)]],
}
# F(3 x 3, 2 x 2): the 2x2 phases of a stride-2 4x4 kernel (points 0, +-1, infinity)
_F3R2: dict[str, list[list]] = {
    "BT": [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]],
    "AT": [[1, 1, 1, 0], [0, 1, -1, 0], [0, 1, 1, 1]],
    "G": [[1, 0], [Fraction(1, 2)] * 2, [Fraction(1, 2), Fraction(-1, 2)], [0, 1]],
}
MATRICES: dict[tuple[int, int], dict[str, list[list]]] = {(2, 3): _F2, (4, 3): _F4, (3, 2): _F3R2}


def matrix(m: int, name: str, r: int = 3) -> list[list]:
    """``BT``, ``AT`` or ``G`` of F(m x m, r x r)."""
    return MATRICES[(m, r)][name]


def _left(m: int, r: int, kind: str) -> list[list[int]]:
    if kind == "input":
        return matrix(m, "BT", r)
    if kind == "input_adjoint":  # B
        return [list(col) for col in zip(*matrix(m, "BT", r))]
    at = matrix(m, "AT", r)
    if kind == "output":
        return at
    return [list(col) for col in zip(*at)]  # "gradient": A


def _apply(f: Func, ty: str, rows: list[list[int]], vals: list[str]) -> list[str]:
    """``rows @ vals`` for a small integer matrix, sharing work between the rows and columns
    of opposite interpolation points ``p`` and ``-p``, whose entries differ by ``(-1)^k``:
    two such columns of A^T enter every row as their sum (even rows) or difference (odd
    rows); two such rows of B^T or A are the sum and difference of their even and odd
    parts."""
    width = len(vals)
    cols = [[row[k] for row in rows] for k in range(width)]
    merged: dict[int, tuple[str, str]] = {}  # column -> (sum, difference) with its partner
    for a in range(width):
        for b in range(a + 1, width):
            if a in merged or b in merged or not _paired(cols[a], cols[b]):
                continue
            both = (_combine(f, ty, [(1, vals[a]), (1, vals[b])]),
                    _combine(f, ty, [(1, vals[a]), (-1, vals[b])]))
            merged[a], merged[b] = both, both
    if merged:
        combined = []
        for i, row in enumerate(rows):
            terms = [(row[k], merged[k][i % 2] if k in merged else vals[k])
                     for k in range(width) if row[k] and not _second(k, merged)]
            combined.append(_combine(f, ty, terms))
        return combined
    out: list[str | None] = [None] * len(rows)
    for a in range(len(rows)):
        if out[a] is not None:
            continue
        partner = next((b for b in range(a + 1, len(rows))
                        if out[b] is None and _paired(rows[a], rows[b])), None)
        if partner is None:
            out[a] = _combine(f, ty, [(c, v) for c, v in zip(rows[a], vals) if c])
            continue
        even = _combine(f, ty, [(c, v) for k, (c, v) in enumerate(zip(rows[a], vals))
                                if c and k % 2 == 0])
        odd = _combine(f, ty, [(c, v) for k, (c, v) in enumerate(zip(rows[a], vals))
                               if c and k % 2 == 1])
        out[a] = _combine(f, ty, [(1, even), (1, odd)])
        out[partner] = _combine(f, ty, [(1, even), (-1, odd)])
    combined = [v for v in out if v is not None]
    assert len(combined) == len(rows)  # every row was combined
    return combined


def _paired(x: list, y: list) -> bool:
    """``y[k] == x[k] * (-1)^k`` with nonzero even and odd parts (points ``p``, ``-p``)."""
    return (all(b == a * (-1) ** k for k, (a, b) in enumerate(zip(x, y)))
            and any(x[0::2]) and any(x[1::2]))


def _second(k: int, merged: dict) -> bool:
    """Whether column ``k`` is the second of a merged pair (its partner carries both)."""
    return k in merged and any(j < k and merged[j] is merged[k] for j in merged)


def _combine(f: Func, ty: str, terms: list[tuple]) -> str:
    """``sum(c * v)``; equal magnitudes other than 1 multiply once, after the sum."""
    if not terms:
        raise CodegenError("winograd: a zero row in a transform")
    mags = {abs(c) for c, _ in terms}
    scale = mags.pop() if len(mags) == 1 and 1 not in mags else None
    if scale is not None:
        terms = [(1 if c > 0 else -1, v) for c, v in terms]
    terms = sorted(terms, key=lambda t: t[0] < 0)  # a positive term first: no negation
    acc: str | None = None
    for coef, v in terms:
        term = v
        if abs(coef) != 1:
            term = f.tmp()
            f.emit(f"{term} = fmul contract {ty} {v}, {_const(ty, float(abs(coef)))}")
        if acc is None:
            acc = term
            if coef < 0:
                acc = f.tmp()
                f.emit(f"{acc} = fneg {ty} {term}")
            continue
        nxt = f.tmp()
        f.emit(f"{nxt} = {'fadd' if coef > 0 else 'fsub'} contract {ty} {acc}, {term}")
        acc = nxt
    if scale is not None:
        nxt = f.tmp()
        f.emit(f"{nxt} = fmul contract {ty} {acc}, {_const(ty, float(scale))}")
        acc = nxt
    assert acc is not None  # terms is not empty
    return acc


def _zero(ty: str) -> str:
    return "0.0" if ty == "float" else "zeroinitializer"


def _mask(ty: str) -> str:
    """The i1 type (or vector of i1) of a comparison of ``ty`` values."""
    return "i1" if ty == "float" else ty.replace("float", "i1")


def _const(ty: str, value: float) -> str:
    lit = f"float {value!r}"
    if ty == "float":
        return repr(value)
    width = int(ty[1:].split(" x ")[0])  # "<16 x float>"
    return "<" + ", ".join([lit] * width) + ">"


def _body(f: Func, ty: str, mats: tuple, src: list[list[str]], dst: list[list[str]],
          c: str, add: bool | str = False) -> None:
    """Loads ``src[a][b][c]`` (``ty`` lanes), ``dst = rows src cols^T`` (``mats = (rows,
    cols)``; ``add`` True: ``dst +=``; ``"bias"`` / ``"bias_relu"``: ``dst = (relu)(...
    + bias[c])``), stores at ``c``."""
    rows, cols = mats
    vals = []
    for row in src:
        for ptr in row:
            g, v = f.tmp(), f.tmp()
            f.emit(f"{g} = getelementptr inbounds float, ptr {ptr}, i64 {c}")
            f.emit(f"{v} = load {ty}, ptr {g}, align 4")
            vals.append(v)
    width = len(src[0])
    # t = rows @ src (over a), for each column b; then dst[i][j] = t[i] @ cols[j]
    t = [_apply(f, ty, rows, [vals[a * width + b] for a in range(len(src))])
         for b in range(width)]
    for i, drow in enumerate(dst):
        outs = _apply(f, ty, cols, [t[b][i] for b in range(width)])
        for ptr, v in zip(drow, outs):
            g = f.tmp()
            f.emit(f"{g} = getelementptr inbounds float, ptr {ptr}, i64 {c}")
            if add is True:
                old, new = f.tmp(), f.tmp()
                f.emit(f"{old} = load {ty}, ptr {g}, align 4")
                f.emit(f"{new} = fadd {ty} {old}, {v}")
                v = new
            elif add:  # the epilogue: + bias (no contraction with the transform), ReLU
                gb, bias, new = f.tmp(), f.tmp(), f.tmp()
                f.emit(f"{gb} = getelementptr inbounds float, ptr %a3, i64 {c}")
                f.emit(f"{bias} = load {ty}, ptr {gb}, align 4")
                f.emit(f"{new} = fadd {ty} {v}, {bias}")
                v = new
                if add == "bias_relu":
                    le, new = f.tmp(), f.tmp()
                    f.emit(f"{le} = fcmp ole {ty} {v}, {_zero(ty)}")
                    f.emit(f"{new} = select {_mask(ty)} {le}, {ty} {_zero(ty)}, {ty} {v}")
                    v = new
            f.emit(f"store {ty} {v}, ptr {g}, align 4")


def transform_ir(symbol: str, dtype: str, m: int, kind: str, rows: int = 3, r: int = 3,
                 step: int = 1, lanes: int = LANES, epilogue: str = "") -> str:
    """The ``kind`` transform of F(m x m, r x r), or with ``rows = 1`` of F(1 x m, 1 x r) (tiles
    of one row, the row transform the identity); image pixels ``step`` apart (a phase of a
    stride-2 convolution: ``winograd.py``), the channels in vectors of ``lanes`` (16 where
    the CPU has AVX-512), then of 8, then one by one; see the module docstring. Arguments:
    ``"input"``: ``(tiles, x (N, H, W, C), zeros)``; ``"output"``: ``(out (N, H, W, C),
    tiles, sink)``; ``"gradient"``: ``(tiles, ct (N, H, W, C), zeros)``; ``p = [TH, TW, pt,
    pl, S, width, offset]``: tile ``(ty, tx)``'s pixel ``(a, b)`` is image pixel ``(ty * m *
    step + a * step - pt, ...)``, its row of block ``xi`` is at ``xi * S + tile * width +
    offset``."""
    if dtype != "float32":
        raise CodegenError(f"native winograd: {dtype} not generated")
    if (m, r) not in MATRICES:
        raise CodegenError(f"native winograd: F({m}, {r}) not generated")
    cols = _left(m, r, kind)
    mats = (cols if rows > 1 else [[1]], cols)
    alpha = m + r - 1
    alpha_h, m_h = (alpha, m) if rows > 1 else (1, 1)
    image_first = kind in ("output", "input_adjoint")
    add: bool | str = kind == "input_adjoint"
    if epilogue not in ("", "bias", "bias_relu") or (epilogue and kind != "output"):
        raise CodegenError(f"native winograd: no {epilogue!r} epilogue for {kind}")
    # an output transform's epilogue: + bias[c] (a fourth argument), then ReLU (x <= 0 ? 0 : x)
    add = ("bias_relu" if epilogue == "bias_relu" else "bias") if epilogue else add
    ranks = ((4, 1, 1) if image_first else (1, 4, 1)) + ((1,) if epilogue else ())
    k = _Kernel(ranks, 7)
    f = k.f
    _, h, w, c = k.dims[0] if image_first else k.dims[1]
    th, tw, pt, pl, stride, width, offset = k.p
    img, buf, extra = ("%a0", "%a1", "%a2") if image_first else ("%a1", "%a0", "%a2")
    n, ln = f.begin(k.n1, k.n0)
    if add is True:  # the image is a sum over its overlapping tiles: zeroed first
        k.fill(img, "float32", f.mul(f.mul(f.mul(n, h), w), c), f.mul(f.mul(h, w), c))
    ty_, lty = f.begin(th)
    tx_, ltx = f.begin(tw)
    tile = f.add(f.mul(f.add(f.mul(n, th), ty_), tw), tx_)
    tile_row = f.add(f.mul(tile, width), offset)
    img_h, img_w = (alpha_h, alpha) if kind in ("input", "input_adjoint") else (m_h, m)
    r0 = k.sub(f.mul(ty_, str(m_h * step)), pt)
    s0 = k.sub(f.mul(tx_, str(m * step)), pl)
    pixels = []
    for a in range(img_h):
        row_at = f.add(r0, str(a * step))
        row = []
        for b in range(img_w):
            col_at = f.add(s0, str(b * step))
            ok = f.scalar("r >= 0 and r < h and s >= 0 and s < w", {
                "r": _i64(row_at), "h": _i64(h), "s": _i64(col_at), "w": _i64(w)})
            at = f.mul(f.add(f.mul(f.add(f.mul(n, h), row_at), w), col_at), c)
            g, p = f.tmp(), f.tmp()
            f.emit(f"{g} = getelementptr float, ptr {img}, i64 {at}")
            f.emit(f"{p} = select i1 {f.expr.truth(ok).ref}, ptr {g}, ptr {extra}")
            row.append(p)
        pixels.append(row)
    blocks = []
    for a in range(alpha_h):
        row = []
        for b in range(alpha):
            at = f.add(f.mul(str(a * alpha + b), stride), tile_row)
            g = f.tmp()
            f.emit(f"{g} = getelementptr inbounds float, ptr {buf}, i64 {at}")
            row.append(g)
        blocks.append(row)
    src, dst = (blocks, pixels) if image_first else (pixels, blocks)
    done = "0"
    for width_ in (lanes, LANES) if lanes > LANES else (LANES,):
        # whole vectors of `width_` lanes from channel `done` on; then 8 lanes, then one
        vec = f"<{width_} x float>"
        groups = _div(f, k.sub(c, done), str(width_))
        q, lq = f.begin(groups)
        _body(f, vec, mats, src, dst, f.add(done, f.mul(q, str(width_))), add)
        f.end(q, lq)
        done = f.add(done, f.mul(groups, str(width_)))
    e, le = f.begin(c, done)
    _body(f, "float", mats, src, dst, e, add)
    f.end(e, le)
    k.close([(n, ln), (ty_, lty), (tx_, ltx)])
    return f.function(symbol, ["a0", "a1", "a2", "a3", "p"] if epilogue else
                      ["a0", "a1", "a2", "p"])


def _i64(v: str):
    from kiln.core.backends.cpu.codegen.llvm_expr import Val

    return Val(v, "i64")
