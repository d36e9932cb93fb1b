"""A small synthetic sentiment task where word order matters (shared by the text examples).

Token 0 is padding, 1 "good", 2 "bad", 3 "not", the rest neutral filler. A sentence holds one
to three sentiment words, each negated by a "not" right before it with probability one half,
and as many stray "not"s before filler words, which negate nothing; its label is 1 when the
(negated) sentiments sum above zero. A bag of words cannot tell "not good ... bad" from
"good ... not bad", nor a "not" that negates from a stray one: a model has to read the order.
"""

from __future__ import annotations

import numpy as np

PAD, GOOD, BAD, NOT = 0, 1, 2, 3


def make(n: int, vocab: int = 200, min_len: int = 8, max_len: int = 40,
         seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` left-padded sentences ``(n, max_len)`` int32 and their labels ``(n,)``."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, max_len), np.int32)
    y = np.zeros((n,), np.int32)
    k = 0
    while k < n:
        length = int(rng.integers(min_len, max_len + 1))
        words = rng.integers(4, vocab, size=length)
        count = int(rng.integers(1, 4))
        spots = np.sort(rng.choice(np.arange(1, length), size=count, replace=False))
        total = 0
        for s in spots:
            polarity = 1 if rng.random() < 0.5 else -1
            words[s] = GOOD if polarity > 0 else BAD
            if rng.random() < 0.5 and words[s - 1] not in (GOOD, BAD):
                words[s - 1] = NOT
                polarity = -polarity
            total += polarity
        if total == 0:
            continue
        for _ in range(int(rng.integers(0, count + 1))):  # stray "not"s before filler
            s = int(rng.integers(0, length - 1))
            if words[s] >= 4 and words[s + 1] >= 4:
                words[s] = NOT
        x[k, max_len - length:] = words
        y[k] = int(total > 0)
        k += 1
    return x, y
