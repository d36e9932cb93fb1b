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
    python benchmarks/bench_accuracy.py --float32-step      # float32 steps against float64

``--float32-step`` (issue 46, item 7) instead trains one SGD step of two conv + BN + ReLU +
max-pool models (48 x 48 x 3, batch 32) in float32 and in float64 from the same weights, per
seed, and prints each setting's largest relative error of a variable's update (kiln's default
convolutions, ``KILN_WINOGRAD=4`` / ``0`` / ``2``, PyTorch against its own float64 step), then one
convolution's float32 forward error per algorithm (Winograd F(4x4) / F(2x2), register tiles,
im2col + GEMM) against float64.

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


# ---- float32 steps against float64 (issue 46, item 7) ----------------------------------------
# One SGD step (lr 0.1) of a conv + BN + ReLU + max-pool model from the same float32-exact
# weights and inputs in float32 and in float64: the largest relative error of a variable's
# update, ||d32 - d64|| / ||d64||, for kiln with its default convolutions, kiln without
# Winograd (KILN_WINOGRAD=0) and PyTorch (both dtypes from the same weights); then one
# convolution's forward error against float64 per algorithm.

STEP_MODELS = ("conv_bn", "vgg_style")


def step_model(name: str):
    from kiln import layers
    if name == "conv_bn":  # the model
        ls = [layers.Input((48, 48, 3)), layers.Conv2D(16, 3, padding="same", use_bias=False),
              layers.BatchNormalization(), layers.Activation("relu"), layers.MaxPooling2D(2),
              layers.Flatten(), layers.Dense(10)]
    else:
        ls = [layers.Input((48, 48, 3))]
        for f in (16, 32):
            for _ in range(2):
                ls += [layers.Conv2D(f, 3, padding="same", use_bias=False),
                       layers.BatchNormalization(), layers.Activation("relu")]
            ls.append(layers.MaxPooling2D(2))
        ls += [layers.Flatten(), layers.Dense(10)]
    return kiln.Sequential(ls)


def step_data(seed: int):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((32, 48, 48, 3)) + 0.5).astype(np.float32)
    return x, rng.integers(0, 10, 32)


def step_weights(name: str, seed: int) -> list:
    kiln.utils.set_random_seed(seed)
    return [w.astype(np.float32) for w in step_model(name).get_weights()]


