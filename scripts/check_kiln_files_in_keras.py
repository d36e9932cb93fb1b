"""One-off check that Keras 3 loads the files kiln writes for sequence models (RNNs,
wrappers, attention, masks) and predicts what kiln predicted.

Two steps, in two environments (kiln never imports Keras, and this script imports kiln only
in ``write`` and Keras only in ``check``):

    # 1. in kiln's environment: build the models of tests/fixtures/keras (seq_rnn, bidir_rnn,
    #    transformer, masked_lstm) in kiln, train them a few steps, save them
    KILN_CACHE_DIR=/tmp/kc python scripts/check_kiln_files_in_keras.py write /tmp/kiln_files

    # 2. in an environment with Keras 3 (e.g. keras==3.15.1 with jax, numpy, h5py)
    KERAS_BACKEND=jax /tmp/kvenv/bin/python scripts/check_kiln_files_in_keras.py check \\
        /tmp/kiln_files

``write`` puts into the folder, for each model NAME:

    NAME.keras           model.save (Keras 3 zip), compiled, with the Adam state
    NAME.h5              model.save (kiln's HDF5 model file)
    NAME.weights.h5      save_weights(format="keras") (Keras 3 weights layout)
    NAME_kiln.npz        x (inputs), preds (kiln's predictions), iterations

plus ``masked_lstm_resaved.keras`` and ``transformer_resaved.keras`` (the Keras fixtures loaded
by kiln and saved again: Keras' NotEqual operation node must survive the round trip).

``check`` loads every file with Keras (``keras.models.load_model``; ``.weights.h5`` into a
twin built in Keras by scripts/make_keras_fixtures.py), compares the predictions with kiln's
(atol 1e-5) and the optimizer's iteration count, prints one line per file and exits non-zero
if any failed.
"""

from __future__ import annotations

import os
import sys
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "keras")
NAMES = ("seq_rnn", "bidir_rnn", "transformer", "masked_lstm")
ATOL = 1e-5


# ---- kiln side ------------------------------------------------------------------------------
def kiln_model(name: str):  # noqa: ANN201 - kiln is imported lazily
    """The fixture architecture ``name`` (scripts/make_keras_fixtures.py) built in kiln."""
    import kiln
    from kiln import layers

    if name == "seq_rnn":
        return kiln.Sequential([kiln.Input((7,), dtype="int32"), layers.Embedding(20, 6),
                                layers.LSTM(8, return_sequences=True), layers.GRU(5),
                                layers.Dense(3, activation="softmax")])
    if name == "bidir_rnn":
        x = kiln.Input((6, 4))
        h = layers.Bidirectional(layers.LSTM(5, return_sequences=True))(x)
        h = layers.GRU(4, reset_after=False, return_sequences=True)(h)
        h = layers.SimpleRNN(3, return_sequences=True)(h)
        return kiln.Model(x, layers.TimeDistributed(layers.Dense(2))(h))
    if name == "transformer":
        x = kiln.Input((5, 8))
        att = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
        h = layers.LayerNormalization()(layers.Add()([x, att]))
        ff = layers.Dense(8)(layers.Dense(16, activation="relu")(h))
        h = layers.LayerNormalization()(layers.Add()([h, ff]))
        return kiln.Model(x, layers.Dense(3, activation="softmax")(
            layers.GlobalAveragePooling1D()(h)))
    if name == "masked_lstm":
        x = kiln.Input((7,), dtype="int32")
        h = layers.LSTM(5)(layers.Embedding(20, 6, mask_zero=True)(x))
        return kiln.Model(x, layers.Dense(2)(h))
    raise ValueError(f"unknown model {name!r}")


