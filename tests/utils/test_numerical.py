"""to_categorical and normalize against NumPy written out by hand."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


def test_to_categorical_shapes_and_values():
    y = np.array([[0], [2], [1], [2]])
    got = kiln.utils.to_categorical(y)
    np.testing.assert_array_equal(got, np.eye(3)[[0, 2, 1, 2]])
    assert got.dtype == np.float32 and got.shape == (4, 3)
    got = kiln.utils.to_categorical(np.array([[1, 0], [3, 2]]), num_classes=5)
    assert got.shape == (2, 2, 5)
    np.testing.assert_array_equal(got[1, 0], [0, 0, 0, 1, 0])
    assert kiln.utils.to_categorical([1.0, 0.0]).tolist() == [[0, 1], [1, 0]]


@pytest.mark.parametrize("labels, num_classes, match", [
    ([0, 3], 3, "label 3 is out of range for num_classes=3"),
    ([0, -1], None, "labels must be non-negative, received -1"),
    ([0.5, 1.0], None, "labels must be integers, received non-integer values such as 0.5"),
    (["a"], None, "labels must be integers, received dtype <U1"),
])
def test_to_categorical_refuses_bad_labels(labels, num_classes, match):
    with pytest.raises(ValueError, match=match):
        kiln.utils.to_categorical(labels, num_classes)


def test_normalize_matches_numpy():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, -1.0]])
    np.testing.assert_allclose(kiln.utils.normalize(x),
                               [[0.6, 0.8], [0.0, 0.0], [2 ** -0.5, -(2 ** -0.5)]])
    np.testing.assert_allclose(kiln.utils.normalize(x, axis=0, order=1),
                               x / np.abs(x).sum(axis=0, keepdims=True))
