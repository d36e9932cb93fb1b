"""Memory layouts: where a tensor's elements live in a flat storage root (every backend).

A :class:`Layout` is ``(root, offset, shape, strides)``, offset and strides in elements, over a
flat 1-D buffer called ``root`` (an integer the planner hands out: host array or device array,
the layout does not care). Kernel results are fresh contiguous layouts; movement ops declare a
view rule on their ``OpDef`` (``OpDef.view``) that computes a new layout of the same root
(reshape of contiguous data, transpose, broadcast, slice, expand/squeeze): no copy. Kernels
read any layout through its root, so transposed, sliced and broadcast inputs cost nothing.

Two ways to turn layouts into a kernel's iteration space live here too:

* :func:`loop_nest` (the CPU's generated loops) drops only dims that are statically 1 and
  pads to a minimum rank, so a new batch size never changes the nest's rank (nor the kernel);
* :func:`coalesce` (the CUDA kernels, which take sizes as arguments) drops every size-1 dim.

See docs/architecture.md, "Planning".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Shape = tuple[int, ...]


def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    """C-order strides, in elements, of a ``shape`` array."""
    strides = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


def prod(shape: Shape) -> int:
    """The number of elements of ``shape`` (a Python int)."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


@dataclass(frozen=True)
class Layout:
    """A strided view of storage ``root``, in elements."""

    root: int
    offset: int
    shape: Shape
    strides: tuple[int, ...]

    @staticmethod
    def fresh(root: int, shape: Shape) -> Layout:
        """A contiguous layout of all of ``root``."""
        shape = tuple(int(d) for d in shape)
        return Layout(root, 0, shape, contiguous_strides(shape))

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous from ``offset`` (size-1 dims may have any stride)."""
        expect = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d != 1 and s != expect:
                return False
            expect *= d
        return True

    def same_view(self, other: Layout) -> bool:
        """The same elements in the same order (root aside)."""
        return (self.offset == other.offset and self.shape == other.shape
                and self.strides == other.strides)

    def span(self) -> tuple[int, int]:
        """The lowest and highest element index touched (empty views: (offset, offset))."""
        if self.size == 0:
            return self.offset, self.offset
        lo = hi = self.offset
        for d, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (d - 1) * s
            else:
                lo += (d - 1) * s
        return lo, hi

    # ---- movement ops as layout arithmetic (None: this case needs a copy) -----------------------
    def reshape(self, shape: Shape) -> Layout | None:
        if self.size == 0 or not self.is_contiguous:
            return None
        shape = tuple(int(d) for d in shape)
        return Layout(self.root, self.offset, shape, contiguous_strides(shape))

    def transpose(self, perm: tuple[int, ...]) -> Layout:
        return Layout(self.root, self.offset, tuple(self.shape[p] for p in perm),
                      tuple(self.strides[p] for p in perm))

    def broadcast(self, shape: Shape, static_in: tuple | None = None,
                  static_out: tuple | None = None) -> Layout:
        """NumPy broadcasting to ``shape`` (stride 0 along broadcast dims). A dim broadcast
        statically (size 1 in ``static_in``, not 1 in ``static_out``) gets stride 0 even when
        the run-time target is 1 too, so that the layout, and the kernels specialized on it, do
        not depend on the batch size."""
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for i, (d, s) in enumerate(zip(self.shape, self.strides)):
            static = (static_in is not None and static_out is not None
                      and static_in[i] == 1 and static_out[lead + i] != 1)
            strides.append(0 if d == 1 and (shape[lead + i] != 1 or static) else s)
        return Layout(self.root, self.offset, tuple(shape), tuple(strides))

    def expand_dims(self, axes: tuple[int, ...]) -> Layout:
        """New size-1 dims at ``axes`` (sorted positions in the result)."""
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
        """``spec``: per dim ``(start, stop, step)`` as Python's ``slice`` takes them."""
        offset = self.offset
        shape, strides = [], []
        for d, s, (start, stop, step) in zip(self.shape, self.strides, spec):
            r = range(*slice(start, stop, step).indices(d))
            if len(r):
                offset += r.start * s
            shape.append(len(r))
            strides.append(s * r.step)
        return Layout(self.root, offset, tuple(shape), tuple(strides))


def as_array(flat: np.ndarray, layout: Layout) -> np.ndarray:
    """The NumPy view of ``layout`` on its flat (1-D, contiguous) root array."""
    item = flat.itemsize
    if layout.is_contiguous and all(s >= 0 for s in layout.strides):
        return flat[layout.offset:layout.offset + layout.size].reshape(layout.shape)
    return np.lib.stride_tricks.as_strided(
        flat[layout.offset:], shape=layout.shape,
        strides=tuple(s * item for s in layout.strides))


# ---- iteration spaces ---------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopNest:
    """A coalesced iteration space: ``sizes`` and, per operand (output first), strides."""

    sizes: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]
    padded: int = 0  # leading size-1 dims added to reach min_rank

    @property
    def rank(self) -> int:
        return len(self.sizes)


def _merge(dims: list[tuple[int, list[int]]]) -> list[tuple[int, list[int]]]:
    """Merges adjacent (size, per-operand strides) dims that every operand walks as one."""
    merged: list[tuple[int, list[int]]] = []
    for n, st in dims:
        if merged:
            pn, pst = merged[-1]
            if all(ps == s * n for ps, s in zip(pst, st)):
                merged[-1] = (pn * n, st)
                continue
        merged.append((n, st))
    return merged


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
    merged = _merge([(n, [s[i] for s in strides]) for i, n in enumerate(sizes) if not drop[i]])
    padded = max(0, min_rank - len(merged))
    merged = [(1, [0] * len(strides))] * padded + merged
    return LoopNest(tuple(n for n, _ in merged),
                    tuple(tuple(st[k] for _, st in merged) for k in range(len(strides))),
                    padded)


def coalesce(shape: Shape, strides_list: list[tuple[int, ...]]
             ) -> tuple[Shape, list[tuple[int, ...]]]:
    """Drops every size-1 dim and merges adjacent dims that every stride tuple walks as one.

    Returns the new shape and stride tuples (an empty shape for a single element).
    """
    nest = loop_nest(shape, list(strides_list), tuple(d == 1 for d in shape), 0)
    return nest.sizes, [tuple(s) for s in nest.strides]
