"""softmax / log_softmax and the softmax cross-entropies (forward kernels).

Their gradients are ordinary graph ops built by autodiff (``softmax - one_hot`` times the
cotangent): the softmax kernel here, ``one_hot`` (movement.py) and a fused elementwise loop.

Rows along the last axis run ``native_nn``'s kernels (short float32 rows in straight-line code,
longer ones in eight lanes): their one implementation. A softmax over another axis, and any
softmax where the native path is off, runs :func:`softmax_kernel` (numba, or Python under
``KILN_JIT=0``); the cross-entropies where the native path is off run their NumPy references.
The maximum is taken from the row itself (NaN and infinities give NaN rows, like the
reference).
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import jit, native
from kiln.core.backends.cpu.kernels.nn.native_nn import (
    SHORT_ROW,
    dense_xent_ir,
    dense_xent_short_ir,
    softmax_rows_ir,
    softmax_short_ir,
    sparse_xent_ir,
    sparse_xent_short_ir,
)
from kiln.core.backends.cpu.registry import build_reference, builder
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.ir import Node


def softmax_kernel(o, x, p):
    # x, o: (P, R, Q) contiguous; softmax over R; p = [log (0/1)]
    n_p, n_r, n_q = x.shape
    log = p[0] != 0
    for i in range(n_p):
        for q in range(n_q):
            m = x[i, 0, q]
            for r in range(1, n_r):
                v = x[i, r, q]
                if v > m:
                    m = v
            s = 0.0
            if log:
                for r in range(n_r):
                    s += np.exp(x[i, r, q] - m)
                ls = np.log(s)
                for r in range(n_r):
                    o[i, r, q] = (x[i, r, q] - m) - ls
            else:
                for r in range(n_r):
                    e = np.exp(x[i, r, q] - m)
                    o[i, r, q] = e
                    s += e
                for r in range(n_r):
                    o[i, r, q] = o[i, r, q] / s


def _prq(shape: tuple, axis: int) -> tuple[int, int, int]:
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


ROW_WORK = 16  # multiply-adds an element of a softmax row counts as (its exp: a polynomial)


def _rows(b, found: tuple, rows: int, r: int, label: str) -> None:
    """A row kernel ``(o, x, p = [P, R])`` over the runtime's parts of its rows, each part
    its rows of ``o`` and ``x`` and its own ``P`` (``runtime/parts.py``); one part under
    ``serial_work``. The attention scores of a transformer block (32 x 4 heads x 64 rows of
    64) took 983 us on one thread (docs/performance.md, "The same host: aligned arrays,
    inner blocks, split softmax rows")."""
    entry, args = found  # (o and x flat: a part's rows are its range of elements)
    ranges = workers.split(rows, work=rows * r * ROW_WORK,
                           min_work=options.current().serial_work)
    if len(ranges) == 1:
        b.add(entry, args, label=label)
        return
    workers.add_parts(b, entry, tuple(args), ranges=[(lo * r, hi * r) for lo, hi in ranges],
                      sliced=(0, 1), label=label, sized=True,
                      vary=lambda k, lo, hi: {2: np.array([(hi - lo) // r, r], np.int64)})


@builder("softmax", "log_softmax")
def build_softmax(b, node: Node) -> None:
    shape = b.shape(node)
    if 0 in shape:
        return
    p_, r, q = _prq(shape, node.attrs["axis"])
    x = b.contiguous(node.inputs[0])
    out = b.out(node)
    p = np.array([int(node.op == "log_softmax")], np.int64)
    if q == 1:
        args = (out.reshape(p_, r), x.reshape(p_, r), p)
        log, dt = node.op == "log_softmax", node.dtype  # the IR's makers hold no arrays
        if _short(dt, r):  # native_nn's short rows, else any length
            found = native.try_kernel(f"softmax_short{r} {dt} log={log}", args[:2],
                                      [p_, r], lambda s: softmax_short_ir(s, dt, log, r))
            if found is not None:
                _rows(b, found, p_, r, f"{node.op}:short_rows")
                return
        found = native.try_kernel(f"softmax_rows {dt} log={log}", args[:2], [p_, r],
                                  lambda s: softmax_rows_ir(s, dt, log))
        if found is not None:
            _rows(b, found, p_, r, node.op)
            return
    args = (out.reshape(p_, r, q), x.reshape(p_, r, q), p)
    b.add(jit.load_function(softmax_kernel).specialize(args), args)


@builder("sparse_softmax_cross_entropy", "softmax_cross_entropy")
def build_xent(b, node: Node) -> None:
    logits, labels = node.inputs
    shape = b.shape(logits)
    if 0 in shape:
        return
    c = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    x = b.contiguous(logits).reshape(rows, c)
    out = b.out(node).reshape(rows)
    y = b.contiguous(labels)
    dt, lt = x.dtype.name, y.dtype.name  # the IR's makers hold names, never arrays
    if _short(dt, c) and _short_xent(b, node, x, out, y, rows, c):
        return
    w = np.empty((1, c), x.dtype)  # the kernels' scratch row: this plan's own
    if node.op == "sparse_softmax_cross_entropy":
        args = (out, x, y.reshape(rows), w)
        found = native.try_kernel(f"sparse_xent {x.dtype} {args[2].dtype}", args, [rows, c],
                                  lambda s: sparse_xent_ir(s, dt, lt))
    else:
        args = (out, x, y.reshape(rows, c), w)
        found = None if args[2].dtype != x.dtype else native.try_kernel(
            f"dense_xent {x.dtype}", args, [rows, c], lambda s: dense_xent_ir(s, dt))
    if found is None:  # the native path is off (or labels of another float dtype)
        build_reference(b, node)
        return
    b.add(*found)


def _short(dtype: str, n: int) -> bool:
    """Whether rows of ``n`` ``dtype`` elements run native_nn's short-row kernels."""
    return dtype == "float32" and 1 <= n <= SHORT_ROW


def _short_xent(b, node: Node, x: np.ndarray, out: np.ndarray, y: np.ndarray, rows: int,
                c: int) -> bool:
    """Adds the cross-entropy of short float32 rows (native_nn.*_short_ir) of logits ``x``
    and labels ``y``; False where the native path does not take it (the caller then adds the
    kernel for any length)."""
    dt, lt = x.dtype.name, y.dtype.name  # the IR's makers hold names, never arrays
    if node.op == "sparse_softmax_cross_entropy":
        y = y.reshape(rows)
        found = native.try_kernel(f"sparse_xent_short{c} {x.dtype} {y.dtype}", (out, x, y),
                                  [rows, c], lambda s: sparse_xent_short_ir(s, dt, lt, c))
    else:
        y = y.reshape(rows, c)
        found = None if y.dtype != x.dtype else native.try_kernel(
            f"dense_xent_short{c} {x.dtype}", (out, x, y), [rows, c],
            lambda s: dense_xent_short_ir(s, dt, c))
    if found is None:
        return False
    b.add(*found, label=f"{node.op}:short_rows")
    return True
