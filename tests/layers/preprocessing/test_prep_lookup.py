"""StringLookup, IntegerLookup and Hashing against the examples of Keras' docs (their stated
outputs) and Keras' semantics (OOV and mask indices, vocabulary order, output modes); FarmHash
against pyfarmhash where installed, SipHash against the reference test vectors."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import kiln
from kiln import layers as L
from kiln.layers.context import trace
from kiln.layers.preprocessing._hashes import fingerprint64, siphash24

VOCAB = ["a", "b", "c", "d"]


def test_string_lookup_doc_examples():
    data = np.array([["a", "c", "d"], ["d", "z", "b"]])
    np.testing.assert_array_equal(L.StringLookup(vocabulary=VOCAB)(data), [[1, 3, 4], [4, 0, 2]])
    adapted = L.StringLookup()
    adapted.adapt(data)
    # by decreasing count, ties by decreasing token
    assert adapted.get_vocabulary() == ["[UNK]", "d", "z", "c", "b", "a"]
    two = L.StringLookup(vocabulary=VOCAB, num_oov_indices=2)
    np.testing.assert_array_equal(two(np.array([["a", "c", "d"], ["m", "z", "b"]])),
                                  [[2, 4, 5], [0, 1, 3]])
    inv = L.StringLookup(vocabulary=VOCAB, invert=True)
    np.testing.assert_array_equal(inv(np.array([[1, 3, 4], [4, 0, 2]])),
                                  [["a", "c", "d"], ["d", "[UNK]", "b"]])


def test_string_lookup_output_modes_doc_examples():
    one = L.StringLookup(vocabulary=VOCAB, output_mode="one_hot")
    np.testing.assert_array_equal(one(np.array(["a", "b", "c", "d", "z"])),
                                  np.eye(5)[[1, 2, 3, 4, 0]])
    data = np.array([["a", "c", "d", "d"], ["d", "z", "b", "z"]])
    multi = L.StringLookup(vocabulary=VOCAB, output_mode="multi_hot")
    np.testing.assert_array_equal(multi(data), [[0, 1, 0, 1, 1], [1, 0, 1, 0, 1]])
    count = L.StringLookup(vocabulary=VOCAB, output_mode="count")
    np.testing.assert_array_equal(count(data), [[0, 1, 0, 1, 2], [2, 0, 1, 0, 1]])
    tfidf = L.StringLookup(output_mode="tf_idf", vocabulary=VOCAB,
                           idf_weights=[0.25, 0.75, 0.6, 0.4])
    np.testing.assert_allclose(tfidf(data), [[0, 0.25, 0, 0.6, 0.8], [1.0, 0, 0.75, 0, 0.4]],
                               rtol=1e-6)
    # with the special tokens in the vocabulary, idf_weights cover them too
    full = L.StringLookup(output_mode="tf_idf", vocabulary=["[UNK]"] + VOCAB,
                          idf_weights=[0.0, 0.25, 0.75, 0.6, 0.4])
    np.testing.assert_allclose(full(data), [[0, 0.25, 0, 0.6, 0.8], [0, 0, 0.75, 0, 0.4]],
                               rtol=1e-6)


def test_string_lookup_mask_token_and_padding():
    layer = L.StringLookup(vocabulary=VOCAB, mask_token="")
    assert layer.get_vocabulary() == ["", "[UNK]", "a", "b", "c", "d"]
    np.testing.assert_array_equal(layer(np.array([["a", "", "q"]])), [[2, 0, 1]])
    # in an encoding mode the mask has no index and encodes as zeros
    multi = L.StringLookup(vocabulary=VOCAB, mask_token="", output_mode="multi_hot")
    np.testing.assert_array_equal(multi(np.array([["a", "", ""]])), [[0, 1, 0, 0, 0]])
    padded = L.StringLookup(vocabulary=VOCAB, output_mode="count", max_tokens=8,
                            pad_to_max_tokens=True)
    np.testing.assert_array_equal(padded(np.array([["b", "b"]])), [[0, 0, 2, 0, 0, 0, 0, 0]])


def test_string_lookup_adapt_tf_idf_and_max_tokens():
    docs = np.array([["x", "y", "y"], ["y", "z", "z"], ["y", "w", "x"]])
    layer = L.StringLookup(output_mode="tf_idf", max_tokens=4)
    layer.adapt(docs)
    assert layer.get_vocabulary() == ["[UNK]", "y", "z", "x"]  # w dropped (max_tokens)
    idf = np.log(1 + 3 / (1 + np.array([3, 1, 2])))  # document frequencies of y, z, x
    weights = np.concatenate([[idf.mean()], idf])
    counts = np.array([[0, 2, 0, 1], [0, 1, 2, 0], [1, 1, 0, 1]])
    np.testing.assert_allclose(layer(docs), counts * weights, rtol=1e-6)


def test_string_lookup_bytes_and_errors():
    layer = L.StringLookup(vocabulary=[b"caf\xc3\xa9", b"tea"])
    np.testing.assert_array_equal(layer(np.array(["café", "tea", "milk"])), [1, 2, 0])
    np.testing.assert_array_equal(layer(np.array([b"caf\xc3\xa9"])), [1])
    with pytest.raises(ValueError, match="the vocabulary repeats \\['a'\\]"):
        L.StringLookup(vocabulary=["a", "b", "a"])
    with pytest.raises(ValueError, match="contains the mask_token ''"):
        L.StringLookup(vocabulary=["a", ""], mask_token="")
    with pytest.raises(ValueError, match="every input must be in the vocabulary; found \\['z'\\]"):
        L.StringLookup(vocabulary=VOCAB, num_oov_indices=0)(np.array(["a", "z"]))
    with pytest.raises(ValueError, match="output_mode must be 'int' when invert=True"):
        L.StringLookup(vocabulary=VOCAB, invert=True, output_mode="one_hot")
    with pytest.raises(ValueError, match="exceeds max_tokens=3"):
        L.StringLookup(vocabulary=VOCAB, max_tokens=3)
    with trace(), pytest.raises(TypeError,  # inside a compiled graph (a model's host prefix
                                match=r"'sl' \(StringLookup\) prepares data on the host"):
        L.StringLookup(vocabulary=VOCAB, name="sl")(kiln.placeholder((None, 3), "int32"))


def test_integer_lookup_doc_examples():
    vocab = [12, 36, 1138, 42]
    data = np.array([[12, 1138, 42], [42, 1000, 36]])
    np.testing.assert_array_equal(L.IntegerLookup(vocabulary=vocab)(data),
                                  [[1, 3, 4], [4, 0, 2]])
    np.testing.assert_array_equal(L.IntegerLookup(vocabulary=vocab, num_oov_indices=2)(data),
                                  [[2, 4, 5], [5, 0, 3]])
    adapted = L.IntegerLookup()
    adapted.adapt(data)
    assert adapted.get_vocabulary() == [-1, 42, 1138, 1000, 36, 12]
    inv = L.IntegerLookup(vocabulary=vocab, invert=True)
    np.testing.assert_array_equal(inv(np.array([[1, 3, 4], [4, 0, 2]])),
                                  [[12, 1138, 42], [42, -1, 36]])


@pytest.mark.parametrize("kwargs", [
    {}, {"num_oov_indices": 3}, {"mask_token": 0}, {"mask_token": 0, "output_mode": "count"},
    {"output_mode": "one_hot"}, {"output_mode": "multi_hot", "num_oov_indices": 2},
    {"invert": True}, {"invert": True, "mask_token": 0},
    {"output_mode": "tf_idf", "idf_weights": [0.5, 1.0, 1.5, 2.0]}])
def test_integer_lookup_in_a_model_equals_the_host_path(kwargs):
    """The graph path (inside a model) and the host path (arrays) give the same numbers."""
    layer = L.IntegerLookup(vocabulary=[7, -3, 12, 5], **kwargs)
    x = np.array([[7, 0, 12, -8], [5, 5, 99, -3]], np.int64)
    if kwargs.get("invert"):
        x = np.array([[0, 1, 2, 5], [3, 4, 7, -1]], np.int64)
    inp = kiln.Input((4,), dtype="int64")
    model = kiln.Model(inp, layer(inp))
    np.testing.assert_allclose(model.predict(x, verbose=0), layer(x), rtol=1e-6)


def test_hashing_doc_examples():
    letters = np.array([["A"], ["B"], ["C"], ["D"], ["E"]])
    np.testing.assert_array_equal(L.Hashing(num_bins=3)(letters).ravel(), [1, 0, 1, 1, 2])
    np.testing.assert_array_equal(L.Hashing(num_bins=3, salt=133)(letters).ravel(),
                                  [0, 0, 2, 1, 0])
    masked = L.Hashing(num_bins=3, mask_value="")(np.array([["A"], ["B"], [""], ["C"], ["D"]]))
    np.testing.assert_array_equal(masked.ravel(), [1, 1, 0, 2, 2])
    hot = L.Hashing(num_bins=3, output_mode="one_hot")(letters)
    np.testing.assert_array_equal(hot, np.eye(3)[[1, 0, 1, 1, 2]])
    # numbers hash as their decimal strings, floats truncated first
    ints = L.Hashing(num_bins=7)(np.array([[12], [-5]]))
    np.testing.assert_array_equal(ints, [[fingerprint64(b"12") % 7], [fingerprint64(b"-5") % 7]])
    np.testing.assert_array_equal(L.Hashing(num_bins=7)(np.array([[12.7]])), ints[:1])


def test_hashing_errors():
    with pytest.raises(ValueError, match="num_bins must be a positive int"):
        L.Hashing(0)
    with pytest.raises(ValueError, match="salt must be an int or a pair"):
        L.Hashing(3, salt="pepper")
    with trace(), pytest.raises(TypeError, match=r"\(Hashing\) prepares data on the host"):
        L.Hashing(3)(kiln.placeholder((None, 1)))


def test_siphash_reference_vectors():
    k0, k1 = struct.unpack("<QQ", bytes(range(16)))
    assert siphash24(k0, k1, b"") == 0x726FDB47DD0E0E31
    assert siphash24(k0, k1, bytes(range(15))) == 0xA129CA6149BE45E5


def test_fingerprint64_matches_pyfarmhash():
    farmhash = pytest.importorskip("farmhash")
    rng = np.random.default_rng(0)
    for n in list(range(0, 70)) + [95, 128, 129, 200, 1000]:
        s = "".join(chr(c) for c in rng.integers(32, 127, size=n))
        assert fingerprint64(s.encode()) == farmhash.fingerprint64(s), n


def test_string_lookup_prepares_batches_for_fit():
    """The documented flow: a StringLookup maps each batch's strings to ids in the data
    pipeline (a PyDataset here), and the model sees exactly the ids of the vocabulary."""
    words = np.array([["b", "a", "q"], ["c", "c", "a"], ["a", "q", "b"], ["b", "b", "c"]])
    y = np.array([0, 1, 0, 1])
    lookup = L.StringLookup(vocabulary=["a", "b", "c"])
    ids = {"q": 0, "a": 1, "b": 2, "c": 3}
    manual = np.vectorize(ids.get)(words)

    class Batches(kiln.utils.PyDataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return lookup(words[2 * i:2 * i + 2]), y[2 * i:2 * i + 2]

    inp = kiln.Input((3,), dtype="int64")
    out = L.Dense(2, activation="softmax")(L.Flatten()(L.Embedding(4, 2)(inp)))
    model = kiln.Model(inp, out)
    model.compile("sgd", "sparse_categorical_crossentropy")
    history = model.fit(Batches(), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    np.testing.assert_array_equal(lookup(words), manual)
    np.testing.assert_array_equal(model.predict(lookup(words), verbose=0),
                                  model.predict(manual, verbose=0))


@pytest.mark.parametrize("cls,vocab,data", [
    (L.IntegerLookup, [3, 7, 9], [[3, 9], [7, 5]]),
    (L.StringLookup, ["a", "b", "c"], [["a", "c"], ["b", "z"]])])
def test_keras_deprecated_mode_names_are_the_modes_they_name(cls, vocab, data):
    """Keras maps ``output_mode="binary"`` to ``"multi_hot"`` and ``"tf-idf"`` to
    ``"tf_idf"`` (keras.io's structured-data example still uses "binary")."""
    old = cls(vocabulary=vocab, output_mode="binary")
    assert old.get_config()["output_mode"] == "multi_hot"
    want = cls(vocabulary=vocab, output_mode="multi_hot")(np.array(data))
    np.testing.assert_array_equal(np.asarray(old(np.array(data))), np.asarray(want))
    # rows: OOV index 0, then the vocabulary in order
    np.testing.assert_array_equal(np.asarray(want), [[0, 1, 0, 1], [1, 0, 1, 0]])
    idf = cls(vocabulary=vocab, output_mode="tf-idf", idf_weights=[1.0, 2.0, 3.0])
    assert idf.output_mode == "tf_idf"
