"""Attention layers: EinsumDense, MultiHeadAttention, Attention (Luong), AdditiveAttention
(Bahdanau), with Keras 3's names, arguments, defaults and weight layouts. An eager call (on
arrays) packs every tensor argument, masks included, so all are fed as placeholders.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers._utils import positive_int, random_stream
from kiln.layers.base import Layer, get_mask, is_symbolic
from kiln.layers.context import current, in_training
from kiln.layers.einsum_dense import EinsumDense, _err, _init_weight_args, _serialized

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _dropout(layer: Any, x: Node, training: bool | None) -> Node:
    """Dropout of attention probabilities, as the Dropout layer: in training, in a trace with
    a random key; the stream is the layer's seed or the one drawn when it was constructed."""
    ctx = current()
    if layer.dropout == 0.0 or not in_training(training) or ctx is None or ctx.rng_key is None:
        return x
    return K.dropout(x, layer.dropout, ctx.rng_key, layer._stream or 0)


def _mask(layer: Layer, mask: Any, what: str, want: tuple, same_rank: bool = True) -> Node:
    """``mask`` as a bool tensor (nonzero = True), checked to broadcast to ``want``."""
    m = mask if isinstance(mask, Node) else K.constant(mask)
    shape = tuple(m.shape)
    if len(shape) > len(want) or (same_rank and len(shape) != len(want)) or not all(
            a is None or b is None or a == 1 or a == b for a, b in zip(shape[::-1], want[::-1])):
        raise _err(layer, f"{what} of shape {format_shape(shape)} does not broadcast to the "
                   f"expected shape {format_shape(want)}")
    return m if m.dtype == "bool" else K.not_equal(m, K.constant(0, m.dtype))


def _check_rate(who: str, dropout: Any) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:
        raise ValueError(f"{who}: dropout must be a float in [0, 1), received dropout={dropout!r}")
    return float(dropout)


# ---- EinsumDense -----------------------------------------------------------------------------
_MASKS = ("query_mask", "value_mask", "key_mask", "attention_mask")


