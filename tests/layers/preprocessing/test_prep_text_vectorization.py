"""TextVectorization: Keras' docstring examples (hard-coded), then every output mode,
standardize/split option, n-grams and vocabulary option against Keras' own layer on the same
corpus (live, when keras is installed), eagerly on NumPy and inside tf.data; config and
.keras round trips."""

import numpy as np
import pytest

import kiln
from kiln.layers import TextVectorization
from kiln.layers.context import trace

CORPUS = ["The cat sat on the mat.", "The dog ate my homework!", "A cat, a dog; a bird?",
          "Dogs and CATS and birds", "the the the end", ""]
QUERY = np.array(["the cat ate the bird", "unknown words here", "DOG dog Dog", "a"])


def test_keras_docstring_adapt_example():
    layer = TextVectorization(max_tokens=5000, output_mode="int", output_sequence_length=4)
    layer.adapt(["foo bar", "bar baz", "baz bada boom"])
    out = layer([["foo qux bar"], ["qux baz"]])
    np.testing.assert_array_equal(out, [[4, 1, 3, 0], [1, 2, 0, 0]])
    assert out.dtype == np.int64


def test_keras_docstring_vocabulary_example(tmp_path):
    layer = TextVectorization(max_tokens=5000, output_sequence_length=4,
                              vocabulary=["earth", "wind", "and", "fire"])
    assert layer.get_vocabulary() == ["", "[UNK]", "earth", "wind", "and", "fire"]
    assert layer.vocabulary_size() == 6
    np.testing.assert_array_equal(layer(["Earth, wind and water!"]), [[2, 3, 4, 1]])
    path = tmp_path / "vocab.txt"
    path.write_text("earth\nwind\nand\nfire\n")
    from_file = TextVectorization(vocabulary=str(path))
    assert from_file.get_vocabulary() == layer.get_vocabulary()


def test_eager_call_returns_an_eager_tensor():
    # Keras' eager outputs have .numpy() (keras.io's preprocessing_layers guide calls it)
    layer = TextVectorization(vocabulary=["brain", "sea"])
    out = layer(["The Brain is deeper than the sea"])
    np.testing.assert_array_equal(out.numpy(), [[1, 2, 1, 1, 1, 1, 3]])
    assert type(out.numpy()) is np.ndarray


def test_modes_closed_form():
    layer = TextVectorization(output_mode="multi_hot", vocabulary=["a", "b", "c"])
    # index 0 is OOV in the encoding modes
    np.testing.assert_array_equal(layer(["a c c zz", "b"]), [[1, 1, 0, 1], [0, 0, 1, 0]])
    count = TextVectorization(output_mode="count", vocabulary=["a", "b", "c"])
    np.testing.assert_array_equal(count(["a c c zz", "b"]), [[1, 1, 0, 2], [0, 0, 1, 0]])
    tfidf = TextVectorization(output_mode="tf_idf", vocabulary=["a", "b", "c"],
                              idf_weights=[0.5, 0.25, 2.0])
    np.testing.assert_allclose(tfidf(["a c c zz"]), [[np.mean([0.5, 0.25, 2.0]), 0.5, 0, 4]])
    chars = TextVectorization(split="character", standardize=None, vocabulary=["a", "b"])
    np.testing.assert_array_equal(chars(["abxa", "b"]), [[2, 3, 1, 2], [3, 0, 0, 0]])
    bigrams = TextVectorization(ngrams=2, vocabulary=["a", "b", "a b"])
    np.testing.assert_array_equal(bigrams(["a b"]), [[2, 3, 4]])
    with pytest.raises(ValueError, match="output_sequence_length must not be set"):
        TextVectorization(output_mode="count", output_sequence_length=3)
    with pytest.raises(ValueError, match="TextVectorization: split must be one of"):
        TextVectorization(split="comma")
    with pytest.raises(ValueError, match="last dimension must be 1, received shape"):
        TextVectorization(vocabulary=["a"])(np.array([["a", "b"]]))
    with trace(), pytest.raises(TypeError, match="prepares data on the host"):
        TextVectorization(vocabulary=["a"])(kiln.placeholder((None, 1), "int32"))


def _keras():
    return pytest.importorskip("keras")


