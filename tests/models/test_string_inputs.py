"""String model inputs (issue 44): ``kiln.Input(dtype="string")`` feeding host preprocessing
layers, split at build time into a host prefix and the compiled graph
(``kiln.models.host_prefix``). The oracle is the same model run on the data vectorized by the
same layer beforehand (Keras' "vectorize, then model")."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import layers

TEXTS = np.array(["the good film", "a bad movie", "good good plot", "awful boring actor",
                  "superb film", "bad plot", "the movie was good", "boring"], dtype=object)
LABELS = np.array([1, 0, 1, 0, 1, 0, 1, 0], dtype=np.float32)


def _text_model(seed: int = 0):
    kiln.utils.set_random_seed(seed)
    tv = layers.TextVectorization(max_tokens=40, output_sequence_length=5, name="vectorize")
    tv.adapt(TEXTS)
    ids = kiln.Input(shape=(None,), dtype="int64")
    x = layers.Embedding(40, 4)(ids)
    x = layers.GlobalAveragePooling1D()(x)
    model = kiln.Model(ids, layers.Dense(1, activation="sigmoid")(x))
    text = kiln.Input(shape=(1,), dtype="string", name="text")
    end_to_end = kiln.Model(text, model(tv(text)))
    return tv, model, end_to_end


def test_string_input_is_a_host_tensor():
    s = kiln.Input(shape=(1,), dtype="string", name="s")
    assert (s.shape, s.dtype, s.name) == ((None, 1), "string", "s")
    tv = layers.TextVectorization(vocabulary=["a", "b"], output_sequence_length=3)
    out = tv(s)
    assert out.shape == (None, 3) and out.dtype == "int64"
    free = layers.TextVectorization(vocabulary=["a", "b"])  # no output_sequence_length
    assert free(s).shape == (None, None)
    assert layers.StringLookup(vocabulary=["a", "b"], output_mode="one_hot")(s).shape == \
        (None, 3)


def test_predict_on_raw_strings_equals_vectorize_then_model():
    tv, model, e2e = _text_model()
    want = model.predict(tv(TEXTS[:, None]), verbose=0)
    np.testing.assert_allclose(e2e.predict(TEXTS, verbose=0), want, rtol=1e-6)
    np.testing.assert_allclose(e2e.predict(TEXTS[:, None], batch_size=3, verbose=0), want,
                               rtol=1e-6)
    np.testing.assert_allclose(e2e.predict(list(TEXTS), verbose=0), want, rtol=1e-6)
    np.testing.assert_allclose(e2e(TEXTS[:, None]), want, rtol=1e-6)  # __call__ on arrays
    bytes_texts = np.array([t.encode() for t in TEXTS], dtype=object)
    np.testing.assert_allclose(e2e.predict(bytes_texts, verbose=0), want, rtol=1e-6)
    # the trainer sees the compiled graph's numeric input
    assert [(s.shape, s.dtype) for s in e2e._model_input_specs()] == [((None, 5), "int64")]
    assert e2e.inputs[0].dtype == "string"


def test_evaluate_on_batches_and_fit_train_the_inner_model():
    tv, model, e2e = _text_model()
    ids = tv(TEXTS[:, None])
    e2e.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    want = model.evaluate(ids, LABELS, verbose=0)
    batches = [(TEXTS[i:i + 3], LABELS[i:i + 3]) for i in range(0, 8, 3)]  # like tf.data
    got = e2e.evaluate(iter(batches), verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    start = model.get_weights()
    e2e.fit(TEXTS, LABELS, batch_size=4, epochs=2, shuffle=False, verbose=0)
    trained = model.get_weights()  # the end-to-end model trains the shared layers
    assert any(not np.allclose(a, b) for a, b in zip(start, trained))
    model.set_weights(start)
    model.compile(loss="binary_crossentropy", optimizer="adam")  # a fresh Adam, as e2e's
    model.fit(ids, LABELS, batch_size=4, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(trained, model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_summary_config_and_keras_file_keep_the_whole_model(tmp_path):
    tv, model, e2e = _text_model()
    lines: list[str] = []
    e2e.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert "text (InputLayer)" in text and "vectorize (TextVectorization)" in text
    config = e2e.get_config()
    assert config["layers"][0]["config"]["dtype"] == "string"
    want = e2e.predict(TEXTS, verbose=0)
    clone = kiln.Model.from_config(config)
    clone.set_weights(e2e.get_weights())
    np.testing.assert_allclose(clone.predict(TEXTS, verbose=0), want, rtol=1e-6)
    path = str(tmp_path / "e2e.keras")
    e2e.save(path)
    back = kiln.saving.load_model(path)
    assert back.get_layer("vectorize").get_vocabulary() == tv.get_vocabulary()
    np.testing.assert_allclose(back.predict(TEXTS, verbose=0), want, rtol=1e-6)


def test_string_and_numeric_inputs_together():
    kiln.utils.set_random_seed(1)
    city = kiln.Input(shape=(1,), dtype="string", name="city")
    age = kiln.Input(shape=(1,), name="age")
    lookup = layers.StringLookup(vocabulary=["paris", "rome", "oslo"], output_mode="one_hot",
                                dtype="float32")
    x = layers.Concatenate()([lookup(city), age])
    out = layers.Dense(2)(x)
    model = kiln.Model({"city": city, "age": age}, out)
    cities = np.array([["rome"], ["oslo"], ["lima"]])
    ages = np.array([[30.0], [40.0], [50.0]], np.float32)
    dense = model.layers[-1]
    kernel, bias = dense.get_weights()
    want = np.concatenate([lookup(cities).astype(np.float32), ages], axis=1) @ kernel + bias
    np.testing.assert_allclose(model.predict({"city": cities, "age": ages}, verbose=0), want,
                               rtol=1e-5)
    assert [s.name for s in model._model_input_specs()] == ["age", lookup.name]


def test_feature_space_inference_model_on_raw_features():
    from kiln.utils import FeatureSpace
    data = {"x": np.array([1.0, 2.0, 3.0, 4.0], np.float32),
            "c": np.array(["a", "b", "a", "c"], dtype=object)}
    space = FeatureSpace({"x": "float_normalized", "c": "string_categorical"})
    space.adapt(data)
    encoded = space.get_encoded_features()
    out = layers.Dense(1)(encoded)
    training = kiln.Model(encoded, out)
    inference = kiln.Model(space.get_inputs(), out)
    want = training.predict(space(data), verbose=0)
    np.testing.assert_allclose(inference.predict(data, verbose=0), want, rtol=1e-5)


def test_a_string_reaching_a_numeric_layer_or_op_is_refused():
    s = kiln.Input(shape=(1,), dtype="string", name="words")
    with pytest.raises(TypeError, match=r"Layer 'dense_s' \(Dense\) received the string "
                                        r"input\(s\) \['words'\]"):
        layers.Dense(2, name="dense_s")(s)
    with pytest.raises(TypeError, match="the string input 'words'.*cannot enter a kiln graph"):
        kiln.ops.add(s, 1.0)
    x = kiln.Input(shape=(3,))
    hashed = layers.Hashing(4, name="late_hash")(layers.Dense(1)(x))
    with pytest.raises(ValueError, match=r"layer 'late_hash' \(Hashing\) runs on the host, "
                                         "before the compiled graph"):
        kiln.Model(x, layers.Embedding(4, 2)(hashed))
    with pytest.raises(ValueError, match="is a string tensor"):
        kiln.Model(s, s)
    with pytest.raises(TypeError, match=r"Layer 'dense_q' \(Dense\) received the string"):
        kiln.Sequential([kiln.Input(shape=(1,), dtype="string"), layers.Dense(2, name="dense_q")])


def test_host_layer_needs_its_vocabulary_before_a_symbolic_call():
    s = kiln.Input(shape=(1,), dtype="string")
    with pytest.raises(ValueError, match=r"could not run on a one-sample probe.*adapt it"):
        layers.StringLookup(output_mode="multi_hot")(s)
