"""FeatureSpace against keras.utils.FeatureSpace on a small table shaped like keras.io's
"structured_data_classification_with_feature_space" example (live, when keras is installed),
plus closed-form checks, the hashed crossing against TensorFlow's, and save/load."""

import numpy as np
import pytest

import kiln
from kiln.utils import FeatureSpace
from kiln.utils.feature_space import hashed_cross

RNG = np.random.RandomState(0)
N = 40
TABLE = {
    "sex": RNG.randint(0, 2, N).astype("int64"),
    "cp": RNG.randint(0, 4, N).astype("int64"),
    "thal": RNG.choice(["fixed", "normal", "reversible"], N),
    "age": RNG.uniform(30, 70, N).round(0).astype("float32"),
    "chol": RNG.normal(240, 40, N).astype("float32"),
    "oldpeak": RNG.uniform(0, 4, N).astype("float32"),
    "slope": RNG.randint(1, 4, N).astype("float32"),
    "city": RNG.choice(["paris", "rome", "oslo", "lima"], N),
}


def _features(ns, ints=False):
    return {
        "sex": ns.integer_categorical(num_oov_indices=0),
        "cp": ns.integer_categorical(num_oov_indices=0, output_mode="int" if ints else "one_hot"),
        "thal": ns.string_categorical(num_oov_indices=0),
        "age": ns.float_discretized(num_bins=5),
        "chol": ns.float_normalized(),
        "oldpeak": ns.float_rescaled(scale=0.5, offset=1.0),
        "slope": ns.float(),
        "city": ns.string_hashed(num_bins=7),
    }


def _crosses(ns, ints=False):
    return [ns.cross(("sex", "thal"), crossing_dim=16),
            ns.cross(("cp", "city"), crossing_dim=8, output_mode="int" if ints else "one_hot")]


def test_closed_form_encoding():
    space = FeatureSpace({"x": FeatureSpace.float(), "c": FeatureSpace.integer_categorical(
        num_oov_indices=1)}, output_mode="dict")
    space.adapt({"x": [1.0, 2.0], "c": [5, 5, ]})
    out = space({"x": [3.0, 4.0], "c": [5, 9]})
    np.testing.assert_array_equal(out["x"], [[3.0], [4.0]])
    np.testing.assert_array_equal(out["c"], [[0, 1], [1, 0]])  # [UNK], 5
    single = space({"x": 1.5, "c": 5})  # one sample, no batch axis
    np.testing.assert_array_equal(single["c"], [0, 1])
    with pytest.raises(ValueError, match="lacks the features"):
        space({"x": [1.0]})
    with pytest.raises(ValueError, match="invalid feature type"):
        FeatureSpace({"x": "float_weird"})
    inputs = space.get_inputs()
    assert inputs["x"].dtype == "float32" and inputs["c"].dtype == "int32"
    assert inputs["c"].shape[1:] == (1,)
    strings = FeatureSpace({"s": "string_categorical"})
    assert strings.get_inputs()["s"].dtype == "string"  # a host-side string input
    assert strings.get_inputs() is strings.get_inputs()
    with pytest.raises(ValueError, match="must yield dicts of features, received a tuple"):
        FeatureSpace({"x": "float_normalized"}).adapt(
            kiln.utils.Dataset.from_tensor_slices((np.ones(3), np.ones(3))))
    fresh = FeatureSpace({"x": "float_normalized"})
    with pytest.raises(ValueError, match="call .adapt"):
        fresh({"x": [1.0]})


def test_hashed_cross_matches_tensorflow():
    tf = pytest.importorskip("tensorflow")
    a = np.array([["x"], ["y"], ["zz"]])
    b = np.array([[1], [2], [-300]], dtype="int64")
    want = tf.sparse.to_dense(tf.sparse.cross_hashed([tf.constant(a), tf.constant(b)],
                                                     17)).numpy()
    np.testing.assert_array_equal(hashed_cross([a, b], 17), want)


@pytest.mark.parametrize("output_mode", ["concat", "dict"])
def test_matches_keras_feature_space(output_mode):
    keras = pytest.importorskip("keras")
    ints = output_mode == "dict"  # int outputs only in a dict (concat needs encodings)
    ours = FeatureSpace(_features(FeatureSpace, ints), crosses=_crosses(FeatureSpace, ints),
                        output_mode=output_mode)
    kfs = keras.utils.FeatureSpace
    theirs = kfs(_features(kfs, ints), crosses=_crosses(kfs, ints), output_mode=output_mode)
    ours.adapt(TABLE)
    theirs.adapt(TABLE)
    got, want = ours(TABLE), theirs(TABLE)
    if output_mode == "concat":
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)
    else:
        assert sorted(got) == sorted(want)
        for k in got:
            np.testing.assert_allclose(got[k], np.asarray(want[k]), rtol=1e-5, atol=1e-5,
                                       err_msg=k)


def test_in_tf_data_matches_keras_and_trains():
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")
    ours = FeatureSpace(_features(FeatureSpace), crosses=_crosses(FeatureSpace))
    theirs = keras.utils.FeatureSpace(_features(keras.utils.FeatureSpace),
                                      crosses=_crosses(keras.utils.FeatureSpace))
    labels = (TABLE["chol"] > 240).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((TABLE, labels))
    ours.adapt(ds.map(lambda x, y: x))
    theirs.adapt(ds.map(lambda x, y: x))
    batched = ds.batch(8)
    a = np.concatenate([x for x, _ in batched.map(lambda x, y: (ours(x), y))
                        .as_numpy_iterator()])
    b = np.concatenate([x for x, _ in batched.map(lambda x, y: (theirs(x), y))
                        .as_numpy_iterator()])
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a, ours(TABLE), rtol=1e-5, atol=1e-5)  # TF ops == NumPy path
    encoded = ours.get_encoded_features()
    assert encoded.shape[-1] == a.shape[1]
    model = kiln.Model(encoded, kiln.layers.Dense(1, activation="sigmoid")(encoded))
    model.compile("adam", "binary_crossentropy")
    hist = model.fit(batched.map(lambda x, y: (ours(x), y)), epochs=2, verbose=0)
    assert len(hist.history["loss"]) == 2


def test_save_load_round_trip(tmp_path):
    space = FeatureSpace(_features(FeatureSpace), crosses=_crosses(FeatureSpace))
    space.adapt(TABLE)
    path = str(tmp_path / "space.keras")
    space.save(path)
    loaded = FeatureSpace.load(path)
    np.testing.assert_allclose(loaded(TABLE), space(TABLE), rtol=1e-6)
    assert loaded.get_config()["crosses"] == space.get_config()["crosses"]
    with pytest.raises(ValueError, match="must end in .keras"):
        space.save(str(tmp_path / "space.zip"))
