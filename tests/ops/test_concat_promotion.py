"""``ops.concatenate`` / ``ops.stack`` (and the Concatenate layer) on tensors of different
dtypes promote them as Keras does (a float beats any int, else the wider int), eager and
symbolic; keras.io's structured-data example concatenates float and int64 encodings."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops as K

CASES = [(("float32", "int64"), "float32"), (("int32", "int64"), "int64"),
         (("float32", "float64"), "float64"), (("bool", "int32"), "int32")]


@pytest.mark.parametrize("dtypes,want", CASES, ids=lambda v: str(v))
def test_mixed_dtypes_meet_in_the_wider(dtypes, want):
    a = (np.arange(4).reshape(2, 2) % 2).astype(dtypes[0])
    b = np.arange(6).reshape(2, 3).astype(dtypes[1])
    got = K.concatenate([a, b], axis=1)
    assert got.dtype == want
    np.testing.assert_array_equal(got, np.concatenate([a.astype(want), b.astype(want)], 1))
    s = K.stack([a[:, :1], b[:, :1]], axis=0)
    assert s.dtype == want
    x, y = kiln.Input((2,), dtype=dtypes[0]), kiln.Input((3,), dtype=dtypes[1])
    model = kiln.Model([x, y], kiln.layers.Concatenate()([x, y]))
    out = model.predict([a, b], verbose=0)
    assert out.dtype == want
    np.testing.assert_array_equal(out, np.concatenate([a, b], 1).astype(want))


def test_keras_promotes_the_same_way():
    keras = pytest.importorskip("keras")
    for dtypes, want in CASES:
        a, b = np.zeros((1, 1), dtypes[0]), np.zeros((1, 1), dtypes[1])
        assert keras.backend.standardize_dtype(keras.ops.concatenate([a, b]).dtype) == want
