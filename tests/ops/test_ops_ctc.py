"""Issue 44: ctc_loss against a brute-force sum over every alignment and against Keras 3,
its gradient against finite differences; greedy ctc_decode against Keras."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops

import kiln.ops as K

rng = np.random.default_rng(17)
OUT = rng.normal(size=(3, 7, 5)).astype("float32")
TGT = np.array([[1, 2, 2, 0], [3, 3, 0, 0], [4, 1, 2, 3]], "int32")
TL = np.array([3, 2, 4], "int32")
OL = np.array([7, 5, 6], "int32")


def _brute_ctc(logits, labels, blank=0):
    """-log of the summed probability of every frame path that collapses to ``labels``."""
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    total = 0.0
    for path in itertools.product(range(p.shape[1]), repeat=p.shape[0]):
        merged = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
        if [c for c in merged if c != blank] == list(labels):
            total += np.prod(p[np.arange(len(path)), path])
    return -np.log(total)


def test_ctc_loss_is_the_sum_over_alignments():
    logits = rng.normal(size=(2, 5, 3))
    labels = np.array([[1, 1], [2, 1]], "int32")
    got = K.ctc_loss(labels, logits, np.array([2, 2]), np.array([5, 4]))
    want = [_brute_ctc(logits[0], [1, 1]), _brute_ctc(logits[1, :4], [2, 1])]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_ctc_loss_and_decode_match_keras():
    ko = keras_ops()
    check_keras(K.ctc_loss, ko.ctc_loss, TGT, OUT, TL, OL, rtol=1e-5, atol=1e-5)
    check_keras(K.ctc_decode, ko.ctc_decode, OUT, OL)
    check_keras(lambda x, n: K.ctc_decode(x, n, merge_repeated=False, mask_index=4),
                lambda x, n: ko.ctc_decode(x, n, merge_repeated=False, mask_index=4), OUT, OL)


def test_ctc_loss_gradient():
    check_grad(lambda o: K.ctc_loss(TGT, o, TL, OL), OUT, rtol=1e-5)


def test_ctc_errors():
    with pytest.raises(ValueError, match="ctc_decode: strategy 'beam_search' is not supported"):
        K.ctc_decode(OUT, OL, strategy="beam_search")
    with pytest.raises(ValueError, match=r"ctc_loss: expected output \(batch, time, classes\)"):
        K.ctc_loss(TGT, OUT[0], TL, OL)
