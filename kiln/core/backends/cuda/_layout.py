"""Strided views of flat device buffers: movement ops without copies.

A :class:`Layout` is ``(root, offset, shape, strides)``, in elements, over a flat 1-D device
buffer ``root``. Kernel outputs are fresh contiguous layouts; reshape (of contiguous data),
transpose, broadcast, expand_dims, squeeze and slice are new layouts of the same root. The
generated kernels read any layout (zero, negative and permuted strides included).
"""

from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, ...]


def contiguous_strides(shape: Shape) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(out))


def prod(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


@dataclass(frozen=True)
class Layout:
    root: int
    offset: int
    shape: Shape
    strides: tuple[int, ...]

    @staticmethod
    def fresh(root: int, shape: Shape) -> Layout:
        return Layout(root, 0, tuple(shape), contiguous_strides(tuple(shape)))

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

    # ---- movement ops as layout arithmetic (None: needs a copy first) ----------------------
    def reshape(self, shape: Shape) -> Layout | None:
        if not self.is_contiguous:
            return None
        return Layout(self.root, self.offset, tuple(shape), contiguous_strides(tuple(shape)))

    def transpose(self, perm: tuple[int, ...]) -> Layout:
        return Layout(self.root, self.offset, tuple(self.shape[p] for p in perm),
                      tuple(self.strides[p] for p in perm))

    def broadcast(self, shape: Shape) -> Layout:
        """NumPy broadcasting to ``shape`` (zero strides on broadcast axes)."""
        lead = len(shape) - self.ndim
        strides = [0] * lead
        for i, (d, s) in enumerate(zip(self.shape, self.strides)):
            strides.append(0 if d == 1 and shape[lead + i] != 1 else s)
        return Layout(self.root, self.offset, tuple(shape), tuple(strides))

    def expand(self, axes: tuple[int, ...]) -> Layout:
        shape, strides = list(self.shape), list(self.strides)
        for a in axes:  # sorted, positions in the result
            shape.insert(a, 1)
            strides.insert(a, 0)
        return Layout(self.root, self.offset, tuple(shape), tuple(strides))

    def squeeze(self, axes: tuple[int, ...]) -> Layout:
        keep = [i for i in range(self.ndim) if i not in axes]
        return Layout(self.root, self.offset, tuple(self.shape[i] for i in keep),
                      tuple(self.strides[i] for i in keep))

    def slice(self, spec: tuple) -> Layout:
        offset, shape, strides = self.offset, [], []
        for d, st, s in zip(self.shape, self.strides, spec):
            r = range(*slice(*s).indices(d))
            if len(r):
                offset += r.start * st
            shape.append(len(r))
            strides.append(st * r.step)
        return Layout(self.root, offset, tuple(shape), tuple(strides))


def coalesce(shape: Shape, strides_list: list[tuple[int, ...]]
             ) -> tuple[Shape, list[tuple[int, ...]]]:
    """Drops size-1 dims and merges adjacent dims that every stride tuple walks as one.

    Returns the new shape and stride tuples (an empty shape for a single element).
    """
    keep = [i for i, d in enumerate(shape) if d != 1]
    dims = [shape[i] for i in keep]
    sts = [[s[i] for i in keep] for s in strides_list]
    i = len(dims) - 2
    while i >= 0:
        if all(st[i] == st[i + 1] * dims[i + 1] for st in sts):
            dims[i] *= dims[i + 1]
            del dims[i + 1]
            for st in sts:
                st[i] = st[i + 1]
                del st[i + 1]
        i -= 1
    return tuple(dims), [tuple(st) for st in sts]
