"""Fashion-MNIST: a convnet with batch normalization that tells T-shirts from sneakers, with
EarlyStopping on a validation split and a look at a few predictions.

Fashion-MNIST (Zalando Research) has 60,000 training and 10,000 test 28x28 grayscale images
of clothing in 10 classes. kiln finds it in ``$KILN_DATA_DIR``, ``~/.kiln/datasets`` or
Debian's package (``apt-get install dataset-fashion-mnist``), or downloads it. This example
reaches about 89% test accuracy in its default 4 epochs (about 3 minutes on 2 cores) and about
91% with ``--epochs 12``.

    python examples/fashion_mnist.py [--quick] [--epochs N] [--train-size N]

When Fashion-MNIST cannot be found or downloaded, it says so and runs on the MNIST digits
shipped with kiln instead, so that the example still runs.
"""

import argparse

import numpy as np

import kiln
from kiln import layers
from kiln.datasets import DatasetNotFoundError, fashion_mnist, mnist


def load(quick: bool):
    """Fashion-MNIST and its class names, or (not found) the MNIST sample and digits."""
    import os

    if quick:  # CI: never download
        os.environ.setdefault("KILN_DATASETS_OFFLINE", "1")
    try:
        data = fashion_mnist.load_data()
        print("Training on Fashion-MNIST (60,000 training / 10,000 test images).")
        return data, list(fashion_mnist.CLASS_NAMES)
    except DatasetNotFoundError as exc:
        print(f"{exc}\n\nFashion-MNIST is not available, so this run uses the MNIST sample "
              "shipped with kiln (10,000 / 2,000 digits) instead.")
        return mnist.load_sample(), [str(d) for d in range(10)]


def build_model() -> kiln.Model:
    return kiln.Sequential([
        kiln.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, 3, use_bias=False),
        layers.BatchNormalization(momentum=0.9),
        layers.Activation("relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, use_bias=False),
        layers.BatchNormalization(momentum=0.9),
        layers.Activation("relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dropout(0.4),
        layers.Dense(10, activation="softmax"),
    ], name="fashion_convnet")


def main(quick: bool = False, epochs: int | None = None, train_size: int | None = None,
         seed: int = 1337) -> float:
    kiln.utils.set_random_seed(seed)
    ((x_train, y_train), (x_test, y_test)), class_names = load(quick)
    x_train = np.expand_dims(x_train.astype("float32") / 255, -1)
    x_test = np.expand_dims(x_test.astype("float32") / 255, -1)
    if quick:  # CI: a subset, one epoch
        train_size = train_size or 6000
        x_test, y_test = x_test[:2000], y_test[:2000]
    if train_size:
        x_train, y_train = x_train[:train_size], y_train[:train_size]
    print(f"{len(x_train)} train samples, {len(x_test)} test samples")

    model = build_model()
    model.summary()
    model.compile(optimizer=kiln.optimizers.Adam(1e-3),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    stop = kiln.callbacks.EarlyStopping(monitor="val_loss", patience=2,
                                        restore_best_weights=True)
    model.fit(x_train, y_train, batch_size=128, epochs=epochs or (1 if quick else 4),
              validation_split=0.1, callbacks=[stop], verbose=1)

    loss, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    print(f"Test loss: {loss:.4f}")
    print(f"Test accuracy: {accuracy:.4f}")

    # A few predictions, with the model's confidence.
    probabilities = model.predict(x_test[:8], verbose=0)
    for p, truth in zip(probabilities, y_test[:8]):
        guess = int(np.argmax(p))
        mark = "ok   " if guess == truth else "wrong"
        print(f"  {mark} predicted {class_names[guess]!r:15} ({p[guess]:.0%}), "
              f"true {class_names[truth]!r}")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one epoch on 6,000 training images (CI)")
    parser.add_argument("--epochs", type=int, default=None, help="default 4 (--quick: 1)")
    parser.add_argument("--train-size", type=int, default=None,
                        help="train on the first N training images only")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    main(args.quick, args.epochs, args.train_size, args.seed)
