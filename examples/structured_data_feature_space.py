"""Structured data with ``FeatureSpace``, in the spirit of keras.io's
``structured_data_classification_with_feature_space``: a table of numeric, integer and string
columns -> ``kiln.utils.FeatureSpace`` (normalized, discretized, categorical features and
crosses) -> a small dense classifier trained on the encoded features.

The table is synthetic and shaped like the keras.io heart-disease data (age, sex, cp, thal,
chol ...); the label depends on a normalized number, a category and a cross of two
categories. With TensorFlow installed the FeatureSpace is mapped over a ``tf.data`` pipeline
(TF ops, as in Keras); without it, it encodes the NumPy dict directly.

    python examples/structured_data_feature_space.py [--quick] [--epochs N]
"""

import argparse

import numpy as np

import kiln
from kiln import layers
from kiln.utils import FeatureSpace


def make_table(n: int, seed: int) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    table = {
        "age": rng.integers(29, 78, n).astype("float32"),
        "sex": rng.integers(0, 2, n).astype("int64"),
        "cp": rng.integers(0, 4, n).astype("int64"),
        "thal": rng.choice(["fixed", "normal", "reversible"], n),
        "chol": rng.normal(245, 50, n).astype("float32"),
        "oldpeak": rng.uniform(0, 6, n).astype("float32"),
    }
    score = ((table["chol"] - 245) / 50 + 1.5 * (table["thal"] == "reversible")
             + 1.2 * ((table["sex"] == 1) & (table["cp"] >= 2)) - 0.8
             + 0.3 * rng.normal(size=n))
    return table, (score > 0).astype("float32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small run (CI)")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()
    kiln.utils.set_random_seed(0)
    n = 3000 if args.quick else 20000
    epochs = args.epochs or (8 if args.quick else 20)
    (train, y_train), (test, y_test) = make_table(n, 0), make_table(n // 4, 1)

    space = FeatureSpace(
        features={
            "age": FeatureSpace.float_discretized(num_bins=10),
            "sex": FeatureSpace.integer_categorical(num_oov_indices=0),
            "cp": FeatureSpace.integer_categorical(num_oov_indices=0),
            "thal": FeatureSpace.string_categorical(num_oov_indices=0),
            "chol": FeatureSpace.float_normalized(),
            "oldpeak": FeatureSpace.float_normalized(),
        },
        crosses=[FeatureSpace.cross(("sex", "cp"), crossing_dim=16)],
        output_mode="concat")
    space.adapt(train)

    encoded = space.get_encoded_features()
    x = layers.Dense(32, activation="relu")(encoded)
    x = layers.Dropout(0.2)(x)
    outputs = layers.Dense(1, activation="sigmoid")(x)
    model = kiln.Model(encoded, outputs)
    model.compile("adam", "binary_crossentropy", metrics=["accuracy"])
    print(f"encoded features: {encoded.shape[-1]} columns")

    from kiln.utils.tf_interop import tf_available
    if tf_available():  # Keras' way: the FeatureSpace as a step of a tf.data pipeline
        import tensorflow as tf
        train_ds = tf.data.Dataset.from_tensor_slices((train, y_train)).shuffle(
            n, seed=0).batch(64).map(lambda x, y: (space(x), y))
        test_x, test_y = space(test), y_test
        model.fit(train_ds, epochs=epochs, verbose=2)
    else:  # no TensorFlow: encode the NumPy dict on the host
        model.fit(space(train), y_train, batch_size=64, epochs=epochs, verbose=2)
        test_x, test_y = space(test), y_test
    _, accuracy = model.evaluate(test_x, test_y, verbose=0)
    print(f"test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
