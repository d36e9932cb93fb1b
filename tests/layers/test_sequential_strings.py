"""``Sequential`` models that take strings, as Keras 3 allows: ``keras.Sequential([keras.Input(
shape=(1,), dtype="string"), layers.StringLookup(...), ...])`` and ``Sequential([
layers.TextVectorization(...), layers.Embedding(...), ...])`` fed a string array. The host
layers run on the arrays before the compiled graph (``kiln.models.host_prefix``). Oracles:
Keras' documented StringLookup indices (and Keras itself where installed), NumPy forward
passes, and the same step on the numeric ids."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers

VOCAB = ["a", "b", "c", "d"]
DATA = np.array([["a", "c", "d"], ["d", "z", "b"]])
IDS = np.array([[1, 3, 4], [4, 0, 2]])  # Keras' StringLookup docstring: OOV "z" -> 0
TEXTS = np.array(["the cat sat", "a dog ran far away", "the dog", "cat"])
WORDS = ["the", "cat", "dog", "sat", "ran", "a"]


def _table(rows, dim):
    return np.arange(rows * dim, dtype="float32").reshape(rows, dim) / 10.0


def test_string_input_then_string_lookup_gives_keras_indices():
    model = kiln.Sequential([kiln.Input(shape=(3,), dtype="string"),
                             layers.StringLookup(vocabulary=VOCAB),
                             layers.Embedding(5, 2)])
    table = _table(5, 2)
    model.layers[1].set_weights([table])
    assert model.output_shape == (None, 3, 2)
    np.testing.assert_allclose(model.predict(DATA, verbose=0), table[IDS])
    np.testing.assert_allclose(model(DATA), table[IDS])  # an eager call on the strings


def test_string_lookup_indices_match_keras():
    keras = pytest.importorskip("keras")
    theirs = keras.Sequential([keras.Input(shape=(3,), dtype="string"),
                               keras.layers.StringLookup(vocabulary=VOCAB)])
    want = np.asarray(keras.ops.convert_to_numpy(theirs(DATA)))
    np.testing.assert_array_equal(want, IDS)
    ours = kiln.Sequential([kiln.Input(shape=(3,), dtype="string"),
                            layers.StringLookup(vocabulary=VOCAB), layers.Embedding(5, 1)])
    ours.layers[1].set_weights([np.arange(5, dtype="float32")[:, None]])
    np.testing.assert_array_equal(ours.predict(DATA, verbose=0)[..., 0], want)


def _text_model(tv_first=True):
    tv = layers.TextVectorization(vocabulary=WORDS, output_sequence_length=4)
    return tv, [tv, layers.Embedding(len(WORDS) + 2, 3, name="emb"),
                layers.GlobalAveragePooling1D(), layers.Dense(1, name="out")]


def test_text_vectorization_first_trains_like_the_model_on_its_ids():
    """One SGD step on strings (no Input: built from the data) equals one step of the same
    layers on the ids TextVectorization gives: the same loss and the same new weights."""
    tv, stack = _text_model()
    model = kiln.Sequential(stack)
    model.compile(kiln.optimizers.SGD(0.5), "mse")
    y = np.array([[1.0], [0.0], [1.0], [0.0]], "float32")
    ids = np.asarray(tv(TEXTS))
    assert ids.shape == (4, 4)
    numeric = kiln.Sequential([kiln.Input((4,), dtype="int64"),
                               layers.Embedding(len(WORDS) + 2, 3), layers.GlobalAveragePooling1D(),
                               layers.Dense(1)])
    numeric.compile(kiln.optimizers.SGD(0.5), "mse")
    model.predict(TEXTS[:1], verbose=0)  # builds it from the strings
    numeric.set_weights(model.get_weights())
    h1 = model.fit(TEXTS, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    h2 = numeric.fit(ids, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-6)
    for a, b in zip(model.get_weights(), numeric.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_text_model_predicts_the_numpy_forward_pass():
    tv, stack = _text_model()
    model = kiln.Sequential(stack)
    model.compile("adam", "mse")
    model.fit(TEXTS, np.ones((4, 1)), epochs=2, verbose=0)
    emb, kernel, bias = model.get_weights()
    ids = np.asarray(tv(TEXTS))
    want = emb[ids].mean(axis=1) @ kernel + bias
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.predict(list(TEXTS), verbose=0), want, rtol=1e-5,
                               atol=1e-6)  # a list of str, as Keras takes


def test_config_round_trip_keeps_the_string_input():
    model = kiln.Sequential([kiln.Input(shape=(3,), dtype="string"),
                             layers.StringLookup(vocabulary=VOCAB), layers.Embedding(5, 2)])
    clone = kiln.Sequential.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    assert clone.get_config()["layers"][0]["config"]["dtype"] == "string"
    np.testing.assert_allclose(clone.predict(DATA, verbose=0), model.predict(DATA, verbose=0))


def test_a_graph_layer_on_strings_names_the_layer():
    with pytest.raises(TypeError, match=r"Layer 'dense_on_text' \(Dense\) received the string "
                                        r"input"):
        kiln.Sequential([kiln.Input(shape=(3,), dtype="string"),
                         layers.Dense(2, name="dense_on_text")])


def test_a_string_output_is_refused():
    with pytest.raises(ValueError, match=r"its output \(from layer 'words'\) is a string "
                                         r"tensor"):
        kiln.Sequential([kiln.Input(shape=(1,), dtype="string"),
                         layers.StringLookup(vocabulary=VOCAB, invert=False, name="ids"),
                         layers.StringLookup(vocabulary=VOCAB, invert=True, name="words")])


def test_a_keras_file_round_trip_keeps_the_text_model(tmp_path):
    tv, stack = _text_model()
    model = kiln.Sequential(stack)
    model.compile("sgd", "mse")
    want = model.predict(TEXTS, verbose=0)
    model.save(str(tmp_path / "text.keras"))
    loaded = kiln.saving.load_model(str(tmp_path / "text.keras"))
    np.testing.assert_allclose(loaded.predict(TEXTS, verbose=0), want, rtol=1e-6)
