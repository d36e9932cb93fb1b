"""Accuracy benchmarks: do the example models reach the accuracy they reach in Keras?

Each workload trains the model of an example (``examples/``) with its optimizer and batch
size, holding out 10% of the training set for validation like the examples, and measures the
test accuracy after every epoch. It stops at the first epoch that reaches the target (pass
``--full-epochs`` to always train the maximum), and fails when the maximum number of epochs
is reached first.

| name             | data                            | max epochs | target |
|------------------|---------------------------------|------------|--------|
| mnist_convnet    | full MNIST (60,000 / 10,000)    | 12         | 99.0%  |
| mnist_mlp        | full MNIST                      | 10         | 98.0%  |
| fashion_convnet  | full Fashion-MNIST              | 15         | 91.0%  |
| sample_convnet   | MNIST sample shipped with kiln  | 15         | 97.0%  |

The full-data workloads take minutes each on 2 cores and are not run in CI.

    python benchmarks/bench_accuracy.py                      # all four
    python benchmarks/bench_accuracy.py --which sample_convnet
    python benchmarks/bench_accuracy.py --which mnist_convnet --epochs 3 --full-epochs

Prints a table and one JSON line per workload (``{"bench": "accuracy", ...}``); the exit code
is 1 when a workload missed its target.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import fashion_mnist as fashion_example  # noqa: E402
import mnist_convnet  # noqa: E402
import mnist_mlp  # noqa: E402

import kiln  # noqa: E402
from kiln.datasets import fashion_mnist, mnist  # noqa: E402

WORKLOADS = {
    # name: (data, model builder, loss/targets, optimizer, batch size, max epochs, target)
    "mnist_convnet": ("mnist", mnist_convnet.build_model, "sparse", "adam", 128, 12, 0.99),
    "mnist_mlp": ("mnist", mnist_mlp.build_model, "onehot", "rmsprop", 128, 10, 0.98),
    "fashion_convnet": ("fashion", fashion_example.build_model, "sparse", "adam", 128, 15,
                        0.91),
    "sample_convnet": ("sample", mnist_convnet.build_model, "sparse", "adam", 128, 15, 0.97),
}
DATA_TITLES = {"mnist": "full MNIST", "fashion": "full Fashion-MNIST",
               "sample": "MNIST sample (kiln)"}


def load(data: str, flat: bool):
    if data == "mnist":
        (x, y), (xt, yt) = mnist.load_data()
    elif data == "fashion":
        (x, y), (xt, yt) = fashion_mnist.load_data()
    else:
        (x, y), (xt, yt) = mnist.load_sample()
    shape = (-1, 784) if flat else (-1, 28, 28, 1)
    return ((x.reshape(shape).astype("float32") / 255, y),
            (xt.reshape(shape).astype("float32") / 255, yt))


class TestAccuracy(kiln.callbacks.Callback):
    """Evaluates on the test set after each epoch; stops once ``target`` is reached."""

    def __init__(self, x, y, target: float, stop_at_target: bool):
        super().__init__()
        self.x, self.y, self.target, self.stop = x, y, target, stop_at_target
        self.accuracies: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        _, acc = self.model.evaluate(self.x, self.y, batch_size=1000, verbose=0)
        self.accuracies.append(float(acc))
        print(f"  epoch {epoch + 1}: test accuracy {acc:.4f}", flush=True)
        if self.stop and acc >= self.target:
            self.model.stop_training = True


def run(name: str, epochs: int | None, full_epochs: bool, seed: int, verbose: int) -> dict:
    data, build, targets, optimizer, batch_size, max_epochs, target = WORKLOADS[name]
    epochs = epochs or max_epochs
    kiln.utils.set_random_seed(seed)
    model = build()
    flat = model.inputs[0].ndim == 2
    (x, y), (xt, yt) = load(data, flat)
    if targets == "onehot":
        eye = np.eye(10, dtype="float32")
        y, yt = eye[y], eye[yt]
        loss = "categorical_crossentropy"
    else:
        loss = "sparse_categorical_crossentropy"
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"])
    print(f"== {name}: {DATA_TITLES[data]}, {len(x)} training / {len(xt)} test samples, "
          f"up to {epochs} epochs, target {target:.1%}", flush=True)
    probe = TestAccuracy(xt, yt, target, stop_at_target=not full_epochs)
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch_size, epochs=epochs, validation_split=0.1,
              callbacks=[probe], verbose=verbose)
    seconds = time.perf_counter() - start
    accs = probe.accuracies
    reached = next((i + 1 for i, a in enumerate(accs) if a >= target), None)
    return {"bench": "accuracy", "name": name, "data": data, "train_samples": int(len(x)),
            "test_samples": int(len(xt)), "max_epochs": epochs, "epochs_run": len(accs),
            "test_accuracy": round(accs[-1], 4) if accs else None,
            "best_test_accuracy": round(max(accs), 4) if accs else None,
            "target": target, "epoch_reached": reached,
            "passed": bool(accs) and accs[-1] >= target,
            "train_seconds": round(seconds, 1),
            "per_epoch_test_accuracy": [round(a, 4) for a in accs]}


def print_table(results: list[dict]) -> None:
    head = f"{'workload':<16} {'data':<20} {'epochs':>6} {'test acc':>9} {'target':>7} " \
           f"{'reached at':>10} {'time':>8}  result"
    print("\n" + head + "\n" + "-" * len(head))
    for r in results:
        reached = f"epoch {r['epoch_reached']}" if r["epoch_reached"] else "-"
        print(f"{r['name']:<16} {DATA_TITLES[r['data']]:<20} "
              f"{r['epochs_run']:>3}/{r['max_epochs']:<2} {r['test_accuracy']:>9.2%} "
              f"{r['target']:>7.1%} {reached:>10} {r['train_seconds']:>7.0f}s  "
              f"{'PASS' if r['passed'] else 'FAIL'}")


def main(which: list[str], epochs: int | None, full_epochs: bool, seed: int,
         verbose: int) -> list[dict]:
    results = []
    for name in which:
        r = run(name, epochs, full_epochs, seed, verbose)
        print(json.dumps(r), flush=True)
        results.append(r)
    print_table(results)
    for r in results:
        print(json.dumps(r))
    return results


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--which", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS),
                   help="the workloads to run (default: all)")
    p.add_argument("--epochs", type=int, default=None,
                   help="override the maximum number of epochs")
    p.add_argument("--full-epochs", action="store_true",
                   help="train the maximum number of epochs even after reaching the target")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2),
                   help="fit's verbosity (default 2: one line per epoch)")
    args = p.parse_args()
    out = main(args.which, args.epochs, args.full_epochs, args.seed, args.verbose)
    sys.exit(0 if all(r["passed"] for r in out) else 1)
