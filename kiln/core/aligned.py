"""Host arrays whose first element starts a cache line (docs/architecture.md, "Planning").

NumPy's arrays start where ``malloc`` puts them: a large one 16 bytes past a page, a small
one at any multiple of 16. A kernel's 64-byte vector loads from such an array then straddle
two cache lines one time in one (AVX-512) or two (AVX2); the Dense kernel's loads of a
784 x 512 weight matrix did so at every row. kiln allocates what it owns this way: the
Variables' values (``Variable.__init__``), a CPU plan's buffers (``runtime/poison.py``) and
the kernels' own scratch and layouts (padded inputs, im2col columns, Winograd tiles, packed
weights): a copy between two arrays at different offsets in their cache lines runs slower
(:func:`zeros`). A user's arrays (feeds) are read where they are.

An array of :data:`HUGE_MIN` bytes or more starts a 2 MiB page instead. Its byte buffer is
then 4 MiB or more, which NumPy asks Linux to back with transparent huge pages
(``madvise(MADV_HUGEPAGE)``, NumPy's ``NUMPY_MADVISE_HUGEPAGE``), and every 2 MiB of the
array lies in one: a buffer starting anywhere in a page holds one aligned 2 MiB stretch
fewer, so which of a plan's buffers had huge pages changed from process to process. The
padded copies of the dilated causal Conv1D step took 1,173 and 1,107 us where they fell in
4 KiB pages, 741 and 819 us in huge pages (docs/performance.md). Only the address space
grows (up to 2 MiB an array): the pages before the start are never touched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALIGN = 64  # bytes: a cache line, and an AVX-512 vector
HUGE_PAGE = 2 << 20  # bytes: a transparent huge page (x86-64; arm64 with 4 KiB pages)
HUGE_MIN = HUGE_PAGE  # arrays of this many bytes or more start a huge page


def empty(shape: Any, dtype: Any, align: int = ALIGN) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data start at a multiple of ``align`` bytes (a view
    of a slightly larger byte buffer, which it keeps alive), of :data:`HUGE_PAGE` bytes from
    :data:`HUGE_MIN` bytes; plain ``np.empty`` for object, string and other non-numeric
    dtypes."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    if dtype.kind not in "biufcmM" or dtype.hasobject:
        return np.empty(shape, dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes >= HUGE_MIN:
        align = max(align, HUGE_PAGE)
    raw = np.empty(nbytes + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def zeros(shape: Any, dtype: Any, align: int = ALIGN) -> np.ndarray:
    """``np.zeros(shape, dtype)`` whose data start at a multiple of ``align`` bytes: a
    kernel's zero-bordered copy of a plan buffer (a convolution's padded input) starts where
    the buffer does, modulo a cache line. A copy between arrays at different offsets in
    their lines runs slower: a (32, 512, 32) float32 cotangent into the interior of its
    padded buffer, from a 64-byte-aligned buffer, 145 us into a line-aligned interior against
    194 us 16 bytes off (2-core Zen 4, cold caches; docs/performance.md)."""
    out = empty(shape, dtype, align)
    out.fill(0)
    return out


def copy(value: Any, dtype: Any) -> np.ndarray:
    """A C-ordered copy of ``value`` as ``dtype`` in an :func:`empty` array."""
    src = np.asarray(value, dtype=dtype)
    out = empty(src.shape, src.dtype)
    np.copyto(out, src, casting="unsafe")
    return out
