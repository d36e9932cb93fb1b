"""``argsort`` on the CPU (docs/ops.md, "Sorting"): stable, NaN last, optionally only the first
``k`` indices (``top_k``).

float32, int32 and bool values become one uint64 key each: the value mapped to an unsigned
32-bit integer of the same order (floats: negatives' bits inverted, positives' sign bit set,
both zeros equal, every NaN above +inf; ints: minus the dtype's minimum; ``descending``: the
order inverted but for NaN, still last) in the high half, the element's index in the low
half. The keys are distinct, so NumPy's unstable SIMD sort of them gives the stable order,
and ``np.partition`` then a sort of the first ``k`` gives the stable first ``k`` in
O(n + k log k). float64 and int64 take NumPy's stable argsort (of ``-x`` / ``~x`` when
descending). Rows are split over the kernel threads (NumPy's sorts release the GIL).
"""

from __future__ import annotations

import numpy as np

from kiln.core.backends.cpu import options
from kiln.core.backends.cpu.codegen import jit
from kiln.core.backends.cpu.registry import builder
from kiln.core.backends.cpu.runtime import parts as workers
from kiln.core.ir import Node
from kiln.core.ops.sort import descending_key

# below options.CpuOptions.sort_parallel_min elements the rows are sorted in one thread


def float_keys(bits, keys, desc):
    """``keys[r, j]``: the order key of float32 ``bits[r, j]`` above index ``j`` (``desc``
    1: of the descending order)."""
    rows, n = bits.shape
    sign = np.uint64(0x80000000)
    low = np.uint64(0xFFFFFFFF)
    for r in range(rows):
        for j in range(n):
            b = np.uint64(bits[r, j])
            mag = b & np.uint64(0x7FFFFFFF)
            if mag > np.uint64(0x7F800000):  # NaN: after +inf, in index order
                key = low
            elif mag == np.uint64(0):  # -0.0 and 0.0 are equal
                key = sign
            elif b & sign:
                key = low - b
            else:
                key = b | sign
            if desc and mag <= np.uint64(0x7F800000):
                key = low - key
            keys[r, j] = (key << np.uint64(32)) | np.uint64(j)


def int_keys(values, keys, desc):
    """``keys[r, j]``: int32 or bool ``values[r, j]`` plus 2^31 above index ``j`` (``desc`` 1:
    of the descending order)."""
    rows, n = values.shape
    low = np.uint64(0xFFFFFFFF)
    for r in range(rows):
        for j in range(n):
            key = np.uint64(np.int64(values[r, j]) + 2147483648)
            if desc:
                key = low - key
            keys[r, j] = (key << np.uint64(32)) | np.uint64(j)


def _keyed(dtype: np.dtype) -> str | None:
    if dtype == np.float32:
        return "float"
    if dtype in (np.int32, np.bool_):
        return "int"
    return None


@builder("argsort")
def build_argsort(b, node: Node) -> None:
    x_node = node.inputs[0]
    axis, k, desc = node.attrs["axis"], node.attrs["k"], int(node.attrs["descending"])
    shape = b.shape(x_node)
    n = shape[axis]
    k = n if k is None else k
    if k > n:
        raise ValueError(f"argsort: k {k} exceeds axis {axis} of length {n} (shape {shape})")
    x = np.moveaxis(b.array(x_node), axis, -1)  # rows of the sorted axis
    out = np.moveaxis(b.out(node), axis, -1)
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    direct = out.flags.c_contiguous  # the last axis sorted: write the rows in place
    result = out.reshape(rows, k) if direct else np.empty((rows, k), np.int64)
    staged = not x.flags.c_contiguous  # rows read in place when contiguous, else copied first
    stage = np.empty((rows, n) if staged else (0, n), x.dtype)
    flat = stage if staged else x.reshape(rows, n)
    kind = _keyed(flat.dtype) if n < (1 << 32) else None
    parts = workers.split(rows, work=rows * n, min_work=options.current().sort_parallel_min)

    if kind is None:
        def sort_part(lo: int, hi: int) -> None:
            part = descending_key(flat[lo:hi]) if desc else flat[lo:hi]
            result[lo:hi] = np.argsort(part, axis=1, kind="stable")[:, :k]
    else:
        keys = np.empty((rows, n), np.uint64)
        src = flat.view(np.uint32) if kind == "float" else flat
        make = jit.load_function(float_keys if kind == "float" else int_keys).specialize(
            (src, keys, desc))
        mask = np.uint64(0xFFFFFFFF)

        def sort_part(lo: int, hi: int) -> None:
            part = keys[lo:hi]
            make(src[lo:hi], part, desc)
            if k < n:
                part.partition(k - 1, axis=1)
            head = part[:, :k]
            head.sort(axis=1)
            np.bitwise_and(head, mask, out=head)
            np.copyto(result[lo:hi], head, casting="unsafe")

    def argsort() -> None:
        if staged:
            np.copyto(stage.reshape(x.shape), x)
        workers.run_parts([(sort_part, part) for part in parts])
        if not direct:
            np.copyto(out, result.reshape(out.shape))

    b.add(argsort, (), label="argsort")