class MultiHeadAttention(Layer):
    """Multi-head attention (Vaswani et al., 2017) with Keras 3's layout.

    EinsumDense sublayers project ``query (B, T, dim)``, ``value (B, S, dim_v)`` and ``key``
    (default ``value``) to ``(B, T|S, N, key_dim|value_dim)``; ``softmax(q k^T / sqrt(key_dim))``
    (masked) weighs the values; the output sublayer maps ``(B, T, N, value_dim)`` to
    ``(B, T, dim)`` (or ``output_shape``). Higher-rank inputs attend over all axes but the
    batch and features. Weights, in Keras' order: query kernel ``(dim, N, key_dim)`` and bias
    ``(N, key_dim)``, key, value, then output kernel ``(N, value_dim, dim)`` and bias
    ``(dim,)`` (sublayers ``query_dense`` ... ``output_dense``, named query, key, value,
    attention_output).

    Masks (True = attend) combine with AND as Keras' ``_compute_attention_mask``:
    ``query_mask (B, T)`` -> ``(B, T, 1)``, ``value_mask``/``key_mask (B, S)`` ->
    ``(B, 1, S)``, the causal ``(1, T, S)`` and ``attention_mask`` (broadcasting to
    ``(B, T, S)``). Masked scores get -1e9 and the probabilities are multiplied by the mask
    (Keras' masked Softmax): a query that sees no key gets zero probabilities, never NaN.

    Args:
        num_heads, key_dim: heads N and their query/key size; value_dim: default key_dim.
        dropout: rate on the attention probabilities (training only); seed: its stream.
        use_bias: biases in the projections. output_shape: default the query's last dim.
        attention_axes: None only (or the same axes spelled out). flash_attention: no effect.
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        activity_regularizer, kernel/bias_constraint: of the projections.

    Call: ``layer(query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
    attention_mask=None, return_attention_scores=False, training=None,
    use_causal_mask=False)``; with ``return_attention_scores`` also returns the probabilities
    ``(B, N, T, S)`` (before dropout).

    Example:
        >>> x = kiln.Input((16, 64))
        >>> y = kiln.layers.MultiHeadAttention(num_heads=4, key_dim=16)(x, x)
    """

    def __init__(self, num_heads: int, key_dim: int, value_dim: int | None = None,
                 dropout: float = 0.0, use_bias: bool = True, output_shape: Any = None,
                 attention_axes: Any = None, sliding_window: int | None = None,
                 flash_attention: bool | None = None,
                 kernel_initializer: Any = "glorot_uniform", bias_initializer: Any = "zeros",
                 kernel_regularizer: Any = None, bias_regularizer: Any = None,
                 activity_regularizer: Any = None, kernel_constraint: Any = None,
                 bias_constraint: Any = None, use_gate: bool = False, seed: int | None = None,
                 **kwargs: Any):
        # Keras 3.15 has these two; kiln has neither (gated attention, a banded mask): their
        # defaults load, other values are refused rather than ignored
        for arg, default, value in (("use_gate", False, use_gate),
                                    ("sliding_window", None, sliding_window)):
            if value != default:
                raise ValueError(f"MultiHeadAttention: {arg}={value!r} is not supported by "
                                 f"kiln (only the default {arg}={default!r})")
        super().__init__(**kwargs)
        for arg, v in (("num_heads", num_heads), ("key_dim", key_dim), ("value_dim", value_dim)):
            if v is not None or arg != "value_dim":
                positive_int("MultiHeadAttention", arg, v)
        self.dropout = _check_rate("MultiHeadAttention", dropout)
        _init_weight_args(self, locals())
        if isinstance(attention_axes, int):
            attention_axes = (attention_axes,)
        elif attention_axes is not None and not isinstance(attention_axes, list | tuple):
            raise ValueError(f"MultiHeadAttention: attention_axes must be an int, list, tuple "
                             f"or None, received attention_axes={attention_axes!r}")
        if isinstance(output_shape, int):
            output_shape = (output_shape,)
        self.num_heads, self.key_dim = int(num_heads), int(key_dim)
        self.value_dim = int(value_dim) if value_dim else self.key_dim
        self.use_bias = bool(use_bias)
        self._output_shape = tuple(int(d) for d in output_shape) if output_shape else None
        self.attention_axes = None if attention_axes is None else tuple(attention_axes)
        self.flash_attention = flash_attention
        self.seed = None if seed is None else int(seed)
        self._stream = random_stream(self.seed, self.dropout > 0)
        # the sublayers, created in build; assigned here so their order is Keras' weight order
        self.query_dense = self.key_dense = self.value_dense = self.output_dense = None

    # ---- build ------------------------------------------------------------------------------
    def _dense(self, name: str, rank: int, bound: int, out_dims: tuple, shape: tuple
               ) -> EinsumDense:
        """Keras' projection: ``rank - 1`` kept axes, ``bound`` contracted, ``out_dims`` new
        (with the bias)."""
        free, o = _LETTERS[:rank - 1], _LETTERS[rank - 1 + bound:rank - 1 + bound + len(out_dims)]
        b = _LETTERS[rank - 1:rank - 1 + bound]
        layer = EinsumDense(
            f"{free}{b},{b}{o}->{free}{o}", [None] * (rank - 2) + list(out_dims),
            bias_axes=o if self.use_bias else None, name=name,
            kernel_initializer=self.kernel_initializer, bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer, bias_regularizer=self.bias_regularizer,
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
        rank = len(q)
        default = tuple(range(1, rank - 1))  # the attention axes of the projected (rank+1)
        if self.attention_axes is not None:
            axes = tuple(a if a >= 0 else rank + a for a in self.attention_axes)
            if axes != default:
                raise _err(self, f"attention_axes={self.attention_axes} is not supported, only "
                           f"None (all axes but the batch and features, here {default})")
        self.query_dense = self._dense("query", rank, 1, (self.num_heads, self.key_dim), q)
        self.key_dense = self._dense("key", rank, 1, (self.num_heads, self.key_dim), k)
        self.value_dense = self._dense("value", rank, 1, (self.num_heads, self.value_dim), v)
        out_dims = self._output_shape or (q[-1],)
        self.output_dense = self._dense("attention_output", rank, 2, tuple(out_dims),
                                        q[:-1] + (self.num_heads, self.value_dim))
        self.build_input_shape = {"query_shape": q, "value_shape": v,
                                  **({} if key_shape is None else {"key_shape": k})}
        self.built = True

    def _check_shapes(self, q: tuple, v: tuple, k: tuple) -> None:
        shapes = f"query {format_shape(q)}, value {format_shape(v)}, key {format_shape(k)}"
        if len(q) < 3 or len(v) != len(q) or len(k) != len(q):
            raise _err(self, f"query, value and key must have the same rank >= 3 (batch, "
                       f"sequence..., features), received {shapes}")
        if any(a is not None and b is not None and a != b for a, b in zip(v[1:-1], k[1:-1])):
            raise _err(self, f"all dimensions of value and key except the last must be equal, "
                       f"received {shapes}")
        if None in (q[-1], v[-1], k[-1]):
            raise _err(self, f"the feature (last) dimensions must be known, received {shapes}")
        for what, shape, dense in (("query", q, self.query_dense), ("value", v, self.value_dense),
                                   ("key", k, self.key_dense)):
            if self.built and shape[-1] != dense.kernel.shape[0]:
                raise _err(self, f"the layer was built for {what} inputs with last dimension "
                           f"{dense.kernel.shape[0]}, received {shapes}")

    def get_build_config(self) -> dict | None:
        shapes = self.build_input_shape
        return None if shapes is None else {"shapes_dict": {k: list(v) for k, v in
                                                            shapes.items()}}

    def build_from_config(self, config: dict | None) -> None:
        if config and not self.built:
            if "shapes_dict" not in config:
                raise _err(self, f"cannot build from {config} (expected a 'shapes_dict')")
            self.build(**{k: tuple(v) for k, v in config["shapes_dict"].items()})

    # ---- call -------------------------------------------------------------------------------
    def __call__(self, query: Any, value: Any = None, key: Any = None, *,
                 training: bool | None = None, **kwargs: Any) -> Any:
        if isinstance(query, dict):  # an eager call, packed (below), now on placeholders
            kwargs.update(query)
            query, value, key = kwargs.pop("query"), kwargs.pop("value"), kwargs.pop("key", None)
        if value is None:
            raise _err(self, "call needs query and value: layer(query, value, key=None, ...)")
        unknown = set(kwargs) - set(_MASKS) - {"return_attention_scores", "use_causal_mask"}
        if unknown:
            raise TypeError(f"MultiHeadAttention: unexpected call argument(s) {sorted(unknown)}")
        tensors = {k: v for k, v in {"query": query, "value": value, "key": key,
                                     **{m: kwargs.pop(m, None) for m in _MASKS}}.items()
                   if v is not None}
        options = {k: bool(v) for k, v in kwargs.items() if v}
        if not any(is_symbolic(t) for t in tensors.values()):
            return super().__call__(tensors, training=training, **options)
        for name in ("query", "value", "key"):  # an array next to a tensor: a constant
            if name in tensors and not isinstance(tensors[name], Node):
                tensors[name] = K.constant(np.asarray(tensors[name], dtype=self.dtype))
        query, value = tensors.pop("query"), tensors.pop("value")
        shapes = [tuple(t.shape) for t in (query, value, tensors.get("key", value))]
        self._check_shapes(*shapes)
        if not self.built:
            self.build(shapes[0], shapes[1], shapes[2] if "key" in tensors else None)
        return super().__call__(query, value, training=training, **tensors, **options)

    def _attention_mask(self, query: Node, value: Node, use_causal_mask: bool,
                        **masks: Any) -> Node | None:
        b, t, s = query.shape[:1], tuple(query.shape[1:-1]), tuple(value.shape[1:-1])
        n = len(t)
        found = []
        if masks["query_mask"] is not None:
            found.append(K.expand_dims(_mask(self, masks["query_mask"], "query_mask", b + t),
                                       tuple(range(1 + n, 1 + 2 * n))))
        for name in ("value_mask", "key_mask"):
            if masks[name] is not None:
                found.append(K.expand_dims(_mask(self, masks[name], name, b + s),
                                           tuple(range(1, 1 + n))))
        if use_causal_mask:
            if n != 1 or t[0] is None or s[0] is None:
                raise _err(self, "use_causal_mask needs rank-3 inputs with known query and "
                           f"value lengths, received query {format_shape(query.shape)} and "
                           f"value {format_shape(value.shape)}")
            found.append(K.constant(np.tril(np.ones((1, t[0], s[0]), bool))))
        if masks["attention_mask"] is not None:
            found.append(_mask(self, masks["attention_mask"], "attention_mask", b + t + s,
                               same_rank=False))
        for m in found[1:]:
            found[0] = K.logical_and(found[0], m)
        return found[0] if found else None

    def call(self, query: Node, value: Node, key: Node | None = None, query_mask: Any = None,
             value_mask: Any = None, key_mask: Any = None, attention_mask: Any = None,
             return_attention_scores: bool = False, training: bool | None = None,
             use_causal_mask: bool = False) -> Any:
        # Keras masks carried by the tensors (Embedding(mask_zero=True), Masking ...)
        query_mask = get_mask(query) if query_mask is None else query_mask
        value_mask = get_mask(value) if value_mask is None else value_mask
        key_mask = get_mask(key) if key_mask is None and key is not None else key_mask
        mask = self._attention_mask(query, value, use_causal_mask, query_mask=query_mask,
                                    value_mask=value_mask, key_mask=key_mask,
                                    attention_mask=attention_mask)
        q = self.query_dense.call(query)                           # (B, T.., N, key_dim)
        k = self.key_dense.call(value if key is None else key)     # (B, S.., N, key_dim)
        v = self.value_dense.call(value)                           # (B, S.., N, value_dim)
        n = query.ndim - 2
        t_, s_ = _LETTERS[1:1 + n], _LETTERS[1 + n:1 + 2 * n]
        q = q * K.constant(1.0 / math.sqrt(float(self.key_dim)), q.dtype)
        scores = K.einsum(f"a{t_}yz,a{s_}yz->ay{t_}{s_}", q, k)     # (B, N, T.., S..)
        if mask is not None:
            while mask.ndim < scores.ndim:  # the heads axis, after the batch axes
                mask = K.expand_dims(mask, mask.ndim - 2 * n)
            big = -65504.0 if scores.dtype == "float16" else -1e9
            scores = K.where(mask, scores, K.constant(big, scores.dtype))
        if n == 1:
            probs = K.softmax(scores, axis=-1)
        else:  # softmax over the n source axes together
            axes = tuple(range(scores.ndim - n, scores.ndim))
            e = K.exp(scores - K.stop_gradient(K.max(scores, axis=axes, keepdims=True)))
            probs = e / K.sum(e, axis=axes, keepdims=True)
        if mask is not None:  # Keras' masked Softmax: a fully masked row becomes zeros
            probs = probs * K.cast(mask, probs.dtype)
        out = K.einsum(f"ay{t_}{s_},a{s_}yz->a{t_}yz", _dropout(self, probs, training), v)
        out = self.output_dense.call(out)                          # (B, T.., dim)
        return (out, probs) if return_attention_scores else out

    def compute_output_shape(self, query_shape: Any, value_shape: Any = None,
                             key_shape: Any = None) -> tuple:
        q = tuple(query_shape)
        v = q if value_shape is None else tuple(value_shape)
        self._check_shapes(q, v, v if key_shape is None else tuple(key_shape))
        return q[:-1] + tuple(self._output_shape) if self._output_shape else q

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads, "key_dim": self.key_dim, "value_dim": self.value_dim,
            "dropout": self.dropout, "use_bias": self.use_bias,
            "output_shape": None if self._output_shape is None else list(self._output_shape),
            "attention_axes": None if self.attention_axes is None else list(self.attention_axes),
            **_serialized(self), "seed": self.seed if self.seed is not None else self._stream})
        return config


