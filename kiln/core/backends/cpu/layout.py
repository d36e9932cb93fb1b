"""Memory layouts: where a tensor's elements live in a flat storage root.

A :class:`Layout` is ``(root, offset, shape, strides)`` with offset and strides in elements.
Kernel outputs are fresh contiguous layouts; movement ops (reshape, transpose, broadcast,
slice, ...) become new layouts of the same root whenever possible (no copy). Generated loops
read any layout through its flat root (:func:`loop_nest`), so transposed, sliced and broadcast
inputs cost no copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Shape = tuple[int, ...]


def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Layout:
    """A strided view of storage ``root`` (an int id), in elements."""

    root: int
    offset: int
    shape: Shape
    strides: tuple[int, ...]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous (size-1 dims may have any stride)."""
        expect = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d != 1 and s != expect:
                return False
            expect *= d
        return True

    def with_root(self, root: int) -> Layout:
        return Layout(root, self.offset, self.shape, self.strides)

    # ---- movement ops as layout arithmetic (None: needs a copy) ----------------------------
    def reshape(self, shape: Shape) -> Layout | None:
        if self.size == 0 or not self.is_contiguous:
            return None
        return Layout(self.root, self.offset, tuple(shape), contiguous_strides(shape))

    def transpose(self, perm: tuple[int, ...]) -> Layout:
        return Layout(self.root, self.offset, tuple(self.shape[p] for p in perm),
                      tuple(self.strides[p] for p in perm))

    def broadcast(self, shape: Shape, static_in: tuple | None = None,
                  static_out: tuple | None = None) -> Layout:
        """Broadcast to ``shape``. A dim broadcast statically (size 1 in ``static_in``, not 1
        in ``static_out``) gets stride 0 even when the run-time target is 1 too, so that the
        layout, and the kernels specialized on it, do not depend on the batch size."""
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for i, (d, s) in enumerate(zip(self.shape, self.strides)):
            static = (static_in is not None and static_out is not None
                      and static_in[i] == 1 and static_out[lead + i] != 1)
            strides.append(0 if d == 1 and (shape[lead + i] != 1 or static) else s)
        return Layout(self.root, self.offset, tuple(shape), tuple(strides))

    def expand_dims(self, axes: tuple[int, ...]) -> Layout:
        shape, strides = list(self.shape), list(self.strides)
        for a in axes:
            shape.insert(a, 1)
            strides.insert(a, 0)
        return Layout(self.root, self.offset, tuple(shape), tuple(strides))

    def squeeze(self, axes: tuple[int, ...]) -> Layout:
        keep = [i for i in range(len(self.shape)) if i not in axes]
        return Layout(self.root, self.offset, tuple(self.shape[i] for i in keep),
                      tuple(self.strides[i] for i in keep))

    def slice(self, spec: tuple) -> Layout:
        offset = self.offset
        shape, strides = [], []
        for d, s, (start, stop, step) in zip(self.shape, self.strides, spec):
            r = range(*slice(start, stop, step).indices(d))
            if len(r):
                offset += r.start * s
            shape.append(len(r))
            strides.append(s * r.step)
        return Layout(self.root, offset, tuple(shape), tuple(strides))


def fresh(root: int, shape: Shape) -> Layout:
    return Layout(root, 0, tuple(int(d) for d in shape), contiguous_strides(shape))


def as_array(flat: np.ndarray, layout: Layout) -> np.ndarray:
    """The NumPy view of ``layout`` on its flat (1-D, contiguous) root array."""
    item = flat.itemsize
    if layout.is_contiguous and all(s >= 0 for s in layout.strides):
        return flat[layout.offset:layout.offset + layout.size].reshape(layout.shape)
    return np.lib.stride_tricks.as_strided(
        flat[layout.offset:], shape=layout.shape,
        strides=tuple(s * item for s in layout.strides))


# ---- loop nests for generated elementwise / reduction kernels ---------------------------------
@dataclass(frozen=True)
class LoopNest:
    """A coalesced iteration space: ``sizes`` and, per operand (output first), strides."""

    sizes: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    padded: int = 0  # leading size-1 dims added to reach min_rank

    @property
    def rank(self) -> int:
        return len(self.sizes)


def loop_nest(sizes: Shape, strides: list[tuple[int, ...]], drop: tuple[bool, ...],
              min_rank: int = 1) -> LoopNest:
    """Coalesces an iteration space.

    Args:
        sizes: the iteration shape.
        strides: per operand (output first), its stride along each iteration dim (0 where it
            is broadcast or, for a reduction's output, reduced).
        drop: per dim, whether it may be dropped (statically of size 1, so the result does not
            depend on the batch size).
        min_rank: pad with leading size-1 dims up to this rank (fewer kernel variants).

    Adjacent dims merge when every operand steps through them as through one dim; the rule
    depends only on contiguity and broadcasting, not on sizes, so a new batch size gives the
    same nest shape (and the same compiled kernel).
    """
    dims = [(n, [s[i] for s in strides]) for i, n in enumerate(sizes) if not drop[i]]
    merged: list[tuple[int, list[int]]] = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(ps == s * n for ps, s in zip(pst, st)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    padded = max(0, min_rank - len(merged))
    merged = [(1, [0] * len(strides))] * padded + merged
    return LoopNest(tuple(n for n, _ in merged),
                    tuple(tuple(st[k] for _, st in merged) for k in range(len(strides))),
                    padded)
