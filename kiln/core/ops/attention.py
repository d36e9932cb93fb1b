"""Scaled dot-product attention, as a composition of existing ops (matmul, softmax, where ...):
every backend runs it and autodiff differentiates it. Semantics of ``keras.ops``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kiln.core.ir import Node
from kiln.core.ops._rules import as_node, as_nodes, broadcast_shapes, fmt, require_float
from kiln.core.ops.elementwise import BUILDERS as _EW
from kiln.core.ops.elementwise import cast, where
from kiln.core.ops.linalg import matmul
from kiln.core.ops.movement import broadcast_to, expand_dims, reshape, transpose
from kiln.core.ops.nn import softmax
from kiln.core.ops.source import constant

_not_equal = _EW["not_equal"]
_logical_and = _EW["logical_and"]


def large_negative(dtype: str) -> float:
    """The logit given to masked positions: ``-0.7 * finfo(dtype).max`` (as JAX and Keras);
    finite, so a fully masked row softmaxes to a uniform row, never NaN."""
    return float(-0.7 * np.finfo(np.dtype(dtype)).max)


def as_bool_mask(mask: Any) -> Node:
    """A boolean mask from a bool or numeric tensor / array (nonzero means True)."""
    m = as_node(mask)
    if m.dtype == "bool":
        return m
    return _not_equal(m, constant(np.zeros((), m.dtype)))


def causal_mask(t: int | None, s: int | None, who: str = "dot_product_attention") -> Node:
    """The ``(t, s)`` lower-triangular boolean mask (query i sees keys j <= i)."""
    if t is None or s is None:
        raise ValueError(f"{who}: a causal mask needs known query and key lengths, received "
                         f"T={t} and S={s}")
    return constant(np.tril(np.ones((t, s), dtype=bool)))


def _check(name: str, shape: tuple, want: tuple, what: str) -> None:
    try:
        out = broadcast_shapes(name, shape, want)
    except ValueError:
        out = None
    if out is None or len(shape) > len(want) or any(
            o is not None and w is not None and o != w for o, w in zip(out, want)):
        raise ValueError(f"dot_product_attention: {what} of shape {fmt(shape)} does not "
                         f"broadcast to the logits' shape (B, N, T, S) = {fmt(want)}")


def dot_product_attention(query: Any, key: Any, value: Any, bias: Any = None, mask: Any = None,
                          scale: float | None = None, is_causal: bool = False) -> Node:
    """Scaled dot-product attention, ``softmax(q k^T * scale + bias, masked) v``, with
    ``keras.ops.dot_product_attention``'s shapes and semantics.

    Args:
        query: ``(B, T, N, H)``.
        key: ``(B, S, K, H)``; ``K`` key/value heads with ``N % K == 0`` (grouped-query
            attention: each key head serves ``N // K`` query heads).
        value: ``(B, S, K, H)``.
        bias: optional, added to the logits; broadcasts to ``(B, N, T, S)``.
        mask: optional boolean (or 0/1) tensor broadcasting to ``(B, N, T, S)``; True keeps a
            position, False gives it the logit ``-0.7 * finfo.max`` (a fully masked row
            becomes a uniform distribution, never NaN).
        scale: multiplies the logits (default ``1 / sqrt(H)``).
        is_causal: also mask keys after the query position (lower-triangular ``(T, S)`` mask;
            needs static T and S).

    Returns:
        ``(B, T, N, H)``.

    Example:
        >>> out = kiln.ops.dot_product_attention(q, k, v, is_causal=True)
    """
    q, k, v = as_nodes("dot_product_attention", query, key, value)
    require_float("dot_product_attention", q, k, v)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("dot_product_attention: query, key and value must be 4-D (B, T, N, H) "
                         f"/ (B, S, K, H), received {fmt(q.shape)}, {fmt(k.shape)} and "
                         f"{fmt(v.shape)}")
    shapes = f"query {fmt(q.shape)}, key {fmt(k.shape)}, value {fmt(v.shape)}"
    if q.shape[-1] is not None and k.shape[-1] is not None and q.shape[-1] != k.shape[-1]:
        raise ValueError(f"dot_product_attention: query and key head sizes differ ({shapes})")
    for a, b, what in ((k.shape[1], v.shape[1], "key and value lengths"),
                       (k.shape[2], v.shape[2], "key and value head counts"),
                       (q.shape[0], k.shape[0], "batch sizes"),
                       (k.shape[0], v.shape[0], "batch sizes")):
        if a is not None and b is not None and a != b and 1 not in (a, b):
            raise ValueError(f"dot_product_attention: {what} differ ({shapes})")
    n, kh = q.shape[2], k.shape[2]
    if n is None or kh is None:
        raise ValueError(f"dot_product_attention: the head counts must be known ({shapes})")
    if n % kh:
        raise ValueError(f"dot_product_attention: the query heads ({n}) must be a multiple of "
                         f"the key/value heads ({kh}) ({shapes})")
    if kh != n:  # grouped-query attention: repeat each key/value head N // K times
        k, v = (_repeat_heads(x, n // kh) for x in (k, v))
    if scale is None:
        if q.shape[-1] is None:
            raise ValueError(f"dot_product_attention: the default scale needs a known head "
                             f"size ({shapes})")
        scale = 1.0 / math.sqrt(q.shape[-1])
    qt = transpose(q, (0, 2, 1, 3))                     # (B, N, T, H)
    kt = transpose(k, (0, 2, 3, 1))                     # (B, N, H, S)
    logits = matmul(qt, kt) * constant(np.asarray(scale, q.dtype))   # (B, N, T, S)
    want = tuple(logits.shape)
    if bias is not None:
        bias_t = as_node(bias, q.dtype)
        _check("dot_product_attention", tuple(bias_t.shape), want, "bias")
        logits = logits + cast(bias_t, q.dtype)
    keep = None
    if mask is not None:
        keep = as_bool_mask(mask)
        _check("dot_product_attention", tuple(keep.shape), want, "mask")
    if is_causal:
        c = causal_mask(want[2], want[3])
        keep = c if keep is None else _logical_and(keep, c)
    if keep is not None:
        logits = where(keep, logits, constant(np.asarray(large_negative(q.dtype), q.dtype)))
    probs = softmax(logits, axis=-1)
    out = matmul(probs, transpose(v, (0, 2, 1, 3)))     # (B, N, T, H)
    return transpose(out, (0, 2, 1, 3))


def _repeat_heads(x: Node, g: int) -> Node:
    """(B, S, K, H) -> (B, S, K * g, H), each head repeated g times (adjacent)."""
    b, s, kh, h = x.shape
    full = (b, s, kh, g, h)
    if sum(d is None for d in full) > 1:
        raise ValueError(f"dot_product_attention: grouped-query attention needs at most one "
                         f"unknown dimension in key/value, received {fmt(x.shape)}")
    y = expand_dims(x, 3)
    if None in full:
        # broadcast_to needs a static shape: multiply by ones instead
        y = y * constant(np.ones((g, 1), x.dtype))
    else:
        y = broadcast_to(y, full)
    heads = None if kh is None else kh * g
    return reshape(y, [-1 if d is None else d for d in (b, s, heads, h)])