def kiln_step(name: str, weights: list, x, y, dtype: str) -> list:
    old = kiln.config.floatx()
    kiln.config.set_floatx(dtype)
    try:
        model = step_model(name)
        model.compile(optimizer=kiln.optimizers.SGD(0.1),
                      loss=kiln.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.set_weights([w.astype(dtype) for w in weights])
        model.train_on_batch(x.astype(dtype), y)
        return [w.astype(np.float64) - w0 for w, w0 in zip(model.get_weights(), weights)]
    finally:
        kiln.config.set_floatx(old)


def torch_step(name: str, weights: list, x, y, dtype: str) -> list:
    """The same step in PyTorch (NCHW; Keras' BN: eps 1e-3, momentum 0.99; the Dense layer
    reads the NHWC flattening)."""
    import torch
    from torch import nn
    td = getattr(torch, dtype)

    def take(i):
        return torch.tensor(np.asarray(weights[i], np.float64), dtype=td)
    convs = [16] if name == "conv_bn" else [16, 16, 32, 32]
    # kiln's order: the trainable weights (kernel, gamma, beta per block; the Dense layer's),
    # then the moving statistics
    stat0 = 3 * len(convs) + 2
    mods: list = []
    ci = 3
    for i, co in enumerate(convs):
        conv = nn.Conv2d(ci, co, 3, padding=1, bias=False).to(td)
        conv.weight.data = take(3 * i).permute(3, 2, 0, 1).contiguous()
        bn = nn.BatchNorm2d(co, eps=1e-3, momentum=0.01).to(td)
        bn.weight.data, bn.bias.data = take(3 * i + 1), take(3 * i + 2)
        bn.running_mean.data = take(stat0 + 2 * i)
        bn.running_var.data = take(stat0 + 2 * i + 1)
        mods += [conv, bn, nn.ReLU()]
        if name == "conv_bn" or i % 2:
            mods.append(nn.MaxPool2d(2))
        ci = co
    dense = nn.Linear(1, 1).to(td)
    dense.weight.data = take(stat0 - 2).T.contiguous()
    dense.bias.data = take(stat0 - 1)
    body = nn.Sequential(*mods).train()
    xt = torch.tensor(x, dtype=td).permute(0, 3, 1, 2)
    logits = dense(body(xt).permute(0, 2, 3, 1).flatten(1))
    loss = nn.functional.cross_entropy(logits, torch.tensor(y))
    params = [p for m in mods + [dense] for p in m.parameters()]
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= 0.1 * p.grad
    out: list = []
    moving: list = []
    for m in mods:
        if isinstance(m, nn.Conv2d):
            out.append(m.weight.permute(2, 3, 1, 0))
        elif isinstance(m, nn.BatchNorm2d):
            out += [m.weight, m.bias]
            moving += [m.running_mean, m.running_var]
    out += [dense.weight.T, dense.bias, *moving]
    return [o.detach().double().numpy() - w0 for o, w0 in zip(out, weights)]


def _worst(d32: list, d64: list) -> float:
    return max(float(np.linalg.norm(a - b) / np.linalg.norm(b)) for a, b in zip(d32, d64)
               if np.linalg.norm(b) > 0)


def float32_steps(seeds: range, settings: list[str]) -> list[dict]:
    """``settings``: ``kiln`` (default), ``kiln:W`` (KILN_WINOGRAD=W), ``torch``."""
    rows = []
    for name in STEP_MODELS:
        for seed in seeds:
            weights = step_weights(name, seed)
            x, y = step_data(seed)
            ref = kiln_step(name, weights, x, y, "float64")
            row = {"bench": "float32_step", "model": name, "seed": seed}
            for s in settings:
                if s == "torch":
                    t64 = torch_step(name, weights, x, y, "float64")
                    row["torch"] = _worst(torch_step(name, weights, x, y, "float32"), t64)
                    row["torch64_vs_kiln64"] = _worst(t64, ref)
                    continue
                env = s.partition(":")[2]
                old = os.environ.pop("KILN_WINOGRAD", None)
                if env:
                    os.environ["KILN_WINOGRAD"] = env
                try:
                    row[s] = _worst(kiln_step(name, weights, x, y, "float32"), ref)
                finally:
                    os.environ.pop("KILN_WINOGRAD", None)
                    if old is not None:
                        os.environ["KILN_WINOGRAD"] = old
            print(json.dumps({k: (float(f"{v:.3g}") if isinstance(v, float) else v)
                              for k, v in row.items()}), flush=True)
            rows.append(row)
    return rows


# (name, KILN_WINOGRAD, native register tiles on): one convolution's algorithms
FORWARD_ALGORITHMS = (("winograd F(4x4,3x3)", "4", True), ("winograd F(2x2,3x3)", "2", True),
                      ("register tiles", "0", True), ("im2col + GEMM", "0", False))


def forward_errors(shape=(32, 48, 48, 32), co=32, seed=0) -> list[dict]:
    """One 3x3 'same' convolution of N(0, 1) inputs and Glorot-scaled weights per algorithm
    against float64: the largest error in units of float32's eps times the sum of the
    products' magnitudes (|x| * |w| convolved: the natural scale of a product's rounding),
    and the norm-wise relative error."""
    from kiln.core.backends.cpu import lowering
    from kiln.core.backends.cpu.kernels.conv import conv
    from kiln.core.ops import all_ops
    from kiln.core.ops.registry import apply

    ref = all_ops()["conv2d"].ref
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((3, 3, shape[3], co)) / np.sqrt(9 * shape[3])).astype(np.float32)
    attrs = {"strides": (1, 1), "padding": "same", "dilation": (1, 1)}
    want = ref(x.astype(np.float64), w.astype(np.float64), **attrs)
    scale = ref(np.abs(x).astype(np.float64), np.abs(w).astype(np.float64), **attrs)
    eps = float(np.finfo(np.float32).eps)
    rows = []
    old_env, old_tile = os.environ.get("KILN_WINOGRAD"), conv.NATIVE_TILE
    try:
        for name, env, tiles in FORWARD_ALGORITHMS:
            os.environ["KILN_WINOGRAD"] = env
            conv.NATIVE_TILE = tiles
            xp, wp = kiln.placeholder((None, *shape[1:])), kiln.placeholder(w.shape)
            f = kiln.function([xp, wp], apply("conv2d", xp, wp, **attrs), backend="cpu")
            err = f(x, w).astype(np.float64) - want
            rows.append({"bench": "conv_forward_error", "algorithm": name,
                         "shape": list(shape), "cout": co, "max_err_eps_of_scale":
                         round(float(np.max(np.abs(err) / scale)) / eps, 2),
                         "rel_norm": float(f"{np.linalg.norm(err) / np.linalg.norm(want):.3g}"),
                         "winograd_min_outputs": lowering.WINOGRAD_MIN_OUTPUTS})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        conv.NATIVE_TILE = old_tile
        os.environ.pop("KILN_WINOGRAD", None)
        if old_env is not None:
            os.environ["KILN_WINOGRAD"] = old_env
    return rows


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
    p.add_argument("--float32-step", action="store_true",
                   help="instead: float32 SGD steps against float64 and one convolution's "
                        "forward error per algorithm (issue 46)")
    p.add_argument("--seeds", type=int, default=10, help="--float32-step: seeds 0..N-1")
    p.add_argument("--settings", nargs="+",
                   default=["kiln", "kiln:4", "kiln:0", "kiln:2", "torch"],
                   help="--float32-step: kiln (default choice), kiln:W (KILN_WINOGRAD=W), torch")
    args = p.parse_args()
    if args.float32_step:
        steps = float32_steps(range(args.seeds), args.settings)
        print(f"\n{'model':<10} {'setting':<8} {'worst':>9} {'median':>9}  seeds over 2e-4")
        for name in STEP_MODELS:
            for s in args.settings:
                errs = [r[s] for r in steps if r["model"] == name]
                print(f"{name:<10} {s:<8} {max(errs):>9.2e} {float(np.median(errs)):>9.2e}  "
                      f"{sum(e > 2e-4 for e in errs)}/{len(errs)}")
        print()
        forward_errors()
        sys.exit(0)
    out = main(args.which, args.epochs, args.full_epochs, args.seed, args.verbose)
    sys.exit(0 if all(r["passed"] for r in out) else 1)
