"""A multilayer perceptron on MNIST, as in the classic Keras ``mnist_mlp.py``: two hidden
layers of 512 ReLU units with dropout, one-hot targets, categorical cross-entropy and RMSprop.

Like ``mnist_convnet.py`` it trains on the full MNIST when it is installed, otherwise on the
sample shipped inside kiln, and says which (full set: about 98% test accuracy in 10 epochs).
``--plot DIR`` also draws the model graph (Graphviz) and the training curves (matplotlib).

    python examples/mnist_mlp.py [--quick] [--data auto|full|sample] [--epochs N] [--plot DIR]
"""

import argparse
import os

import numpy as np

# The same data choice as the convnet example (full MNIST if installed, else the sample).
from mnist_convnet import load_mnist

import kiln
from kiln import layers

NUM_CLASSES = 10


def build_model() -> kiln.Model:
    return kiln.Sequential([
        kiln.Input(shape=(784,)),
        layers.Dense(512, activation="relu"),
        layers.Dropout(0.2),
        layers.Dense(512, activation="relu"),
        layers.Dropout(0.2),
        layers.Dense(NUM_CLASSES, activation="softmax"),
    ], name="mnist_mlp")


def main(quick: bool = False, data: str = "auto", epochs: int | None = None,
         plot_dir: str | None = None, seed: int = 1337) -> float:
    kiln.utils.set_random_seed(seed)
    if quick and data == "auto":
        data = "sample"
    ((x_train, y_train), (x_test, y_test)), description = load_mnist(data)
    print(f"Training on {description}.")

    x_train = x_train.reshape(-1, 784).astype("float32") / 255
    x_test = x_test.reshape(-1, 784).astype("float32") / 255
    # One-hot targets (Keras' to_categorical) for categorical_crossentropy.
    y_train_1h = np.eye(NUM_CLASSES, dtype="float32")[y_train]
    y_test_1h = np.eye(NUM_CLASSES, dtype="float32")[y_test]
    print(f"{len(x_train)} train samples, {len(x_test)} test samples")

    model = build_model()
    model.summary()
    model.compile(loss="categorical_crossentropy", optimizer=kiln.optimizers.RMSprop(),
                  metrics=["accuracy"])
    history = model.fit(x_train, y_train_1h, batch_size=128,
                        epochs=epochs or (1 if quick else 10), validation_split=0.1,
                        verbose=1)

    loss, accuracy = model.evaluate(x_test, y_test_1h, batch_size=1000, verbose=0)
    print(f"Test loss: {loss:.4f}")
    print(f"Test accuracy: {accuracy:.4f}")

    if plot_dir:
        from kiln.utils.plot import plot_history, plot_model

        os.makedirs(plot_dir, exist_ok=True)
        for what, draw in (("model graph", lambda: plot_model(
                               model, os.path.join(plot_dir, "mnist_mlp.png"))),
                           ("training curves", lambda: plot_history(
                               history, os.path.join(plot_dir, "mnist_mlp_history.png")))):
            try:
                print(f"Wrote the {what} to {draw()}")
            except (ImportError, RuntimeError) as exc:  # no Graphviz / matplotlib here
                print(f"Could not draw the {what}: {exc}")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one epoch on the sample (CI)")
    parser.add_argument("--data", choices=("auto", "full", "sample"), default="auto",
                        help="auto: the full MNIST if installed, else the sample (default)")
    parser.add_argument("--epochs", type=int, default=None, help="default 10 (--quick: 1)")
    parser.add_argument("--plot", metavar="DIR", default=None,
                        help="write the model graph and the training curves into DIR")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    main(args.quick, args.data, args.epochs, args.plot, args.seed)