def _data(name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Inputs, targets and loss for ``name`` (the fixture inputs, fresh targets)."""
    x = np.load(os.path.join(FIXTURES, f"{name}_inputs.npy"))
    rng = np.random.default_rng(11)
    if name in ("seq_rnn", "transformer"):
        return x, rng.integers(0, 3, size=len(x)), "sparse_categorical_crossentropy"
    shape = (len(x), 6, 2) if name == "bidir_rnn" else (len(x), 2)
    return x, rng.normal(size=shape).astype("float32"), "mean_squared_error"


def write(folder: str) -> None:
    import kiln
    from kiln.saving import load_model, save_weights

    os.makedirs(folder, exist_ok=True)
    kiln.utils.set_random_seed(7)
    for name in NAMES:
        model = kiln_model(name)
        x, y, loss = _data(name)
        model.compile(kiln.optimizers.Adam(0.01), loss)
        model.fit(x, y, batch_size=8, epochs=2, verbose=0)
        base = os.path.join(folder, name)
        model.save(base + ".keras")
        model.save(base + ".h5")
        save_weights(model, base + ".weights.h5", format="keras")
        np.savez(base + "_kiln.npz", x=x, preds=model.predict(x, verbose=0),
                 iterations=int(model.optimizer.iterations.numpy()))
        print(f"wrote {base}.keras/.h5/.weights.h5", file=sys.stderr)
    for name in ("masked_lstm", "transformer"):  # Keras' own files, loaded and saved by kiln
        model = load_model(os.path.join(FIXTURES, f"{name}.keras"))
        x = np.load(os.path.join(FIXTURES, f"{name}_inputs.npy"))
        base = os.path.join(folder, f"{name}_resaved")
        model.save(base + ".keras")
        np.savez(base + "_kiln.npz", x=x, preds=model.predict(x, verbose=0),
                 iterations=int(model.optimizer.iterations.numpy()))


# ---- Keras side -----------------------------------------------------------------------------
def _keras_twin(name: str):  # noqa: ANN201 - keras is imported lazily
    sys.path.insert(0, HERE)
    import make_keras_fixtures

    model = make_keras_fixtures.MODELS[name]()[0]
    return model


def check(folder: str) -> int:
    import keras

    failures = 0
    results = []
    stems = [n for n in NAMES] + ["masked_lstm_resaved", "transformer_resaved"]
    for stem in stems:
        npz = os.path.join(folder, f"{stem}_kiln.npz")
        if not os.path.exists(npz):
            continue
        data = np.load(npz)
        x, want, iterations = data["x"], data["preds"], int(data["iterations"])
        exts = [".keras"] if stem.endswith("_resaved") else [".keras", ".h5", ".weights.h5"]
        for ext in exts:
            path = os.path.join(folder, stem + ext)
            try:
                if ext == ".weights.h5":
                    model = _keras_twin(stem)
                    model.load_weights(path)
                    note = ""
                else:
                    model = keras.models.load_model(path)
                    opt = getattr(model, "optimizer", None)
                    it = None if opt is None else int(np.asarray(
                        keras.ops.convert_to_numpy(opt.iterations)))
                    note = f", optimizer iterations {it} (kiln {iterations})"
                    if it != iterations:
                        raise AssertionError(f"optimizer iterations {it}, kiln {iterations}")
                got = np.asarray(model.predict(x, verbose=0))
                diff = float(np.max(np.abs(got - want)))
                ok = got.shape == want.shape and diff <= ATOL
                results.append(f"{'OK  ' if ok else 'FAIL'} {stem}{ext}: max |keras - kiln| "
                               f"= {diff:.2e}{note}")
                failures += not ok
            except Exception as exc:  # noqa: BLE001 - report every file
                failures += 1
                last = traceback.format_exception_only(type(exc), exc)[-1].strip()
                results.append(f"FAIL {stem}{ext}: {last[:600]}")
    for line in results:
        print(line)
    print(f"{len(results) - failures}/{len(results)} files load in Keras {keras.__version__} "
          "with kiln's predictions")
    return 1 if failures or not results else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        raise SystemExit(__doc__)
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
