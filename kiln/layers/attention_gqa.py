"""Grouped-query attention (Keras' ``GroupQueryAttention``, class ``GroupedQueryAttention``):
multi-head attention whose ``num_key_value_heads`` key/value heads are each shared by
``num_query_heads / num_key_value_heads`` query heads."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import positive_int
from kiln.layers.attention import MultiHeadAttention, _dropout
from kiln.layers.base import get_mask
from kiln.layers.einsum_dense import EinsumDense, _err, _serialized
from kiln.registry import register_builtin


class GroupedQueryAttention(MultiHeadAttention):
    """Grouped-query attention over ``(batch, steps, features)`` (Keras'
    ``GroupQueryAttention``).

    The query is projected to ``num_query_heads`` heads of ``head_dim``, key and value to
    ``num_key_value_heads`` heads; each key/value head is repeated for its group of query
    heads, ``softmax(q k^T / sqrt(head_dim))`` weighs the values, and the heads are projected
    back to the query's features. Weights (Keras' order): ``query`` (features, Nq, head_dim),
    ``key`` and ``value`` (features, Nkv, head_dim), ``gate`` (with ``use_gate``) and
    ``attention_output`` (Nq, head_dim, features), each with a bias when ``use_bias``.

    Args:
        head_dim: size of each head.
        num_query_heads: number of query heads.
        num_key_value_heads: number of key/value heads (divides ``num_query_heads``).
        dropout: dropout rate on the attention probabilities (default 0).
        use_bias: biases on the projections (default True).
        sliding_window: None, or attend only to keys within ``sliding_window - 1`` steps.
        flash_attention: None or False (plain attention); True is refused.
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        activity_regularizer, kernel_constraint, bias_constraint: as in MultiHeadAttention.
        use_gate: multiply the attention output by ``sigmoid(gate(query))`` before the output
            projection (default False).
        seed: optional int selecting the dropout stream.

    Call: ``layer(query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
    attention_mask=None, return_attention_scores=False, training=None,
    use_causal_mask=False)``, masks as in MultiHeadAttention.

    Example:
        >>> gqa = kiln.layers.GroupQueryAttention(head_dim=16, num_query_heads=8,
        ...                                       num_key_value_heads=2)
        >>> y = gqa(x, x)
    """

    def __init__(self, head_dim: int, num_query_heads: int, num_key_value_heads: int,
                 dropout: float = 0.0, use_bias: bool = True, sliding_window: int | None = None,
                 flash_attention: bool | None = None,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, use_gate: bool = False, seed: int | None = None,
                 **kwargs: Any):
        who = "GroupQueryAttention"
        # kiln always computes plain attention: None and False (Keras' "never flash") mean
        # that; True would ask for a kernel kiln does not have, so it is refused, not ignored
        if flash_attention not in (None, False):
            raise ValueError(f"{who}: flash_attention={flash_attention!r} is not supported by "
                             f"kiln (only None or False: kiln has no flash attention kernel)")
        positive_int(who, "num_key_value_heads", num_key_value_heads)
        positive_int(who, "num_query_heads", num_query_heads)
        if num_query_heads % num_key_value_heads:
            raise ValueError(f"{who}: `num_query_heads` must be divisible by "
                             f"`num_key_value_heads`, received num_query_heads="
                             f"{num_query_heads}, num_key_value_heads={num_key_value_heads}")
        if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(
                sliding_window, int) or sliding_window <= 0):
            raise ValueError(f"{who}: `sliding_window` must be `None` or a positive integer. "
                             f"Received: sliding_window={sliding_window!r}")
        super().__init__(num_query_heads, head_dim, dropout=dropout, use_bias=use_bias,
                         kernel_initializer=kernel_initializer,
                         bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer,
                         bias_regularizer=bias_regularizer,
                         activity_regularizer=activity_regularizer,
                         kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
                         seed=seed, **kwargs)
        self.head_dim = int(head_dim)
        self.num_query_heads = int(num_query_heads)
        self.num_key_value_heads = int(num_key_value_heads)
        self.num_repeats = self.num_query_heads // self.num_key_value_heads
        self.sliding_window = sliding_window
        self.use_gate = bool(use_gate)

    def _proj(self, name: str, equation: str, out: tuple, bias: str, shape: tuple,
              activation: Any = None) -> EinsumDense:
        layer = EinsumDense(
            equation, (None,) + out, bias_axes=bias if self.use_bias else None, name=name,
            activation=activation, kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer, kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            activity_regularizer=self.activity_regularizer, dtype=self.dtype,
            kernel_constraint=self.kernel_constraint, bias_constraint=self.bias_constraint)
        layer.build(shape)
        return layer

    def build(self, query_shape: Any, value_shape: Any = None, key_shape: Any = None) -> None:
        if value_shape is None:
            raise _err(self, "build needs query_shape and value_shape")
        q, v = tuple(query_shape), tuple(value_shape)
        k = v if key_shape is None else tuple(key_shape)
        self._check_shapes(q, v, k)
        if len(q) != 3:
            raise _err(self, f"expects rank-3 inputs (batch, steps, features), received query "
                       f"{format_shape(q)}")
        nq, nkv, h = self.num_query_heads, self.num_key_value_heads, self.head_dim
        self.query_dense = self._proj("query", "bqm,muh->bquh", (nq, h), "uh", q)
        self.key_dense = self._proj("key", "bkm,mvh->bkvh", (nkv, h), "vh", k)
        self.gate_dense = self._proj("gate", "bqm,muh->bquh", (nq, h), "uh", q,
                                     "sigmoid") if self.use_gate else None
        self.value_dense = self._proj("value", "bkm,mvh->bkvh", (nkv, h), "vh", v)
        self.output_dense = self._proj("attention_output", "bquh,uhm->bqm", (q[-1],), "m",
                                       (None, None, nq, h))
        for name in ("query_dense", "key_dense", "gate_dense", "value_dense", "output_dense"):
            self.__dict__[name] = self.__dict__.pop(name)  # Keras' weight order
        self.build_input_shape = {"query_shape": q, "value_shape": v,
                                  **({} if key_shape is None else {"key_shape": k})}
        self.built = True

    def call(self, query: Node, value: Node, key: Node | None = None, query_mask: Any = None,
             value_mask: Any = None, key_mask: Any = None, attention_mask: Any = None,
             return_attention_scores: bool = False, training: bool | None = None,
             use_causal_mask: bool = False) -> Any:
        query_mask = get_mask(query) if query_mask is None else query_mask
        value_mask = get_mask(value) if value_mask is None else value_mask
        key_mask = get_mask(key) if key_mask is None and key is not None else key_mask
        mask = self._attention_mask(query, value, use_causal_mask, query_mask=query_mask,
                                    value_mask=value_mask, key_mask=key_mask,
                                    attention_mask=attention_mask)
        if self.sliding_window is not None:
            t, s = query.shape[1], value.shape[1]
            if t is None or s is None:
                raise _err(self, "sliding_window needs known query and value lengths, received "
                           f"query {format_shape(query.shape)} and value "
                           f"{format_shape(value.shape)}")
            band = np.abs(np.arange(t)[:, None] - np.arange(s)[None, :]) < self.sliding_window
            band = K.constant(band[None])
            mask = band if mask is None else K.logical_and(mask, band)
        q = self.query_dense.call(query)                        # (B, T, Nq, h)
        k = self.key_dense.call(value if key is None else key)  # (B, S, Nkv, h)
        v = self.value_dense.call(value)
        if self.num_repeats > 1:
            k = K.repeat(k, self.num_repeats, axis=2)
            v = K.repeat(v, self.num_repeats, axis=2)
        q = q * K.constant(1.0 / math.sqrt(float(self.head_dim)), q.dtype)
        scores = K.einsum("bquh,bkuh->buqk", q, k)
        if mask is not None:
            mask = K.expand_dims(mask, 1) if mask.ndim == 3 else mask
            big = -65504.0 if scores.dtype == "float16" else -1e9
            scores = K.where(mask, scores, K.constant(big, scores.dtype))
        probs = K.softmax(scores, axis=-1)
        if mask is not None:
            probs = probs * K.cast(mask, probs.dtype)
        out = K.einsum("buqk,bkuh->bquh", _dropout(self, probs, training), v)
        if self.gate_dense is not None:
            out = out * self.gate_dense.call(query)
        out = self.output_dense.call(out)
        return (out, probs) if return_attention_scores else out

    def compute_output_shape(self, query_shape: Any, value_shape: Any = None,
                             key_shape: Any = None) -> tuple:
        return tuple(query_shape)

    def get_config(self) -> dict:
        config = super().get_config()
        for k in ("num_heads", "key_dim", "value_dim", "output_shape", "attention_axes"):
            config.pop(k, None)
        config.update({"head_dim": self.head_dim, "num_query_heads": self.num_query_heads,
                       "num_key_value_heads": self.num_key_value_heads,
                       "use_gate": self.use_gate, "sliding_window": self.sliding_window,
                       **_serialized(self)})
        return config


GroupQueryAttention = GroupedQueryAttention  # Keras' public name
register_builtin("GroupedQueryAttention", GroupedQueryAttention)  # the class name in configs
