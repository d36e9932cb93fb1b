"""Generates the Keras fixture files under tests/fixtures/keras/ (run with real Keras).

Keras is not a kiln dependency. Use a scratch environment (any Keras 3 backend; the sequence
fixtures were written with jax):

    python -m venv /tmp/kvenv
    /tmp/kvenv/bin/pip install keras==3.15.1 jax h5py
    KERAS_BACKEND=jax /tmp/kvenv/bin/python scripts/make_keras_fixtures.py [NAME ...]

With names, only those fixtures are (re)written; without, all of them. Models:

    mlp, cnn, functional     Dense/Conv2D/BatchNormalization/LayerNormalization models
    seq_rnn                  Sequential Embedding -> LSTM(return_sequences) -> GRU -> Dense
    bidir_rnn                functional Bidirectional(LSTM) -> GRU(reset_after=False) ->
                             SimpleRNN -> TimeDistributed(Dense)
    transformer              MultiHeadAttention + LayerNormalization + Dense +
                             GlobalAveragePooling1D
    masked_lstm              Embedding(mask_zero=True) -> LSTM -> Dense (Keras writes the mask
                             as a NotEqual operation node in the functional config)

For each model NAME it writes:

    NAME.keras               Keras 3 zip (config.json, metadata.json, model.weights.h5)
    NAME.weights.h5          Keras 3 weights file (``model.save_weights``)
    NAME.h5                  legacy whole-model HDF5 (``model.save("NAME.h5")``)
    NAME_weights_legacy.h5   legacy weights-only HDF5 (tf.keras 2 ``save_weights("x.h5")``
                             layout, written with Keras' own legacy writer)
    NAME_inputs.npy          inputs (one array, or for several inputs an .npz-like stack:
                             ``NAME_inputs_0.npy``, ``NAME_inputs_1.npy``)
    NAME_preds.npy           what Keras predicted for those inputs (inference mode)

Every model is compiled with Adam and trained for a few steps, so the files carry optimizer
state and BatchNormalization moving statistics that differ from their initial values.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import h5py  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import layers  # noqa: E402
from keras.src.legacy.saving import legacy_h5_format  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                   "keras")


def mlp() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    model = keras.Sequential([
        keras.Input((8,)),
        layers.Dense(16, activation="relu"),
        layers.Dropout(0.25),
        layers.Dense(12, activation="tanh"),
        layers.Dense(4, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 8)).astype("float32")
    y = rng.integers(0, 4, size=(32,))
    return model, [x], y


def cnn() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    model = keras.Sequential([
        keras.Input((8, 8, 2)),
        layers.Conv2D(4, 3, padding="same", activation="relu"),
        layers.BatchNormalization(),
        layers.MaxPooling2D(2),
        layers.Conv2D(3, 3, activation="relu"),
        layers.Flatten(),
        layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(2)
    x = rng.normal(size=(12, 8, 8, 2)).astype("float32")
    y = rng.integers(0, 3, size=(12,))
    return model, [x], y


def functional() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    a = keras.Input((6,), name="in_a")
    b = keras.Input((6,), name="in_b")
    ha = layers.Dense(8, activation="relu")(a)
    hb = layers.Dense(8)(b)
    s = layers.Add()([ha, hb])
    c = layers.Concatenate()([s, a])
    n = layers.LayerNormalization()(c)
    out = layers.Dense(2, name="head")(n)
    model = keras.Model([a, b], out, name="two_towers")
    model.compile(optimizer=keras.optimizers.Adam(0.005), loss="mean_squared_error")
    rng = np.random.default_rng(3)
    xa = rng.normal(size=(16, 6)).astype("float32")
    xb = rng.normal(size=(16, 6)).astype("float32")
    y = rng.normal(size=(16, 2)).astype("float32")
    return model, [xa, xb], y


# ---- sequence models (RNNs, wrappers, attention, masks) ---------------------------------------
def seq_rnn() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    """Sequential Embedding -> LSTM(return_sequences) -> GRU -> Dense."""
    model = keras.Sequential([
        keras.Input((7,), dtype="int32"),
        layers.Embedding(20, 6),
        layers.LSTM(8, return_sequences=True),
        layers.GRU(5),
        layers.Dense(3, activation="softmax"),
    ])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(4)
    x = rng.integers(0, 20, size=(16, 7)).astype("int32")
    y = rng.integers(0, 3, size=(16,))
    return model, [x], y


def bidir_rnn() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    """Functional Bidirectional(LSTM, return_sequences) -> GRU(reset_after=False) ->
    SimpleRNN -> TimeDistributed(Dense)."""
    x_in = keras.Input((6, 4), name="series")
    h = layers.Bidirectional(layers.LSTM(5, return_sequences=True))(x_in)
    h = layers.GRU(4, reset_after=False, return_sequences=True)(h)
    h = layers.SimpleRNN(3, return_sequences=True)(h)
    out = layers.TimeDistributed(layers.Dense(2))(h)
    model = keras.Model(x_in, out, name="bidir_rnn")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mean_squared_error")
    rng = np.random.default_rng(5)
    x = rng.normal(size=(16, 6, 4)).astype("float32")
    y = rng.normal(size=(16, 6, 2)).astype("float32")
    return model, [x], y


def transformer() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    """A tiny transformer block: MultiHeadAttention + residual + LayerNormalization + a
    Dense feed-forward, then GlobalAveragePooling1D and a softmax head."""
    x_in = keras.Input((5, 8), name="tokens")
    att = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x_in, x_in)
    h = layers.LayerNormalization()(layers.Add()([x_in, att]))
    ff = layers.Dense(8)(layers.Dense(16, activation="relu")(h))
    h = layers.LayerNormalization()(layers.Add()([h, ff]))
    out = layers.Dense(3, activation="softmax")(layers.GlobalAveragePooling1D()(h))
    model = keras.Model(x_in, out, name="transformer")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(6)
    x = rng.normal(size=(16, 5, 8)).astype("float32")
    y = rng.integers(0, 3, size=(16,))
    return model, [x], y


def masked_lstm() -> tuple[keras.Model, list[np.ndarray], np.ndarray]:
    """Embedding(mask_zero=True) -> LSTM -> Dense: Keras 3 writes the mask computation as a
    ``NotEqual`` operation node (module ``keras.src.ops.numpy``) whose output is the LSTM
    call's ``mask`` argument."""
    x_in = keras.Input((7,), dtype="int32", name="ids")
    h = layers.Embedding(20, 6, mask_zero=True)(x_in)
    h = layers.LSTM(5)(h)
    out = layers.Dense(2)(h)
    model = keras.Model(x_in, out, name="masked_lstm")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mean_squared_error")
    rng = np.random.default_rng(7)
    x = rng.integers(1, 20, size=(16, 7)).astype("int32")
    lengths = rng.integers(1, 8, size=16)
    for i, n in enumerate(lengths):  # padded at the end, and a few zeros inside
        x[i, n:] = 0
    x[0, 0] = 0
    x[3, 1] = 0
    y = rng.normal(size=(16, 2)).astype("float32")
    return model, [x], y


