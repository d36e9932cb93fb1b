"""``keras.ops.nn``'s CTC ops: ``ctc_loss`` (the forward algorithm in log space, optax's
formulation as Keras uses it, as a ``scan`` over time: its gradient comes from the scan's) and
``ctc_decode`` (greedy; beam search is not supported). Graph and eager: see ``kiln.ops``.
"""

from __future__ import annotations

import numpy as np

from kiln.ops import _G, _dual
from kiln.ops import _numpy_shape as _S
from kiln.ops import scan as _scan

_N = _G.as_node
_LOG_EPS = -1e5


def _logaddexp(a, b):
    m = _G.maximum(a, b)
    return m + _G.log1p(_G.exp(_G.neg(_G.abs(a - b))))


def _add_phi(phi, score):
    """``phi[:, 1:]`` plus ``score`` in log space (optax's ``update_phi_score``)."""
    n = phi.shape[1]
    head = _G.slice(phi, ((None, None, 1), (0, 1, 1)))
    tail = _G.slice(phi, ((None, None, 1), (1, n, 1)))
    return _G.concatenate([head, _logaddexp(tail, score)], 1)


def _ctc_loss(target, output, target_length, output_length, mask_index=0):
    out = _N(output)
    out = out if out.dtype in ("float32", "float64") else _G.cast(out, "float32")
    tgt = _G.cast(_N(target), "int32")
    if out.ndim != 3 or tgt.ndim != 2 or None in out.shape[1:] or tgt.shape[1] is None:
        raise ValueError(f"ctc_loss: expected output (batch, time, classes) and target (batch, "
                         f"labels) with static time, classes and labels, received "
                         f"{out.shape} and {tgt.shape}")
    _, t_max, k = out.shape
    n = tgt.shape[1]
    dt = out.dtype

    def c(v):
        return _G.constant(np.asarray(v, dt))
    tl = _G.cast(_N(target_length), "int32")
    ol = _G.cast(_N(output_length), "int32")
    lp = _G.log_softmax(out, axis=-1)
    label_len = _G.sum(_G.cast(_G.less(_G.constant(np.arange(n, dtype="int32")),
                                       _G.expand_dims(tl, 1)), "int32"), axis=1)
    if n > 1:
        rep = _G.cast(_G.equal(_G.slice(tgt, ((None, None, 1), (0, n - 1, 1))),
                               _G.slice(tgt, ((None, None, 1), (1, n, 1)))), dt)
        repeat = _G.pad(rep, ((0, 0), (0, 1)))
    else:
        repeat = _G.zeros_like(_G.cast(tgt, dt))
    lp_phi = _G.transpose(_G.slice(lp, ((None, None, 1), (None, None, 1),
                                        (mask_index, mask_index + 1, 1))), (1, 0, 2))
    hot = _G.one_hot(tgt, k, dt)  # (B, N, K)
    emit = _G.transpose(_G.matmul(lp, _G.transpose(hot, (0, 2, 1))), (1, 0, 2))  # (T, B, N)
    pads = _G.cast(_G.greater_equal(_G.constant(np.arange(t_max, dtype="int32")),
                                    _G.expand_dims(ol, 1)), dt)  # (B, T)
    pads = _G.expand_dims(_G.transpose(pads, (1, 0)), 2)  # (T, B, 1)
    zeros_b = _G.expand_dims(_G.cast(_G.zeros_like(tl), dt), 1)  # (B, 1)
    phi0 = zeros_b + c(np.concatenate([[0.0], np.full(n, _LOG_EPS)])[None, :])
    emit0 = zeros_b + c(np.full((1, n), _LOG_EPS))

    def step(carry, x):
        prev_phi, prev_emit = carry
        e, p, pad = x
        orig = prev_phi
        prev_phi = _add_phi(prev_phi, prev_emit + c(_LOG_EPS) * repeat)
        next_emit = _logaddexp(_G.slice(prev_phi, ((None, None, 1), (0, n, 1))) + e,
                               prev_emit + e)
        next_phi = _add_phi(prev_phi + p, prev_emit + p + c(_LOG_EPS) * (c(1.0) - repeat))
        keep = c(1.0) - pad
        return [pad * orig + keep * next_phi, pad * prev_emit + keep * next_emit], None
    (phi, em), _ = _scan(step, [phi0, emit0], (emit, lp_phi, pads), name="ctc_loss")
    last = _add_phi(phi, em)
    return _G.neg(_G.sum(last * _G.one_hot(label_len, n + 1, dt), axis=1))


def _ctc_decode(inputs, sequence_lengths, strategy="greedy", beam_width=100, top_paths=1,
                merge_repeated=True, mask_index=0):
    if strategy != "greedy":
        raise ValueError(f"ctc_decode: strategy {strategy!r} is not supported; kiln has "
                         "'greedy' (beam search needs data-dependent shapes)")
    x = _N(inputs)
    x = x if x.dtype in ("float32", "float64") else _G.cast(x, "float32")
    if x.ndim != 3 or None in x.shape[1:]:
        raise ValueError(f"ctc_decode: expected inputs (batch, time, classes) with static time "
                         f"and classes, received {x.shape}")
    t_max, k = x.shape[1], x.shape[2]
    blank = k - 1 if mask_index is None else int(mask_index)
    lens = _G.cast(_N(sequence_lengths), "int32")
    idx = _G.cast(_G.argmax(x, axis=-1), "int32")
    scores = _G.max(x, axis=-1)
    beyond = _G.greater_equal(_G.constant(np.arange(t_max, dtype="int32")),
                              _G.expand_dims(lens, 1))
    blank_c = _G.constant(np.asarray(blank, "int32"))
    idx = _G.where(beyond, blank_c, idx)
    scores = _G.where(beyond, _G.constant(np.asarray(0, x.dtype)), scores)
    if merge_repeated and t_max > 1:
        same = _G.equal(_G.slice(idx, ((None, None, 1), (1, t_max, 1))),
                        _G.slice(idx, ((None, None, 1), (0, t_max - 1, 1))))
        same = _G.pad(_G.cast(same, "int32"), ((0, 0), (1, 0)))
        idx = _G.where(_G.greater(same, _G.constant(np.asarray(0, "int32"))), blank_c, idx)
    invalid = _G.equal(idx, blank_c)
    idx = _G.where(invalid, _G.constant(np.asarray(-1, "int32")), idx)
    order = _G.where(invalid, _G.constant(np.asarray(t_max, "int32")),
                     _G.constant(np.arange(t_max, dtype="int32")))
    order = _S.argsort(order, axis=-1)
    idx = _S.take_along_axis(idx, order, axis=-1)
    return _G.expand_dims(idx, 0), _G.expand_dims(_G.neg(_G.sum(scores, axis=1)), 1)


ctc_loss = _dual(_ctc_loss, "ctc_loss")
ctc_loss.__doc__ = ("Per-sequence CTC loss of logits ``output`` (batch, time, classes) for "
                    "``target`` labels, blank ``mask_index`` (Keras' conventions).")
ctc_decode = _dual(_ctc_decode, "ctc_decode")
ctc_decode.__doc__ = ("Greedy CTC decoding: ``(decoded (1, batch, time) with -1 padding, "
                      "scores (batch, 1))``.")

__all__ = ["ctc_loss", "ctc_decode"]
