"""softmax / log_softmax and the softmax cross-entropies (forward kernels).

Their gradients are ordinary graph ops built by autodiff (``softmax - one_hot`` times the
cotangent): the softmax kernel here, ``one_hot`` (movement.py) and a fused elementwise loop.

Rows along the softmax axis are read once for the maximum and once for the exponentials; the
maximum is taken from the row itself (NaN and infinities give NaN rows, like the reference).
"""

from __future__ import annotations

import inspect
import textwrap

import numpy as np

from kiln.core.backends.cpu import jit, native
from kiln.core.backends.cpu.native_nn import dense_xent_ir, softmax_rows_ir, sparse_xent_ir
from kiln.core.backends.cpu.registry import builder
from kiln.core.backends.cpu.scalars import exp_neg32 as _exp_neg32
from kiln.core.backends.cpu.scalars import row_max as _row_max
from kiln.core.backends.cpu.scalars import row_sum32 as _row_sum32
from kiln.core.backends.cpu.scalars import row_sum_exp as _row_sum_exp
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


def softmax_rows_kernel(o, x, p):
    # x, o: (P, R) contiguous; softmax over the last axis (float64)
    n_p, n_r = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_r)
        s = 0.0
        for r in range(n_r):
            e = np.exp(x[i, r] - m)
            o[i, r] = e
            s += e
        for r in range(n_r):
            o[i, r] = o[i, r] / s


def softmax_rows_f32_kernel(o, x, p):
    # float32 (P, R) rows, softmax over the last axis: exp(x - max) by scalars.py's exp_neg32
    # (vectorizable; exactly 0 below exp(-87.3), NaN kept) into o, the max and the float64 sum
    # of o in scalars.py's eight lanes (_row_max: row_max32, _row_sum32), strict float math:
    # a row gives the same bits wherever it sits in the batch.
    n_p, n_r = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_r)
        for r in range(n_r):
            o[i, r] = _exp_neg32(x[i, r] - m)
        inv = 1.0 / _row_sum32(o, i, n_r)
        for r in range(n_r):
            o[i, r] = o[i, r] * inv


def log_softmax_rows_kernel(o, x, p):
    # x, o: (P, R) contiguous; log-softmax over the last axis (float64)
    n_p, n_r = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_r)
        ls = np.log(_row_sum_exp(x, i, n_r, m))
        for r in range(n_r):
            o[i, r] = (x[i, r] - m) - ls


def log_softmax_rows_f32_kernel(o, x, p):
    # float32 rows: softmax_rows_f32_kernel's exp into o and its sum, then (x - max) - log(sum)
    n_p, n_r = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_r)
        for r in range(n_r):
            o[i, r] = _exp_neg32(x[i, r] - m)
        ls = np.log(_row_sum32(o, i, n_r))
        for r in range(n_r):
            o[i, r] = (x[i, r] - m) - ls


def sparse_xent_kernel(o, x, labels):
    # x: (P, C) logits, labels: (P,) ints, o: (P,)
    n_p, n_c = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_c)
        s = _row_sum_exp(x, i, n_c, m)
        k = labels[i]
        if k < 0:
            k += n_c
        if k < 0 or k >= n_c:
            raise IndexError("sparse_softmax_cross_entropy: label out of range")
        o[i] = np.log(s) - (x[i, k] - m)


def dense_xent_kernel(o, x, y):
    # x, y: (P, C), o: (P,)
    n_p, n_c = x.shape
    for i in range(n_p):
        m = _row_max(x, i, n_c)
        ls = np.log(_row_sum_exp(x, i, n_c, m))
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
        fast = node.dtype == "float32"
        log = node.op == "log_softmax"
        found = native.try_kernel(f"softmax_rows {node.dtype} log={log} fast={fast}", args[:2],
                                  [p_, r], lambda s: softmax_rows_ir(s, node.dtype, log, fast))
        if found is not None:
            b.add(*found)
            return
        fn = {(False, False): softmax_rows_kernel, (False, True): softmax_rows_f32_kernel,
              (True, False): log_softmax_rows_kernel,
              (True, True): log_softmax_rows_f32_kernel}[log, fast]
    else:
        args = (out.reshape(p_, r, q), x.reshape(p_, r, q), p)
        fn = softmax_kernel
    b.add(_load(fn, node.dtype).specialize(args), args)


_ROW_KERNELS = ("softmax_rows_kernel", "softmax_rows_f32_kernel", "log_softmax_rows_kernel",
                "log_softmax_rows_f32_kernel", "sparse_xent_kernel", "dense_xent_kernel")


def _load(fn, dtype: str) -> jit.Kernel:
    """The numba kernel of ``fn``: the row kernels with scalars.py's functions imported (its
    hash in the cache key), ``_row_max`` / ``_row_sum_exp`` the float32 ones in eight lanes
    (row_max32, row_sum_exp32) for float32 rows, else the in-order ones."""
    if fn.__name__ not in _ROW_KERNELS:
        return jit.load_function(fn)
    from kiln.core.backends.cpu.codegen import SCALARS_HASH

    lanes = "32" if dtype == "float32" else ""
    names = {"_exp_neg32": "exp_neg32", "_row_max": "row_max" + lanes,
             "_row_sum_exp": "row_sum_exp" + lanes, "_row_sum32": "row_sum32"}
    source = "".join(f"from kiln.core.backends.cpu.scalars_numba import {name} as {alias}  "
                     f"# scalars {SCALARS_HASH}\n" for alias, name in names.items())
    source += "\n\n" + textwrap.dedent(inspect.getsource(fn))
    return jit.load(source, fn.__name__, signature=f"{fn.__name__} {dtype} rows{lanes}")


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
    if node.op == "sparse_softmax_cross_entropy":
        args = (out, x, b.contiguous(labels).reshape(rows))
        found = native.try_kernel(f"sparse_xent {x.dtype} {args[2].dtype}", args, [rows, c],
                                  lambda s: sparse_xent_ir(s, x.dtype.name, args[2].dtype.name))
        if found is not None:
            b.add(*found)
            return
        fn = sparse_xent_kernel
    else:
        args = (out, x, b.contiguous(labels).reshape(rows, c))
        found = None if args[2].dtype != x.dtype else native.try_kernel(
            f"dense_xent {x.dtype}", args, [rows, c], lambda s: dense_xent_ir(s, x.dtype.name))
        if found is not None:
            b.add(*found)
            return
        fn = dense_xent_kernel
    b.add(_load(fn, x.dtype.name).specialize(args), args)
