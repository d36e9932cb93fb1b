"""kiln.utils.pad_sequences against Keras' documented semantics (written out by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.utils import pad_sequences


def test_pre_and_post_padding_and_truncating():
    seqs = [[1, 2, 3, 4], [5], [], [6, 7]]
    np.testing.assert_array_equal(pad_sequences(seqs), [[1, 2, 3, 4], [0, 0, 0, 5],
                                                        [0, 0, 0, 0], [0, 0, 6, 7]])
    np.testing.assert_array_equal(pad_sequences(seqs, maxlen=2), [[3, 4], [0, 5], [0, 0],
                                                                  [6, 7]])
    np.testing.assert_array_equal(pad_sequences(seqs, maxlen=3, padding="post",
                                                truncating="post", value=-1),
                                  [[1, 2, 3], [5, -1, -1], [-1, -1, -1], [6, 7, -1]])
    assert pad_sequences(seqs).dtype == np.int32


def test_items_with_a_shape_and_float_dtype():
    seqs = [np.ones((2, 3)), np.full((1, 3), 2.0)]
    out = pad_sequences(seqs, dtype="float32", value=0.5)
    assert out.shape == (2, 2, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out[1, 0], [0.5] * 3)
    np.testing.assert_array_equal(out[1, 1], [2.0] * 3)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="padding must be 'pre' or 'post'"):
        pad_sequences([[1]], padding="middle")
    with pytest.raises(ValueError, match="sequence 1 has items of shape"):
        pad_sequences([np.ones((1, 2)), np.ones((1, 3))])
    with pytest.raises(ValueError, match="does not fit dtype int32"):
        pad_sequences([[1]], maxlen=3, value=0.5)
