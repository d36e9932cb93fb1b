"""The sliding-window arithmetic of convolution and pooling (TensorFlow padding), written once.

:func:`window` is the rule every backend uses (the shape rules in ``conv.py`` and ``pool.py``,
the NumPy references, the CPU kernels' parameters, the CUDA kernels' geometry):
``"valid"`` gives ``out = (size - keff) // stride + 1`` with ``keff = (k - 1) * dilation + 1``;
``"same"`` gives ``out = ceil(size / stride)`` with
``pad_total = max((out - 1) * stride + keff - size, 0)`` and ``pad_before = pad_total // 2``
(the odd pixel goes after).

Also here: the attribute checks the conv and pool ops share, and the NumPy building blocks of
their references (an im2col over the kernel positions, each a strided slice of the padded
input, and its scatter-add transpose).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from kiln.core.ir import Dim, Node, TensorType
from kiln.core.ops._rules import fmt

Pair = tuple[int, int]
PADDINGS = ("valid", "same")


def dim_pair(dims: tuple[Dim, ...]) -> tuple[Dim, Dim]:
    """The first two of ``dims`` (e.g. ``shape[1:3]``, a tensor's H and W) as a pair."""
    return dims[0], dims[1]


def int_pair(dims: tuple[Dim, ...], op: str = "conv2d") -> Pair:
    """The first two of ``dims`` as ints; a clear error where one is unknown."""
    a, b = dims[0], dims[1]
    if a is None or b is None:
        raise ValueError(f"{op}: needs static sizes here, received {fmt(dims)}")
    return a, b


def window(size: Dim, k: int, stride: int, dilation: int, padding: str, *, op: str = "conv2d",
           what: str = "kernel") -> tuple[Dim, int, int]:
    """Output length and padding of one spatial axis.

    Args:
        size: the input length (None when unknown).
        k: the window (kernel or pool) length.
        stride: the step between windows.
        dilation: the step between a window's taps.
        padding: ``"valid"`` or ``"same"``.
        op: the op named in errors.
        what: what the window is called in errors (``"kernel"``, ``"pool"``).

    Returns:
        ``(out, pad_before, pad_after)``; ``(None, 0, 0)`` for an unknown size.

    Raises:
        ValueError: with ``"valid"``, a (dilated) window larger than the input.

    Example:
        >>> window(28, 3, 2, 1, "same")
        (14, 0, 1)
    """
    keff = (k - 1) * dilation + 1
    if size is None:
        return None, 0, 0
    if padding == "valid":
        if size < keff:
            dil = f" (dilated to {keff})" if dilation > 1 else ""
            raise ValueError(f"{op}: {what} size {k}{dil} is larger than the input size {size} "
                             "with padding 'valid'")
        return (size - keff) // stride + 1, 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + keff - size, 0)
    return out, total // 2, total - total // 2


def window2d(hw: tuple[Dim, Dim], k: Pair, strides: Pair, dilation: Pair, padding: str, *,
             op: str = "conv2d", what: str = "kernel"
             ) -> tuple[tuple[Dim, Dim], tuple[Pair, Pair]]:
    """:func:`window` along both spatial axes: ``((OH, OW), ((top, bottom), (left, right)))``."""
    oh, t, b = window(hw[0], k[0], strides[0], dilation[0], padding, op=op, what=what)
    ow, left, r = window(hw[1], k[1], strides[1], dilation[1], padding, op=op, what=what)
    return (oh, ow), ((t, b), (left, r))


# ---- checks shared by the conv and pool ops -----------------------------------------------------
def check_attrs(op: str, strides: Any, padding: Any, dilation: Any = (1, 1)) -> None:
    for name, v in (("strides", strides), ("dilation", dilation)):
        if (not isinstance(v, tuple) or len(v) != 2
                or not all(isinstance(i, int) and i >= 1 for i in v)):
            raise ValueError(f"{op}: {name} must be a pair of positive ints, received {v!r}")
    if padding not in PADDINGS:
        raise ValueError(f"{op}: padding must be 'valid' or 'same', received {padding!r}")


def rank4(op: str, what: str, t: TensorType) -> None:
    if t.ndim != 4:
        raise ValueError(f"{op}: {what} must have rank 4, received shape {fmt(t.shape)}")


def same(a: Dim, b: Dim) -> bool:
    """Whether two dims can be equal (an unknown dim matches anything)."""
    return a is None or b is None or a == b


# ---- builder arguments --------------------------------------------------------------------------
def int_tuple(op: str, name: str, value: Any, n: int) -> tuple[int, ...]:
    """An int or a length-``n`` sequence of positive ints, as a tuple of ``n`` ints."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        out = (int(value),) * n
    else:
        try:
            out = tuple(int(v) for v in value)
        except TypeError:
            raise TypeError(f"{op}: {name} must be an int or a sequence of {n} ints, received "
                            f"{value!r}") from None
    if len(out) != n or any(v < 1 for v in out):
        raise ValueError(f"{op}: {name} must be a positive int or {n} positive ints, received "
                         f"{value!r}")
    return out


def padding_arg(op: str, padding: Any, allowed: tuple[str, ...] = PADDINGS) -> str:
    p = padding.lower() if isinstance(padding, str) else padding
    if p not in allowed:
        raise ValueError(f"{op}: padding must be one of {', '.join(map(repr, allowed))}, "
                         f"received {padding!r}")
    return p


def check_rank(op: str, what: str, t: Node, n: int) -> None:
    if t.ndim != n:
        raise ValueError(f"{op}: {what} must have rank {n}, received shape {fmt(t.shape)}")


# ---- NumPy building blocks of the references ----------------------------------------------------
def pad_hw(x: np.ndarray, pads: tuple[Pair, Pair], value: float = 0.0) -> np.ndarray:
    if pads == ((0, 0), (0, 0)):
        return x
    return np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=value)


def slices(oh: int, ow: int, k: Pair, strides: Pair,
           dilation: Pair) -> Iterator[tuple[slice, slice, slice, slice]]:
    """For each kernel position (row-major), the slice of the padded input it reads."""
    (sh, sw), (dh, dw) = strides, dilation
    for a in range(k[0]):
        for b in range(k[1]):
            yield (slice(None), slice(a * dh, a * dh + (oh - 1) * sh + 1, sh),
                   slice(b * dw, b * dw + (ow - 1) * sw + 1, sw), slice(None))


def im2col(xp: np.ndarray, oh: int, ow: int, k: Pair, strides: Pair,
           dilation: Pair) -> np.ndarray:
    """(N, OH, OW, kh * kw * C) patches, ordered like a (kh, kw, C, ...) kernel."""
    cols = np.stack([xp[s] for s in slices(oh, ow, k, strides, dilation)], axis=3)
    # the patch size is explicit: a -1 cannot be resolved when the array has no elements
    return cols.reshape(xp.shape[0], oh, ow, k[0] * k[1] * xp.shape[3])


def col2im(cols: np.ndarray, padded_hw: Pair, pads: tuple[Pair, Pair], oh: int, ow: int,
           k: Pair, strides: Pair, dilation: Pair) -> np.ndarray:
    """Scatter-adds (N, OH, OW, kh, kw, C) patches back into the (cropped) input image."""
    n, c = cols.shape[0], cols.shape[-1]
    out = np.zeros((n, padded_hw[0], padded_hw[1], c), dtype=cols.dtype)
    for i, s in enumerate(slices(oh, ow, k, strides, dilation)):
        out[s] += cols[:, :, :, i // k[1], i % k[1], :]
    return crop_hw(out, pads)


def crop_hw(x: np.ndarray, pads: tuple[Pair, Pair]) -> np.ndarray:
    """The inverse of :func:`pad_hw`."""
    (t, b), (left, r) = pads
    return x[:, t:x.shape[1] - b, left:x.shape[2] - r, :]
