"""Dense layers' products ``C = A @ B`` on kiln's own register-blocked kernel
(``native_gemm.matmul_ir``) in plans whose every product it takes (a Dense stack's
``predict`` and training step: ``gemm.products.products_native``), with epilogues for what follows
a product there (docs/architecture.md, "Dense products"): the bias add and ReLU, a ReLU's
gradient (``gate``), the ``gemm`` op's ``alpha * (A @ B) + beta * C`` in place and SGD
momentum's ``w += v`` after it (``update``); a ``d @ W.T`` product's ``W.T`` is laid out for
the kernel first (:func:`add_transpose`).

The kernel keeps a block of 4 rows x 4 vectors of ``C`` in registers over the whole inner
dimension, reads ``A`` in place through its strides (a transposed view is no copy) and a
``K x 64`` slice of ``B`` from cache while the rows pass; the columns (a Dense layer's units:
:func:`_ranges`), or the rows, are split over kiln's threads (their parts on the spin pool:
kiln/core/backends/cpu/runtime/spin_pool.py), each block computed by one thread in one order (the
same bits however many threads). On the
MLP's products it beats OpenBLAS (2-core Zen 4, median us kiln / OpenBLAS: (128 x 784) @ (784
x 512) 454 / 551, (128 x 512) @ (512 x 256) 149 / 192, (512 x 128) @ (128 x 256) 157 / 189,
(784 x 128) @ (128 x 512) 463 / 542) but the 10-column ones; what it gains besides is the
epilogues and a plan without OpenBLAS's threads. It loses where the inner size reaches
2,048 (``B``'s slice leaves the L2 cache: 1.3-1.5x slower), with 128 columns (1.1-1.7x) and
under 128 rows (the halves are too thin): those stay OpenBLAS's, as does everything on hosts
without AVX-512 (its kernels were tuned there only) and float64.

:func:`suits` decides; :func:`add` puts the kernel into a plan (``linalg.dense`` and
``linalg.build_gemm``); :func:`prepare` makes a runner for one layout (the GEMM floors of
``benchmarks/floors.py`` use it, so that a floor stays one for kiln).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_gemm
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.backends.cpu.runtime.parts import native_split

LANES = 16
BLOCK = (4, 4)          # rows x vectors: 16 accumulators, 4 B vectors and a broadcast (of 32)
NARROW_BLOCK = (16, 1)  # under 16 columns: one masked vector, 16 rows (independent FMA chains)
CHUNK = 64              # rows of A per chunk (64 x 784 floats: 200 KB of the 1 MB L2)
MIN_COLUMNS, MAX_COLUMNS = 256, 1024
# The planner's choices (the rows and inner length the kernel takes, the work under which one
# thread runs a product, the rows under which it splits by columns, the size from which a
# transpose splits; the switch): options.CpuOptions.matmul_* / transpose_split / native_matmul.
# The kernel's blocks are AVX-512 vectors: it runs only where the CPU has them
# (target.current().native_matmul, target.py).


def transposed(b: np.ndarray) -> bool:
    """Whether ``b`` is the transposed view of a C-contiguous matrix (a ``d @ W.T``
    product's ``W.T``): :func:`add` lays it out for the kernel first."""
    return b.ndim == 2 and b.shape[1] > 1 and b.T.flags.c_contiguous


def suits(a: np.ndarray, b: np.ndarray, out: np.ndarray, packed: bool = False) -> bool:
    """Whether ``out = a @ b`` runs on the native kernel: float32 matrices on an AVX-512 host
    with the native path on; ``b`` and ``out`` unit-stride along their columns (``out``
    C-contiguous; ``packed``: ``b`` may instead be :func:`transposed`), ``a`` any positive
    strides; the shape inside the measured range above; no overlap between ``out`` and an
    operand."""
    opts = options.current()
    if not (opts.native_matmul and target.current().native_matmul
            and a.ndim == b.ndim == out.ndim == 2):
        return False
    if not (a.dtype == b.dtype == out.dtype == np.float32):
        return False
    (m, k), n = a.shape, b.shape[1]
    wide = MIN_COLUMNS <= n <= MAX_COLUMNS and n % LANES == 0
    if (b.shape[0] != k or out.shape != (m, n) or m < opts.matmul_min_rows
            or k > opts.matmul_max_inner or k < 1 or not (wide or n < LANES)):
        return False
    unit = b.strides[1] == 4 and b.strides[0] >= 4 * n
    if not out.flags.c_contiguous or not (unit or (packed and transposed(b))):
        return False
    if any(s <= 0 or s % 4 for s in a.strides) or b.strides[0] % 4:
        return False
    if np.shares_memory(out, a) or np.shares_memory(out, b):
        return False
    return native.enabled()


def _flat(a: np.ndarray) -> np.ndarray:
    """A 1-D unit-stride view from ``a``'s first element to its last (positive strides)."""
    if a.flags.c_contiguous:
        return a.reshape(-1)
    extent = 1 + sum((d - 1) * s for d, s in zip(a.shape, a.strides)) // a.itemsize
    return np.lib.stride_tricks.as_strided(a, shape=(extent,), strides=(a.itemsize,))


def _block(n: int) -> tuple[int, int]:
    return NARROW_BLOCK if n < LANES else BLOCK


def _inner(k: int, update: bool, apply: bool, gate: bool) -> int:
    """The inner dimension's block (``native_gemm.matmul_ir``'s ``inner``; 0: one block):
    ``options.CpuOptions.matmul_inner_block`` where ``k`` is longer and no epilogue reads
    ``C``."""
    block = options.current().matmul_inner_block
    return block if 0 < block < k and not (update or apply or gate) else 0


def _make(n: int, bias: bool, relu: bool, update: bool, apply: bool,
          gate: bool, inner: int = 0) -> Callable[[str, str], str]:
    rows, vecs = _block(n)
    tail = n % LANES

    def make(symbol: str, dtype: str) -> str:
        return native_gemm.matmul_ir(symbol, dtype, LANES, rows, vecs, CHUNK, tail, bias=bias,
                                     relu=relu, update=update, apply=apply, gate=gate,
                                     inner=inner)

    return make


def _name(n: int, bias: bool, relu: bool, update: bool, apply: bool, gate: bool,
          inner: int = 0) -> str:
    rows, vecs = _block(n)
    return (f"dense_matmul_l{LANES}r{rows}v{vecs}c{CHUNK}t{n % LANES}{'b' if bias else ''}"
            f"{'r' if relu else ''}{'u' if update else ''}{'w' if apply else ''}"
            f"{'g' if gate else ''}{f'k{inner}' if inner else ''}")


def _ranges(m: int, k: int, n: int, update: bool = False,
            columns: bool = True) -> tuple[bool, list[tuple[int, int]]]:
    """``(by_columns, ranges)``: the product's parts, one per kiln thread (one part where it
    is under ``matmul_serial_work`` multiply-adds: waking a thread would cost more). An update
    (``update``: ``C`` a weight's velocity, and the weight) or a product of under
    ``matmul_column_rows`` rows, of whole vectors (``n % LANES == 0``, 256 columns and more), is
    split by its columns, at multiples of the block width where each part gets one: each
    thread then reads only its columns of ``B`` and writes its columns of ``C``, so a
    weight's columns and its velocity's stay with one core from the forward product to the
    update (docs/architecture.md, "Dense products"); other products (every one where
    ``columns`` is False) by their rows, at multiples of the block height."""
    opts = options.current()
    parts = workers.count(m * k * n, opts.matmul_serial_work)
    if parts == 1:
        return False, [(0, m)]
    if (columns and n % LANES == 0 and n >= MIN_COLUMNS
            and (update or m < opts.matmul_column_rows)):
        unit = LANES * BLOCK[1] if n // parts >= LANES * BLOCK[1] else LANES
        cuts = [0] + [min(n, round(n * j / parts / unit) * unit) for j in range(1, parts)]
        cuts.append(n)
        return True, [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
    rows = _block(n)[0]
    cuts = [0] + [min(m, -(-m * j // parts) // rows * rows) for j in range(1, parts)] + [m]
    return False, [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]


def _arrays(a: np.ndarray, b: np.ndarray, out: np.ndarray, bias: np.ndarray | None,
            update: tuple | None, gate: tuple | None = None,
            by_columns: bool = False) -> tuple[tuple, list[int]]:
    """The kernel's arrays and its parameters (``matmul_ir``'s layout, less the sizes and the
    split range: the other range is all the rows, or all the columns)."""
    (m, k), n = a.shape, b.shape[1]
    arrays = (out.reshape(-1), _flat(a), _flat(b)) + ((bias,) if bias is not None else ())
    arrays += tuple(s.reshape(-1) for s in update) if update is not None else ()
    arrays += tuple(s.reshape(-1) for s in gate) if gate is not None else ()
    p = [m, k, n, a.strides[0] // 4, a.strides[1] // 4, b.strides[0] // 4, n, int(by_columns),
         0, m if by_columns else n]
    return arrays, p


def _scalar(s: np.ndarray) -> bool:
    return s.shape == () and s.dtype == np.float32


def add(b, a: np.ndarray, bm: np.ndarray, out: np.ndarray,
        epilogue: tuple[np.ndarray, bool] | None = None,
        update: tuple | None = None, pack_at: int | None = None,
        gate: tuple[np.ndarray, np.ndarray] | None = None, columns: bool = True) -> bool:
    """Adds ``out = relu?(a @ bm + bias)`` (``epilogue = (bias, relu)``: a float32 bias of one
    value per column; None: the plain product), or ``out = alpha * (a @ bm) + beta * out``
    (``update = (alpha, beta)``: float32 0-d arrays read at each call, the ``gemm`` op in
    place; ``(alpha, beta, w)``: then ``w += out``, ``w`` a float32 array of ``out``'s shape,
    C-contiguous), or ``out = (a @ bm) * float(g > t)`` (``gate = (g, t)``: ``g`` float32 of
    ``out``'s shape, C-contiguous, ``out``'s own storage or apart from it; ``t`` a float32
    0-d array: a ReLU's gradient) to the plan being built, split over kiln's threads; a
    :func:`transposed`
    ``bm`` is first laid out for the kernel (:func:`add_transpose`; ``pack_at``: that step
    goes to this index of the plan's steps, where the caller knows ``bm`` is already what the
    product will read); ``columns``: whether it may be split by its columns (:func:`_ranges`).
    False where :func:`suits` says no or the kernel does not build."""
    if not suits(a, bm, out, packed=True):
        return False
    bias, relu = epilogue if epilogue is not None else (None, False)
    if bias is not None and (bias.shape != (out.shape[1],) or bias.dtype != np.float32
                             or np.shares_memory(out, bias)):
        return False
    if update is not None and (bias is not None or not all(_scalar(s) for s in update[:2])
                               or any(np.shares_memory(out, s) for s in update)):
        return False
    apply = update is not None and len(update) == 3
    if update is not None and apply and not (
            update[2].shape == out.shape and update[2].dtype == np.float32
            and update[2].flags.c_contiguous
            and not any(np.shares_memory(update[2], x) for x in (a, bm))):
        return False
    if gate is not None:
        g, t = gate
        same = g.__array_interface__["data"][0] == out.__array_interface__["data"][0]
        if (bias is not None or update is not None or not _scalar(t) or g.shape != out.shape
                or g.dtype != np.float32 or not g.flags.c_contiguous
                or (np.shares_memory(g, out) and not same)
                or any(np.shares_memory(x, y) for x in (g, t) for y in (a, bm))):
            return False
    if not (bm.strides[1] == 4 and bm.strides[0] >= 4 * bm.shape[1]):
        packed = aligned.empty(bm.shape, np.float32)
        if not add_transpose(b, bm.T, packed):
            return False
        if pack_at is not None:
            b.steps.insert(pack_at, b.steps.pop())
        bm = packed
    rows, depth = a.shape
    by_columns, ranges = _ranges(rows, depth, out.shape[1], update is not None, columns)
    arrays, p = _arrays(a, bm, out, bias, update, gate, by_columns)
    tag = ("_bias_relu" if relu else "_bias") if bias is not None else ""
    tag += ("_update_apply" if apply else "_update") if update is not None else ""
    tag += "_gate" if gate is not None else ""
    n = out.shape[1]
    flags = (bias is not None, relu, update is not None, apply, gate is not None)
    inner = _inner(depth, *flags[2:])
    return native_split(b, _name(n, *flags, inner), _make(n, *flags, inner), arrays, p,
                               ranges=ranges, label=f"{b.node.op}:dense{tag}")


def add_transpose(b, src: np.ndarray, dst: np.ndarray) -> bool:
    """Adds ``dst = src.T`` (``src`` C-contiguous ``R x C`` float32, ``dst`` C-contiguous
    ``C x R``) on ``native_gemm.transpose_ir``, its source rows split over kiln's threads in
    whole tiles where it is large enough to pay; False where it does not build."""
    rows, cols = src.shape
    if not (src.flags.c_contiguous and dst.flags.c_contiguous and dst.shape == (cols, rows)):
        return False
    parts = workers.count(rows * cols, options.current().transpose_split)
    cuts = [0] + [min(rows, -(-rows * j // parts) // LANES * LANES)
                  for j in range(1, parts)] + [rows]
    ranges = [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if hi > lo]
    return native_split(b, f"dense_transpose_l{LANES}",
                               lambda s, d: native_gemm.transpose_ir(s, d, LANES),
                               (dst.reshape(-1), src.reshape(-1)), [rows, cols],
                               ranges=ranges, label=f"{b.node.op}:transpose")


class _Step:
    """Takes the one step :func:`add` adds (a plan builder's ``add`` and ``node.op``)."""

    class node:
        op = "matmul"

    def add(self, fn: Callable, args: tuple, label: str | None = None) -> None:
        self.fn, self.args = fn, args


def prepare(a: np.ndarray, bm: np.ndarray,
            out: np.ndarray) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None:
    """A function ``run(a, bm, out)`` computing ``out = a @ bm`` as the step :func:`add` makes
    (the native kernel split over kiln's threads), for arrays shaped and laid out as these
    (the caller keeps to the layouts), or None where :func:`add` makes none. Its parts are
    rows (the GEMM floors': ``benchmarks/floors.py``): a product alone, whose ``B`` no
    update writes, runs as fast or faster so (the MLP step's GEMMs: 1,462 against 1,480 us
    split as a plan splits them, and 1,634 against 1,726 when the host is slow)."""
    step = _Step()
    if not suits(a, bm, out) or not add(step, a, bm, out, columns=False):
        return None
    fn, params = step.fn, step.args[-1]

    def run(a: np.ndarray, bm: np.ndarray, out: np.ndarray) -> None:
        fn(out.reshape(-1), _flat(a), _flat(bm), params)

    return run