# ---- Attention (Luong) and AdditiveAttention (Bahdanau) ---------------------------------------
class Attention(Layer):
    """Dot-product attention (Luong-style) over ``[query (B, Tq, dim), value (B, Tv, dim_v)
    (, key (B, Tv, dim))]``: ``softmax(scores)`` (masked) weighs ``value``; output
    ``(B, Tq, dim_v)``. ``scores = query @ key^T`` (times ``scale``) for ``score_mode="dot"``,
    ``concat_score_weight * sum(tanh(scale * (query + key)), -1)`` for ``"concat"``.

    Args:
        use_scale: learn a scalar ``scale`` (initialized to 1).
        score_mode: "dot" or "concat" (adds the scalar weight ``concat_score_weight``).
        dropout: rate on the attention probabilities (training only); seed: its stream.

    Call: ``layer([query, value(, key)], mask=[query_mask, value_mask],
    return_attention_scores=False, training=None, use_causal_mask=False)``. A False entry of
    ``value_mask (B, Tv)`` (or of the causal mask) subtracts 1e9 from the score; a False
    entry of ``query_mask (B, Tq)`` zeroes that output row.

    Example:
        >>> out = kiln.layers.Attention()([query, value])
    """

    def __init__(self, use_scale: bool = False, score_mode: str = "dot", dropout: float = 0.0,
                 seed: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        if score_mode not in ("dot", "concat"):
            raise ValueError(f"{type(self).__name__}: score_mode must be one of 'dot', "
                             f"'concat', received score_mode={score_mode!r}")
        self.use_scale = bool(use_scale)
        self.score_mode = score_mode
        self.dropout = _check_rate(type(self).__name__, dropout)
        self.seed = None if seed is None else int(seed)
        self._stream = random_stream(self.seed, self.dropout > 0)

    def __call__(self, inputs: Any, *args: Any, mask: Any = None, training: bool | None = None,
                 **kwargs: Any) -> Any:
        if isinstance(inputs, dict):  # an eager call, packed (below), now on placeholders
            mask, inputs = [inputs.get("query_mask"), inputs.get("value_mask")], inputs["inputs"]
        if args and mask is None:  # call(inputs, mask, ...) positionally, as Keras allows
            mask, args = args[0], args[1:]
        if not isinstance(inputs, list | tuple) or not 2 <= len(inputs) <= 3:
            raise _err(self, "must be called on a list of inputs, namely [query, value] or "
                       f"[query, value, key], received {type(inputs).__name__}")
        if mask is not None and (not isinstance(mask, list | tuple) or not 2 <= len(mask) <= 3):
            raise _err(self, f"mask must be a list [query_mask, value_mask], received {mask!r}")
        mask = None if mask is None or all(m is None for m in mask) else list(mask)
        options = {k: bool(v) for k, v in kwargs.items() if v}
        if mask is not None and not is_symbolic([list(inputs), mask]):
            packed = {"inputs": list(inputs), **{name: m for name, m in zip(
                ("query_mask", "value_mask"), mask) if m is not None}}
            return super().__call__(packed, *args, training=training, **options)
        return super().__call__(list(inputs), *args, training=training, **options,
                                **({} if mask is None else {"mask": mask}))

    def _check_inputs(self, inputs: Any) -> None:
        if not all(isinstance(t, Node) for t in inputs):
            return
        q, v, k = (tuple(t.shape) for t in (inputs[0], inputs[1], inputs[-1]))
        text = ", ".join(f"{n} {format_shape(t.shape)}" for n, t in zip(("query", "value", "key"),
                                                                         inputs))
        if len(q) != 3 or len(v) != 3 or len(k) != 3:
            raise _err(self, f"query, value and key must have rank 3 (batch, time, features), "
                       f"received {text}")
        for what, a, b in (("query and key must have the same last dimension", q[-1], k[-1]),
                           ("value and key must have the same length", v[1], k[1])):
            if a is not None and b is not None and a != b:
                raise _err(self, f"{what}, received {text}")
        if self.built and self.scale is not None and q[-1] is not None and \
                self.scale.shape not in ((), (q[-1],)):
            raise _err(self, f"the layer was built for features of size {self.scale.shape[0]}, "
                       f"received {text}")

    def build(self, input_shape: Any) -> None:
        self.scale = self.add_weight("scale", (), "ones") if self.use_scale else None
        self.concat_score_weight = (self.add_weight("concat_score_weight", (), "ones")
                                    if self.score_mode == "concat" else None)
        self.built = True

    def _scores(self, query: Node, key: Node) -> Node:
        if self.score_mode == "dot":
            scores = K.matmul(query, K.transpose(key, (0, 2, 1)))
            return scores * self.scale if self.scale is not None else scores
        pair = K.expand_dims(query, 2) + K.expand_dims(key, 1)     # (B, Tq, Tv, dim)
        pair = pair if self.scale is None else pair * self.scale
        return self.concat_score_weight * K.sum(K.tanh(pair), axis=-1)

    def call(self, inputs: list, mask: Any = None, training: bool | None = None,
             return_attention_scores: bool = False, use_causal_mask: bool = False) -> Any:
        query, value, key = inputs[0], inputs[1], inputs[-1]
        q_mask, v_mask = (None, None) if mask is None else (mask[0], mask[1])
        scores = self._scores(query, key)                          # (B, Tq, Tv)
        keep = None
        if v_mask is not None:
            keep = K.expand_dims(_mask(self, v_mask, "value_mask", value.shape[:2]), 1)
        if use_causal_mask:
            tq, tv = scores.shape[1], scores.shape[2]
            if tq is None or tv is None:
                raise _err(self, "use_causal_mask needs known query and value lengths, "
                           f"received scores of shape {format_shape(scores.shape)}")
            causal = K.constant(np.tril(np.ones((1, tq, tv), bool)))
            keep = causal if keep is None else K.logical_and(keep, causal)
        if keep is not None:  # Keras: minus 1e9 (65504 in float16) where masked
            big = K.constant(65504.0 if scores.dtype == "float16" else 1e9, scores.dtype)
            scores = scores - big * K.cast(K.logical_not(keep), scores.dtype)
        weights = K.softmax(scores, axis=-1)
        result = K.matmul(_dropout(self, weights, training), value)
        if q_mask is not None:
            qm = _mask(self, q_mask, "query_mask", query.shape[:2])
            result = result * K.cast(K.expand_dims(qm, -1), result.dtype)
        return (result, weights) if return_attention_scores else result

    def compute_output_shape(self, input_shape: Any) -> tuple:
        return (*tuple(input_shape[0])[:-1], tuple(input_shape[1])[-1])

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        return mask[0] if mask else None  # Keras: the output keeps the query's mask

    def get_config(self) -> dict:
        config = super().get_config()
        config.update({"use_scale": self.use_scale, "score_mode": self.score_mode,
                       "dropout": self.dropout})
        if self._stream is not None:
            config["seed"] = self.seed if self.seed is not None else self._stream
        return config


class AdditiveAttention(Attention):
    """Additive attention (Bahdanau-style): ``scores = sum(scale * tanh(query + key), -1)``
    with a learned ``scale`` of the feature size (``use_scale=True``, the default;
    "glorot_uniform"); the rest as :class:`Attention`.

    Example:
        >>> out = kiln.layers.AdditiveAttention()([query, value])
    """

    def __init__(self, use_scale: bool = True, dropout: float = 0.0, **kwargs: Any):
        super().__init__(use_scale=use_scale, dropout=dropout, **kwargs)

    def build(self, input_shape: Any) -> None:
        dim = tuple(input_shape[0])[-1]
        if dim is None:
            raise _err(self, f"needs a known query feature size, received input shapes "
                       f"{[format_shape(s) for s in input_shape]}")
        self.concat_score_weight = None
        self.scale = self.add_weight("scale", (dim,), "glorot_uniform") if self.use_scale else None
        self.built = True

    def _scores(self, query: Node, key: Node) -> Node:
        pair = K.tanh(K.expand_dims(query, 2) + K.expand_dims(key, 1))   # (B, Tq, Tv, dim)
        return K.sum(pair if self.scale is None else pair * self.scale, axis=-1)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["score_mode"]
        return config
