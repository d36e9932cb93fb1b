"""Movement ops that copy: a reshape of strided data (its view rule declined: see
``OpDef.view`` and kiln/core/plan.py), and the small kernels one_hot / pad / concatenate /
slice_grad. one_hot's one kernel is native (``native_nn.one_hot_ir``); where that path is off
it runs its NumPy reference.
"""

from __future__ import annotations

import functools

import numpy as np

from kiln.core.backends.cpu.codegen import native
from kiln.core.backends.cpu.kernels.nn.native_nn import one_hot_ir
from kiln.core.backends.cpu.registry import build_reference, builder
from kiln.core.ir import Node


# ---- copies -----------------------------------------------------------------------------------
@builder("reshape", "reshape_like")
def build_reshape_copy(b, node: Node) -> None:
    src = b.array(node.inputs[0])
    dst = b.out(node).reshape(src.shape)
    b.add(np.copyto, (dst, src), label=f"{node.op}(copy)")


def _concatenate_into(axis: int, out: np.ndarray, *arrays: np.ndarray) -> None:
    np.concatenate(arrays, axis=axis, out=out)


@builder("concatenate")
def build_concatenate(b, node: Node) -> None:
    # the arrays are the call's arguments (not held in a closure), so that feed binding and
    # a loop's bound inputs/outputs can rebuild them
    args = (b.out(node),) + tuple(b.array(i) for i in node.inputs)
    b.add(functools.partial(_concatenate_into, node.attrs["axis"]), args, label="concatenate")


_BORDER_MIN_BYTES = 1 << 16


def _borders(out: np.ndarray, inner: tuple[slice, ...]) -> list[np.ndarray]:
    """The views of ``out`` outside its ``inner`` box (per axis, the slabs before and after
    it; corners belong to two): filled, with the box copied, they write ``out`` once, where
    a fill of the whole array first wrote it twice (a causal Conv1D's input pad of
    (32, 512, 32) float32: 1 row of 513 filled instead of all). ``[out]`` for an output
    under ``_BORDER_MIN_BYTES`` (its second pass stays in the caches, and one fill costs
    less than several: a (1, 30, 30, 8) pad 1.79 us filled whole, 2.01 us by its four
    borders) and where the box has gaps (strides other than 1)."""
    steps = [s.indices(n)[2] for s, n in zip(inner, out.shape)]
    if out.nbytes < _BORDER_MIN_BYTES or any(step != 1 for step in steps):
        return [out]
    views = []
    for axis, s in enumerate(inner):
        lo, hi, _ = s.indices(out.shape[axis])
        for part in (slice(0, lo), slice(hi, out.shape[axis])):
            if part.stop > part.start:
                views.append(out[(slice(None),) * axis + (part,)])
    return views


@builder("pad")
def build_pad(b, node: Node) -> None:
    src = b.array(node.inputs[0])
    out = b.out(node)
    box = tuple(slice(lo, lo + d) for (lo, _), d in zip(node.attrs["pads"], src.shape))
    inner, borders = out[box], _borders(out, box)
    value = node.attrs["value"]

    def pad() -> None:
        for v in borders:
            v.fill(value)
        np.copyto(inner, src)

    b.add(pad, ())


@builder("slice_grad")
def build_slice_grad(b, node: Node) -> None:
    ct = b.array(node.inputs[0])
    out = b.out(node)
    box = tuple(slice(*s) for s in node.attrs["spec"])
    inner, borders = out[box], _borders(out, box)

    def slice_grad() -> None:
        for v in borders:
            v.fill(0)
        np.copyto(inner, ct)

    b.add(slice_grad, ())


@builder("one_hot")
def build_one_hot(b, node: Node) -> None:
    idx = b.contiguous(node.inputs[0]).reshape(-1)
    out = b.flat(node)
    depth = node.attrs["depth"]
    dt, it = out.dtype.name, idx.dtype.name  # the IR's maker holds names, never arrays
    found = native.try_kernel(f"one_hot {out.dtype} {idx.dtype}", (out, idx),
                              [depth, idx.shape[0]], lambda s: one_hot_ir(s, dt, it))
    if found is None:  # the native path is off: the NumPy reference
        build_reference(b, node)
        return
    b.add(*found)
