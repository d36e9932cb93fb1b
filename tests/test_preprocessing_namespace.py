"""kiln.preprocessing mirrors keras.preprocessing: the same functions as kiln.utils, and
smart_resize against Keras' result."""

import numpy as np
import pytest

import kiln


def test_aliases_are_kiln_utils_functions():
    p = kiln.preprocessing
    assert p.image_dataset_from_directory is kiln.utils.image_dataset_from_directory
    assert p.text_dataset_from_directory is kiln.utils.text_dataset_from_directory
    assert p.timeseries_dataset_from_array is kiln.utils.timeseries_dataset_from_array
    assert p.sequence.pad_sequences is kiln.utils.pad_sequences
    for name in ("load_img", "img_to_array", "array_to_img", "save_img"):
        assert getattr(p.image, name) is getattr(kiln.utils, name)
    np.testing.assert_array_equal(p.sequence.pad_sequences([[1], [2, 3]]), [[0, 1], [2, 3]])


def test_smart_resize_crops_the_centre_then_resizes():
    x = np.arange(4 * 8 * 1, dtype="float32").reshape(4, 8, 1)
    # (4, 8) -> (4, 4): the centred 4x4 window, no resampling needed
    out = kiln.preprocessing.image.smart_resize(x, (4, 4))
    np.testing.assert_allclose(out, x[:, 2:6])
    assert kiln.preprocessing.image.smart_resize(np.ones((2, 10, 20, 3)), (5, 5)).shape == \
        (2, 5, 5, 3)
    with pytest.raises(ValueError, match="smart_resize: expected an image of rank 3"):
        kiln.preprocessing.image.smart_resize(np.ones((4, 4)), (2, 2))


def test_smart_resize_matches_keras():
    keras = pytest.importorskip("keras")
    x = np.random.RandomState(0).rand(2, 9, 13, 3).astype("float32")
    for size in ((5, 5), (6, 4), (9, 13)):
        ours = kiln.preprocessing.image.smart_resize(x, size)
        theirs = np.asarray(keras.preprocessing.image.smart_resize(x, size))
        np.testing.assert_allclose(ours, theirs, atol=1e-4)