OPTIONS = [
    dict(),
    dict(output_sequence_length=5),
    dict(max_tokens=6),
    dict(output_mode="multi_hot"),
    dict(output_mode="count", max_tokens=8),
    dict(output_mode="count", max_tokens=8, pad_to_max_tokens=True),
    dict(output_mode="tf_idf"),
    dict(output_mode="one_hot", split=None),
    dict(ngrams=2, output_mode="count"),
    dict(ngrams=(1, 3)),
    dict(standardize="lower"),
    dict(standardize="strip_punctuation"),
    dict(standardize=None, split="character", output_sequence_length=8),
]


@pytest.mark.parametrize("options", OPTIONS, ids=[str(o) for o in OPTIONS])
def test_against_keras_adapted_on_the_same_corpus(options):
    keras = _keras()
    tf = pytest.importorskip("tensorflow")
    ours, theirs = TextVectorization(**options), keras.layers.TextVectorization(**options)
    corpus, query = np.array(CORPUS), QUERY
    if options.get("output_mode") == "one_hot":  # one token per text
        corpus, query = np.array(["a", "b", "b", "c"]), np.array([["b"], ["z"], ["a"]])
    ours.adapt(corpus)
    theirs.adapt(corpus)
    assert ours.get_vocabulary() == theirs.get_vocabulary()
    expected = np.asarray(theirs(query))
    got = ours(query)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # inside tf.data, with TF ops, against Keras there
    ds = tf.data.Dataset.from_tensor_slices(query).batch(2)
    for a, b in zip(ds.map(ours).as_numpy_iterator(), ds.map(theirs).as_numpy_iterator()):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_adapt_on_datasets_matches_keras():
    keras = _keras()
    tf = pytest.importorskip("tensorflow")
    texts = np.array(CORPUS)
    labels = np.arange(len(CORPUS))
    theirs = keras.layers.TextVectorization(output_mode="tf_idf")
    theirs.adapt(tf.data.Dataset.from_tensor_slices(texts).batch(4))
    on_tf = TextVectorization(output_mode="tf_idf")
    on_tf.adapt(tf.data.Dataset.from_tensor_slices(texts).batch(4))
    on_kiln = TextVectorization(output_mode="tf_idf")
    on_kiln.adapt(kiln.utils.Dataset.from_tensor_slices((texts, labels)).map(
        lambda t, y: (str(t), y)).batch(4))
    on_list = TextVectorization(output_mode="tf_idf")
    on_list.adapt(list(CORPUS))
    want = np.asarray(theirs(QUERY))
    for layer in (on_tf, on_kiln, on_list):
        assert layer.get_vocabulary() == theirs.get_vocabulary()
        np.testing.assert_allclose(layer(QUERY), want, rtol=1e-5)


def test_callable_standardize_and_split():
    def std(x):
        return np.char.upper(x)

    def split(x):
        return [s.split("-") for s in x]
    layer = TextVectorization(standardize=std, split=split, vocabulary=["A", "B"])
    np.testing.assert_array_equal(layer(["a-b-c", "b"]), [[2, 3, 1], [3, 0, 0]])


def test_set_vocabulary_config_round_trip():
    layer = TextVectorization(output_mode="tf_idf", ngrams=(1, 2))
    layer.adapt(CORPUS)
    clone = TextVectorization.from_config(layer.get_config())
    assert clone.get_vocabulary() == layer.get_vocabulary()
    np.testing.assert_allclose(clone(QUERY), layer(QUERY))
    clone.set_vocabulary(["cat", "dog"], idf_weights=[1.0, 2.0])
    # the bigrams "cat dog" and "dog dog" are OOV, weighted by the mean idf 1.5
    np.testing.assert_allclose(clone(["cat dog dog"]), [[3.0, 1.0, 4.0]])
    assert clone.vocabulary_size() == 3


def test_keras_config_loads_in_kiln():
    keras = _keras()
    theirs = keras.layers.TextVectorization(output_sequence_length=3,
                                            vocabulary=["x", "y"])
    ours = TextVectorization.from_config(theirs.get_config())
    np.testing.assert_array_equal(ours(["y x z"]), np.asarray(theirs(["y x z"])))


def test_serialize_round_trip_keeps_the_adapted_vocabulary():
    layer = TextVectorization(output_sequence_length=6, name="vec")
    layer.adapt(CORPUS)
    cfg = kiln.layers.serialize(layer)
    assert cfg["class_name"] == "TextVectorization"
    assert cfg["config"]["vocabulary"] == layer.get_vocabulary()
    restored = kiln.layers.deserialize(cfg)
    assert restored.name == "vec"
    np.testing.assert_array_equal(restored(QUERY), layer(QUERY))
