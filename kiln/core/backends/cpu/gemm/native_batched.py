"""Batches of small float32 products ``C[..] = A[..] @ B[..]`` with batch axes (an attention
layer's ``q k^T`` and ``p v`` per sample and head, and their gradients), and the 2-D products
of plans whose every product is kiln's, on kiln's register-blocked kernel
(``native_gemm.batched_ir``), split over kiln's threads by products (docs/architecture.md,
"Dense products"; measurements in docs/performance.md, "Batched products").

Before it, a product with two batch axes went to ``np.matmul``: OpenBLAS cannot take it as
one batch (the heads of ``(B, T, N, H)`` viewed as ``(B, N, T, H)`` have no single batch
stride), and NumPy ran one product at a time on one thread. The suite's transformer encoder
(64 x 16 x 64 and 64 x 64 x 16 products, 128 a call) spent 180-320 us a call there, 1.5 ms
of its 13 ms step per block, where MKL's ``torch.bmm`` takes ~60 us (2-core Emerald Rapids).

:func:`suits` takes a product where ``B`` is unit-stride along its columns (else it is first
copied so: a ``k^T`` or ``W^T`` view), ``C`` too, the columns a multiple of the vector's
lanes, the batch axes the same on all three (no broadcasting) and foldable into at most two
strides, each product at most ``batched_max_edge`` rows and columns, ``batched_max_inner``
deep and ``batched_max_work`` multiply-adds (``options.CpuOptions``: the kernel has no cache
blocking; past those OpenBLAS's packing wins: (4096 x 128)^T @ (4096 x 128) 0.48x, (1024 x
4096) @ (4096 x 256) 0.23x its speed). A 2-D product is cut into a batch of :func:`chunk`
rows of ``A`` sharing ``B`` (batch stride 0). ``A`` is read in place through its strides (a
``p^T`` or ``x^T`` view is no copy). Each product is computed by one thread in one order:
the same bits however many threads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln.core import aligned
from kiln.core.backends.cpu import options, target
from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.gemm import native_gemm
from kiln.core.backends.cpu.gemm.native_matmul import _flat
from kiln.core.backends.cpu.runtime.parts import native_split

# accumulators a block keeps in registers (of 32 vector registers with AVX-512, 16 without:
# the rest hold B's vectors and a broadcast), and the widest block in vectors
ACCUMULATORS = {16: 16, 8: 8}
MAX_VECS = 4
CHUNK = 64  # rows of a 2-D product's A per product of its batch (:func:`chunk`)


def _levels(batch: tuple[int, ...], strides: list[tuple[int, ...]]) -> list[tuple] | None:
    """The batch axes folded into at most two ``(size, (stride of each array))`` levels
    (an axis folds into the one before it where every array's stride there is its size times
    this axis' stride), or None where more remain."""
    levels: list[tuple[int, tuple[int, ...]]] = []
    for d, size in enumerate(batch):
        here = tuple(s[d] for s in strides)
        if size == 1:
            continue
        if levels and all(prev == size * st for prev, st in zip(levels[-1][1], here)):
            levels[-1] = (levels[-1][0] * size, here)
        else:
            levels.append((size, here))
    if len(levels) > 2:
        return None
    while len(levels) < 2:
        levels.insert(0, (1, tuple(0 for _ in strides)))
    return levels


def block(n_vecs: int, lanes: int) -> tuple[int, int]:
    """(rows, vectors) of a block: as many vectors as the columns have (at most
    :data:`MAX_VECS`) and rows for :data:`ACCUMULATORS` accumulators; fixed by the columns
    alone, never by the rows, so that a new batch size compiles no new kernel
    (``test_cpu_jit.py``; rows past the last block run one at a time, a single chain of FMAs
    each: :func:`chunk` cuts a 2-D product's rows into multiples of the block)."""
    vecs = max(1, min(n_vecs, MAX_VECS))
    return max(1, ACCUMULATORS.get(lanes, 8) // vecs), vecs


def chunk(m: int, rows: int = 1) -> int:
    """Rows of a 2-D product's ``A`` per product of the batch it is cut into: the largest
    divisor of ``m`` up to :data:`CHUNK` and half of ``m`` (two parts at least), 4 or more,
    a multiple of the block's ``rows`` where one is (else its last rows run one at a time);
    else ``m`` (one product)."""
    found = [d for d in range(min(CHUNK, m // 2), 3, -1) if m % d == 0]
    return next((d for d in found if d % rows == 0), found[0] if found else m)


def _as_batch(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> tuple:
    """A 2-D product ``out = x @ y`` as a batch: ``x`` and ``out`` cut into :func:`chunk`
    rows each, ``y`` the same for every product (batch stride 0); batches unchanged."""
    if x.ndim != 2:
        return x, y, out
    m = x.shape[0]
    lanes = target.current().vector_lanes
    c = chunk(m, block(y.shape[1] // lanes, lanes)[0])

    def cut(a: np.ndarray) -> np.ndarray:
        return np.lib.stride_tricks.as_strided(
            a, (m // c, c, a.shape[1]), (c * a.strides[0], *a.strides), writeable=a is out)

    return cut(x), np.lib.stride_tricks.as_strided(y, (m // c, *y.shape), (0, *y.strides),
                                                   writeable=False), cut(out)


def suits(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``out = x @ y`` runs on the kernel (see the module docstring): a batch, or a
    2-D product (``linalg`` asks only in plans without BLAS calls)."""
    lanes, opts = target.current().vector_lanes, options.current()
    arrays = (x, y, out)
    if (not opts.native_batched or not native.enabled() or x.ndim < 2
            or not x.ndim == y.ndim == out.ndim
            or any(a.dtype != np.float32 for a in arrays)
            or not x.shape[:-2] == y.shape[:-2] == out.shape[:-2]
            or any(a.size == 0 or min(a.strides) < 0 for a in arrays)
            or not out.flags.c_contiguous or y.shape[-1] % lanes
            or y.shape[-1] > opts.batched_max_edge or x.shape[-1] > opts.batched_max_inner):
        return False
    if np.shares_memory(out, x) or np.shares_memory(out, y):
        return False
    xb, yb, ob = _as_batch(x, y, out)
    if xb.shape[-2] > opts.batched_max_edge:
        return False
    if xb.shape[-2] * xb.shape[-1] * yb.shape[-1] > opts.batched_max_work:
        return False
    st = [tuple(s // 4 for s in a.strides[:-2]) for a in (xb, yb, ob)]
    return _levels(xb.shape[:-2], st) is not None  # y laid out anew keeps its levels' count


def add(b, x: np.ndarray, y: np.ndarray, out: np.ndarray, spread: bool = True) -> bool:
    """Adds ``out = x @ y`` on the kernel where it :func:`suits`, split over kiln's threads
    by products where ``spread`` (the caller's plan calls no BLAS: OpenBLAS's threads spin
    for a while after each call, ``threads.BLAS_TIMEOUT``, on the core kiln's second thread
    would take; the transformer encoder's ``p v`` took 490-520 us split right after a BLAS
    product, 130-150 us elsewhere in the same step), else on the caller's thread. False
    where it does not take it or does not build: the caller then runs
    ``products.MatmulCall``."""
    if not suits(x, y, out):
        return False
    lanes = target.current().vector_lanes
    source = packed = None
    if y.strides[-1] != 4:  # a transposed view (k^T, W^T): laid out for the kernel first
        source = y
        y = packed = aligned.empty(y.shape, np.float32)
    x, y, out = _as_batch(x, y, out)
    (m, k), n = x.shape[-2:], y.shape[-1]
    st = [tuple(s // 4 for s in a.strides) for a in (x, y, out)]
    levels = _levels(x.shape[:-2], [s[:-2] for s in st])
    assert levels is not None  # suits checked the same strides (y's pack keeps its count)
    (outer, (ai, bi, ci)), (heads, (aj, bj, cj)) = levels
    rows, vecs = block(n // lanes, lanes)
    p = [m, k, n, heads, ai, aj, st[0][-2], st[0][-1], bi, bj, st[1][-2], ci, cj, st[2][-2]]
    items = outer * heads
    at = len(b.steps)
    if not native_split(b, f"batched_l{lanes}r{rows}v{vecs}", _make(lanes, rows, vecs),
                        (_flat(out), _flat(x), _flat(y)), p, n=items,
                        ranges=None if spread else [(0, items)],
                        work=items * m * n * k, label=f"{b.node.op}:batched"):
        return False  # nothing added: the caller's MatmulCall reads the view itself
    if packed is not None:  # the layout step goes before the product, once it is known to run
        b.add(np.copyto, (packed, source), label=f"{b.node.op}:pack")
        b.steps.insert(at, b.steps.pop())
    return True


def _make(lanes: int, rows: int, vecs: int) -> Callable[[str, str], str]:
    def make(symbol: str, dtype: str) -> str:
        return native_gemm.batched_ir(symbol, dtype, lanes, rows, vecs)
    return make
