"""The MNIST convnet trained data-parallel over MPI: the same script on one process or many.

Every process (rank) holds the whole model and the whole dataset; ``batch_size`` is the
GLOBAL batch, and each rank computes on its slice of every batch. The gradients are summed
across the ranks inside the compiled training step (one allreduce), so every rank applies the
same update; only rank 0 prints and writes files. See README, "Training on several processes".

    python examples/mnist_distributed.py --quick              # one process
    mpiexec -n 2 python examples/mnist_distributed.py --quick # two ranks on this machine
    mpiexec -n 8 -f hosts python examples/mnist_distributed.py  # eight ranks on the machines
                                                                 # listed in the host file

Needs ``pip install "kiln-nn[mpi]"`` to run on several ranks (mpi4py and the MPICH wheel);
without it, the script trains on one process.
"""

import argparse
import os
import tempfile

import numpy as np

import kiln
from kiln import layers


def setup_distribution() -> None:
    """Data-parallel when started by mpiexec (or any MPI launcher) and mpi4py is installed."""
    try:
        kiln.distribution.set_distribution(kiln.distribution.DataParallel())
    except ImportError:
        print("mpi4py is not installed: training on one process (pip install \"kiln-nn[mpi]\")")


def load_data(quick: bool):
    from kiln.datasets import DatasetNotFoundError, mnist
    os.environ.setdefault("KILN_DATASETS_OFFLINE", "1")
    try:
        (x, y), (xt, yt) = mnist.load_sample() if quick else mnist.load_data()
    except DatasetNotFoundError:
        (x, y), (xt, yt) = mnist.load_sample()
    prep = lambda a: np.expand_dims(a.astype("float32") / 255, -1)  # noqa: E731
    return (prep(x), y), (prep(xt), yt)


def main(quick: bool = False, epochs: int | None = None, batch_size: int = 128) -> float:
    setup_distribution()
    world = kiln.distribution.world_size()
    chief = kiln.distribution.is_chief()
    kiln.utils.set_random_seed(1337)  # the same on every rank (rank 0's state is used anyway)
    (x_train, y_train), (x_test, y_test) = load_data(quick)
    if chief:
        print(f"{world} rank(s); global batch {batch_size} ({batch_size // world} or so per "
              f"rank); {len(x_train)} training digits")
    model = kiln.Sequential([
        kiln.Input(shape=(28, 28, 1)),
        layers.Conv2D(32, 3, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Conv2D(64, 3, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ], name="mnist_convnet")
    model.compile(loss="sparse_categorical_crossentropy", optimizer="adam",
                  metrics=["accuracy"])
    # Files: rank 0 writes them; every rank reads the same backup when a run is restarted.
    workdir = os.environ.get("KILN_EXAMPLE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                  "kiln-mnist-distributed")
    callbacks = [kiln.callbacks.ModelCheckpoint(os.path.join(workdir, "best.keras"),
                                                save_best_only=True, monitor="val_loss")]
    epochs = epochs or (1 if quick else 12)
    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1,
              callbacks=callbacks, verbose=1 if chief else 0)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    if chief:  # every rank has the same numbers: one prints them
        print(f"Test loss: {loss:.4f}")
        print(f"Test accuracy: {accuracy:.4f}")
    return accuracy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one epoch on the sample (CI)")
    parser.add_argument("--epochs", type=int, default=None, help="default 12 (--quick: 1)")
    parser.add_argument("--batch-size", type=int, default=128, help="the global batch")
    args = parser.parse_args()
    main(args.quick, args.epochs, args.batch_size)