MODELS = {"mlp": mlp, "cnn": cnn, "functional": functional, "seq_rnn": seq_rnn,
          "bidir_rnn": bidir_rnn, "transformer": transformer, "masked_lstm": masked_lstm}


def save_legacy_weights(model: keras.Model, path: str) -> None:
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)


def main(names: list[str]) -> None:
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise SystemExit(f"unknown fixture(s) {unknown}; known: {list(MODELS)}")
    os.makedirs(OUT, exist_ok=True)
    for name in names or list(MODELS):
        # a seed per model, so regenerating one fixture leaves the others' bytes alone
        keras.utils.set_random_seed(1234 + list(MODELS).index(name))
        model, xs, y = MODELS[name]()
        model.fit(xs if len(xs) > 1 else xs[0], y, batch_size=8, epochs=2, verbose=0)
        x_in = xs if len(xs) > 1 else xs[0]
        preds = np.asarray(model.predict(x_in, verbose=0), dtype="float32")
        base = os.path.join(OUT, name)
        model.save(base + ".keras")
        model.save_weights(base + ".weights.h5")
        model.save(base + ".h5")
        save_legacy_weights(model, base + "_weights_legacy.h5")
        if len(xs) == 1:
            np.save(base + "_inputs.npy", xs[0])
        else:
            for i, x in enumerate(xs):
                np.save(f"{base}_inputs_{i}.npy", x)
        np.save(base + "_preds.npy", preds)
        # Self-check: Keras reloads its own files to the same predictions.
        for ext in (".keras", ".h5"):
            if ext == ".h5" and name == "masked_lstm":
                # Keras 3.15.1 cannot reload this legacy file itself: its legacy
                # deserializer rejects the NotEqual operation ("Unknown layer: 'NotEqual'")
                continue
            again = keras.models.load_model(base + ext)
            np.testing.assert_allclose(again.predict(x_in, verbose=0), preds, atol=1e-6)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total / 1024:.1f} KiB, to {OUT}",
          file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
