"""``pad_sequences``: lists of token ids -> one padded 2-D array (Keras' semantics)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def pad_sequences(sequences: Sequence[Sequence[Any]], maxlen: int | None = None,
                  dtype: Any = "int32", padding: str = "pre", truncating: str = "pre",
                  value: Any = 0.0) -> np.ndarray:
    """Pads (or truncates) each sequence to ``maxlen`` and stacks them, as
    ``keras.utils.pad_sequences`` does.

    Args:
        sequences: a list of sequences (lists or arrays; each item a number or an array of a
            common shape).
        maxlen: the length of the result (default: the longest sequence).
        dtype: the result's dtype (default int32).
        padding: "pre" (default) or "post": where the padding goes.
        truncating: "pre" (default) or "post": which end of a longer sequence is dropped.
        value: the padding value (default 0).

    Returns:
        An array ``(len(sequences), maxlen, *item_shape)``.

    Example:
        >>> pad_sequences([[1, 2], [3]], maxlen=3)
        array([[0, 1, 2],
               [0, 0, 3]], dtype=int32)
    """
    for name, v in (("padding", padding), ("truncating", truncating)):
        if v not in ("pre", "post"):
            raise ValueError(f"pad_sequences: {name} must be 'pre' or 'post', received {v!r}")
    if maxlen is not None and (isinstance(maxlen, bool) or int(maxlen) < 0):
        raise ValueError(f"pad_sequences: maxlen must be a non-negative int, received {maxlen!r}")
    arrays = []
    for k, s in enumerate(sequences):
        try:
            arrays.append(np.asarray(s))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"pad_sequences: sequence {k} is not array-like: {exc}") from None
    lengths = [len(a) for a in arrays]
    if maxlen is None:
        maxlen = max(lengths, default=0)
    maxlen = int(maxlen)
    item = next((a.shape[1:] for a in arrays if len(a)), ())
    dt = np.dtype(dtype)
    if dt.kind in "iu" and isinstance(value, float) and not float(value).is_integer():
        raise ValueError(f"pad_sequences: value {value!r} does not fit dtype {dt}")
    out = np.full((len(arrays), maxlen) + tuple(item), value, dtype=dt)
    for k, a in enumerate(arrays):
        if not len(a) or not maxlen:
            continue
        if a.shape[1:] != item:
            raise ValueError(f"pad_sequences: sequence {k} has items of shape {a.shape[1:]}, "
                             f"the others {item}")
        trunc = a[-maxlen:] if truncating == "pre" else a[:maxlen]
        if padding == "post":
            out[k, :len(trunc)] = trunc
        else:
            out[k, -len(trunc):] = trunc
    return out
