"""softmax / log_softmax and the softmax cross-entropies (forward kernels).

Their gradients are ordinary graph ops built by autodiff (``softmax - one_hot`` times the
cotangent): the softmax kernel here, ``one_hot`` (movement.py) and a fused elementwise loop.

Rows along the softmax axis are read once for the maximum and once for the exponentials; the
maximum is taken from the row itself (NaN and infinities give NaN rows, like the reference).
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu.codegen import jit, native
from kiln.core.backends.cpu.codegen.scalars import row_max as _row_max
from kiln.core.backends.cpu.codegen.scalars import row_sum as _row_sum
from kiln.core.backends.cpu.kernels.nn.native_nn import (
    SHORT_ROW,
    dense_xent_ir,
    dense_xent_short_ir,
    softmax_rows_ir,
    softmax_short_ir,
    sparse_xent_ir,
    sparse_xent_short_ir,
)
from kiln.core.backends.cpu.registry import builder
from kiln.core.ir import Node

_exp = np.exp  # the row kernels' (bound again by _load: exp_neg32 for float32 rows)


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


# The row kernels below compute with ``_row_max``, ``_exp`` and ``_row_sum``, which ``_load``
# binds by dtype: float64 rows in order (scalars.row_max, np.exp, scalars.row_sum), float32
# rows in scalars.py's eight lanes (row_max32, exp_neg32: exactly 0 below exp(-87.3), NaN
# kept, row_sum32), which vectorize with strict float math: a row gives the same bits
# wherever it sits in the batch. The exps go into o (or a scratch row, w) before their sum.


def softmax_rows_kernel(o, x, p):
    # x, o: (P, R) contiguous; softmax over the last axis (p = [log (0/1)]: log-softmax), the
    # exps into o, then o times the inverse of their sum, or (x - max) - log(sum)
    n_p, n_r = x.shape
    log = p[0] != 0
    for i in range(n_p):
        m = _row_max(x, i, n_r)
        for r in range(n_r):
            o[i, r] = _exp(x[i, r] - m)
        s = _row_sum(o, i, n_r)
        if log:
            ls = np.log(s)
            for r in range(n_r):
                o[i, r] = (x[i, r] - m) - ls
        else:
            inv = 1.0 / s
            for r in range(n_r):
                o[i, r] = o[i, r] * inv


def sparse_xent_kernel(o, x, labels, w):
    # x: (P, C) logits, labels: (P,) ints, o: (P,), w: (1, C) scratch
    n_p, n_c = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_c)
        for c in range(n_c):
            w[0, c] = _exp(x[i, c] - m)
        s = _row_sum(w, 0, n_c)
        k = labels[i]
        if k < 0:
            k += n_c
        if k < 0 or k >= n_c:
            raise IndexError("sparse_softmax_cross_entropy: label out of range")
        o[i] = np.log(s) - (x[i, k] - m)


def dense_xent_kernel(o, x, y, w):
    # x, y: (P, C), o: (P,), w: (1, C) scratch
    n_p, n_c = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_c)
        for c in range(n_c):
            w[0, c] = _exp(x[i, c] - m)
        ls = np.log(_row_sum(w, 0, n_c))
        acc = 0.0
        for c in range(n_c):
            yc = y[i, c]
            # float64: x - m is exact (no overflow to -inf at logits of +-3e38); a label of 0
            # adds 0, also where x - m is -inf (0 * -inf would be NaN)
            if yc != 0:
                acc += np.float64(yc) * ((np.float64(x[i, c]) - np.float64(m)) - ls)
        o[i] = -acc


def _prq(shape: tuple, axis: int) -> tuple[int, int, int]:
    return (int(np.prod(shape[:axis], dtype=np.int64)), int(shape[axis]),
            int(np.prod(shape[axis + 1:], dtype=np.int64)))


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
                b.add(*found, label=f"{node.op}:short_rows")
                return
        found = native.try_kernel(f"softmax_rows {dt} log={log}", args[:2], [p_, r],
                                  lambda s: softmax_rows_ir(s, dt, log))
        if found is not None:
            b.add(*found)
            return
        fn = softmax_rows_kernel
    else:
        args = (out.reshape(p_, r, q), x.reshape(p_, r, q), p)
        fn = softmax_kernel
    b.add(_load(fn, node.dtype).specialize(args), args)


_ROW_KERNELS = ("softmax_rows_kernel", "sparse_xent_kernel", "dense_xent_kernel")


def _load(fn, dtype: str) -> jit.Kernel:
    """The numba kernel of ``fn``: a row kernel with ``_row_max``, ``_exp`` and ``_row_sum``
    bound for ``dtype`` (see above; scalars.py's hash in the cache key)."""
    if fn.__name__ not in _ROW_KERNELS:
        return jit.load_function(fn)
    from kiln.core.backends.cpu.codegen.spec import SCALARS_HASH

    lanes = dtype == "float32"
    names = {"_row_max": "row_max32" if lanes else "row_max",
             "_row_sum": "row_sum32" if lanes else "row_sum"}
    source = "".join(f"from kiln.core.backends.cpu.codegen.scalars_numba import {name} as {alias}  "
                     f"# scalars {SCALARS_HASH}\n" for alias, name in names.items())
    source += ("from kiln.core.backends.cpu.codegen.scalars_numba import exp_neg32 as _exp\n"
               if lanes else "from numpy import exp as _exp\n")
    source += "\n\n" + jit.function_source(fn)
    return jit.load(source, fn.__name__, signature=f"{fn.__name__} {dtype} rows")


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
        if found is not None:
            b.add(*found)
            return
        fn = sparse_xent_kernel
    else:
        args = (out, x, y.reshape(rows, c), w)
        found = None if args[2].dtype != x.dtype else native.try_kernel(
            f"dense_xent {x.dtype}", args, [rows, c], lambda s: dense_xent_ir(s, dt))
        if found is not None:
            b.add(*found)
            return
        fn = dense_xent_kernel
    b.add(_load(fn, x.dtype.name).specialize(args), args)


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
