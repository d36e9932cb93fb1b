"""The lookup, hashing and discretization layers' Keras options (output modes, OOV buckets,
masks, salt, pad_to_max_tokens, adapt with num_bins/epsilon), called on NumPy arrays, against
Keras 3's layers on the same inputs: values, shapes and dtypes."""

import numpy as np
import pytest

import kiln

keras = pytest.importorskip("keras")

WORDS = np.array([["a", "b", "zz"], ["c", "", "a"]])
INTS = np.array([[1, 2, 7], [3, 3, 0]], dtype="int64")
FLOATS = np.random.RandomState(1).randn(40, 2).astype("float32")
IDF = [0.5, 1.5, 2.5]

CASES = [
    ("StringLookup", dict(vocabulary=["a", "b", "c"]), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], num_oov_indices=2), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], mask_token=""), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], output_mode="one_hot"), WORDS[:, :1]),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], output_mode="multi_hot"), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], output_mode="count"), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], output_mode="tf_idf",
                          idf_weights=IDF), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], output_mode="multi_hot",
                          max_tokens=6, pad_to_max_tokens=True), WORDS),
    ("StringLookup", dict(vocabulary=["a", "b", "c"], invert=True), INTS % 5),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7]), INTS),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], num_oov_indices=2), INTS),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], mask_token=0), INTS),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], output_mode="one_hot"), INTS[:, :1]),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], output_mode="multi_hot"), INTS),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], output_mode="count"), INTS),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], output_mode="tf_idf", idf_weights=IDF),
     INTS),
    ("IntegerLookup", dict(vocabulary=[3, 1, 7], invert=True), INTS % 5),
    ("Hashing", dict(num_bins=4), WORDS),
    ("Hashing", dict(num_bins=4, mask_value=""), WORDS),
    ("Hashing", dict(num_bins=4, salt=133), WORDS),
    ("Hashing", dict(num_bins=4, output_mode="one_hot"), WORDS[:, :1]),
    ("Hashing", dict(num_bins=4, output_mode="multi_hot"), WORDS),
    ("Hashing", dict(num_bins=4, output_mode="count"), INTS),
    ("Discretization", dict(bin_boundaries=[-1.0, 0.0, 1.0]), FLOATS),
    ("Discretization", dict(bin_boundaries=[-1.0, 0.0, 1.0], output_mode="one_hot"),
     FLOATS[:, :1]),
    ("Discretization", dict(bin_boundaries=[-1.0, 0.0, 1.0], output_mode="multi_hot"),
     FLOATS),
    ("Discretization", dict(bin_boundaries=[-1.0, 0.0, 1.0], output_mode="count"), FLOATS),
]


@pytest.mark.parametrize("name,kwargs,x", CASES, ids=[f"{c[0]}-{i}" for i, c in
                                                      enumerate(CASES)])
def test_options_match_keras(name, kwargs, x):
    ours = np.asarray(getattr(kiln.layers, name)(**kwargs)(x))
    theirs = np.asarray(getattr(keras.layers, name)(**kwargs)(x))
    assert ours.shape == theirs.shape
    if theirs.dtype.kind in "OSU":
        assert [[str(v) for v in r] for r in ours.astype(str)] == \
            [[v.decode() if isinstance(v, bytes) else str(v) for v in r] for r in theirs]
    else:
        assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(num_bins=4), dict(num_bins=3, epsilon=0.1)])
def test_discretization_adapt_matches_keras(kwargs):
    ours, theirs = kiln.layers.Discretization(**kwargs), keras.layers.Discretization(**kwargs)
    ours.adapt(FLOATS)
    theirs.adapt(FLOATS)
    np.testing.assert_allclose(ours.bin_boundaries, theirs.bin_boundaries, rtol=1e-6)
    np.testing.assert_array_equal(ours(FLOATS), np.asarray(theirs(FLOATS)))


@pytest.mark.parametrize("mode", ["int", "multi_hot"])
def test_keras_file_with_an_adapted_lookup_loads_its_vocabulary(tmp_path, mode):
    """Keras keeps an adapted vocabulary in the file's assets/, not in the config."""
    lookup = keras.layers.IntegerLookup(output_mode=mode)
    lookup.adapt(np.array([[3], [5], [5], [9]]))
    inp = keras.Input((2,), dtype="int64")
    x = lookup(inp)
    if mode == "int":
        x = keras.layers.Flatten()(keras.layers.Embedding(lookup.vocabulary_size(), 2)(x))
    model = keras.Model(inp, keras.layers.Dense(1)(x))
    path = str(tmp_path / "lookup.keras")
    model.save(path)
    loaded = kiln.saving.load_model(path)
    data = np.array([[3, 9], [7, 5]])
    np.testing.assert_allclose(loaded.predict(data, verbose=0), np.asarray(model(data)),
                               rtol=1e-5, atol=1e-6)
    kiln_lookup = [la for la in loaded.layers if isinstance(la, kiln.layers.IntegerLookup)][0]
    assert kiln_lookup.get_vocabulary() == lookup.get_vocabulary()
