"""Generates the Keras fixture files under tests/fixtures/keras/ (run ONCE, with real Keras).

Keras is not a kiln dependency. Use a scratch environment:

    python -m venv --system-site-packages /tmp/kerasenv
    /tmp/kerasenv/bin/pip install keras==3.15.1
    KERAS_BACKEND=torch /tmp/kerasenv/bin/python scripts/make_keras_fixtures.py

For each model NAME (mlp, cnn, functional) it writes:

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


def save_legacy_weights(model: keras.Model, path: str) -> None:
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, model)


def main() -> None:
    keras.utils.set_random_seed(1234)
    os.makedirs(OUT, exist_ok=True)
    for name, make in [("mlp", mlp), ("cnn", cnn), ("functional", functional)]:
        model, xs, y = make()
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
            again = keras.models.load_model(base + ext)
            np.testing.assert_allclose(again.predict(x_in, verbose=0), preds, atol=1e-6)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total / 1024:.1f} KiB, to {OUT}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
