"""Per-step time of kiln's eager and captured training loops against ``fit`` and PyTorch eager.

Modes (one process, interleaved: every round runs each mode for ``--steps`` steps, the order
reversed every other round, so all modes see the same machine noise):

* ``eager``    the Keras guide's loop on kiln's eager tape: ``with kiln.GradientTape()``,
               ``model(x, training=True)``, the loss, ``tape.gradient``, ``optimizer.apply``
               (kiln/tape.py: each layer call compiled once, the gradient replayed and
               compiled once, then cached);
* ``run_eagerly`` ``model.fit`` after ``compile(run_eagerly=True)`` (kiln/models/eager_loop.py:
               the same tape, driven by fit's loop, with its loss tracker);
* ``captured`` the same loop body under ``@kiln.function`` (kiln/capture.py): one graph;
* ``fit``      ``model.fit`` (the compiled step, one epoch of ``--steps`` batches);
* ``torch``    PyTorch eager, the same model, ``torch.set_num_threads`` = kiln's kernel threads
               (skipped when torch is missing).

Workloads (synthetic data, batch 128): ``mlp`` (784-256-10 ReLU, softmax cross-entropy from
logits, SGD momentum 0.9) and ``convnet`` (the Keras MNIST convnet of bench_cpu.py: Conv2D 32
- MaxPool - Conv2D 64 - MaxPool - Flatten - Dropout 0.5 - Dense 10, Adam).

Each step is timed on its own (``fit``: from ``on_train_batch_begin`` to
``on_train_batch_end``), so a step that the machine's other jobs preempted does not spoil a
whole round. Prints, per workload, the median ms per step of each mode over all its timed
steps, the mean of its rounds' means (preemptions included), and the ratios of the medians
(eager / torch, captured / fit ...); with ``--json`` a JSON line.

Usage::

    python benchmarks/bench_eager.py [--workloads mlp convnet] [--steps 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BATCH = 128
MODES = ("eager", "run_eagerly", "captured", "fit", "torch")


def make_data(workload: str, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = BATCH * steps
    shape = (n, 784) if workload == "mlp" else (n, 28, 28, 1)
    return rng.random(shape, dtype=np.float32), rng.integers(0, 10, n).astype(np.int32)


def kiln_model(workload: str) -> tuple[Any, Any]:
    import kiln

    layers = kiln.layers
    if workload == "mlp":
        model = kiln.Sequential([kiln.Input((784,)), layers.Dense(256, activation="relu"),
                                 layers.Dense(10)])
        return model, kiln.optimizers.SGD(0.01, momentum=0.9)
    model = kiln.Sequential([
        kiln.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
        layers.MaxPooling2D(2), layers.Conv2D(64, 3, activation="relu"),
        layers.MaxPooling2D(2), layers.Flatten(), layers.Dropout(0.5), layers.Dense(10)])
    return model, kiln.optimizers.Adam(1e-3)


Epoch = Callable[[np.ndarray, np.ndarray], list[float]]


def kiln_case(workload: str, mode: str) -> Epoch:
    """A function that trains on all the batches of ``x, y`` once (one "epoch") and returns
    the seconds of each step."""
    import kiln

    model, optimizer = kiln_model(workload)
    loss_fn = kiln.losses.SparseCategoricalCrossentropy(from_logits=True)
    if mode in ("fit", "run_eagerly"):
        model.compile(optimizer, loss_fn, run_eagerly=mode == "run_eagerly")
        times: list[float] = []

        class StepTimer(kiln.callbacks.Callback):
            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                self.t0 = time.perf_counter()

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                times.append(time.perf_counter() - self.t0)

        def epoch(x: np.ndarray, y: np.ndarray) -> list[float]:
            times.clear()
            model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                      callbacks=[StepTimer()])
            return list(times)
        return epoch

    def train_step(x: Any, y: Any) -> Any:
        with kiln.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        return loss

    step = kiln.function(train_step) if mode == "captured" else train_step

    def loop(x: np.ndarray, y: np.ndarray) -> list[float]:
        out = []
        for i in range(0, len(x), BATCH):
            t0 = time.perf_counter()
            step(x[i:i + BATCH], y[i:i + BATCH])
            out.append(time.perf_counter() - t0)
        return out
    return loop


def torch_case(workload: str, threads: int) -> Epoch:
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if workload == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Dropout(0.5), nn.Linear(1600, 10))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    conv = workload == "convnet"

    def loop(x: np.ndarray, y: np.ndarray) -> list[float]:
        out = []
        for i in range(0, len(x), BATCH):
            t0 = time.perf_counter()
            xt = torch.from_numpy(x[i:i + BATCH])
            if conv:
                xt = xt.permute(0, 3, 1, 2)
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(xt), torch.from_numpy(y[i:i + BATCH]).long())
            loss.backward()
            opt.step()
            loss.item()
            out.append(time.perf_counter() - t0)
        return out
    return loop


def kiln_threads() -> int:
    from kiln.core.backends.cpu.runtime.cpus import kernel_threads

    return kernel_threads()


def run(workload: str, steps: int, rounds: int, modes: list[str]) -> dict:
    x, y = make_data(workload, steps)
    cases: dict[str, Epoch] = {}
    first: dict[str, float] = {}
    threads = kiln_threads()
    for mode in modes:
        if mode == "torch":
            try:
                cases[mode] = torch_case(workload, threads)
            except ImportError:
                continue
        else:
            cases[mode] = kiln_case(workload, mode)
        t0 = time.perf_counter()
        cases[mode](x, y)  # warm-up epoch: compiles, and the first-step latency
        first[mode] = time.perf_counter() - t0
    steps_ms: dict[str, list[float]] = {m: [] for m in cases}
    rounds_ms: dict[str, list[float]] = {m: [] for m in cases}
    names = list(cases)
    for r in range(rounds):
        for mode in names if r % 2 == 0 else names[::-1]:
            ms = [t * 1e3 for t in cases[mode](x, y)]
            steps_ms[mode] += ms
            rounds_ms[mode].append(statistics.fmean(ms))
    med = {m: statistics.median(v) for m, v in steps_ms.items()}
    ratios = {}
    for a, b in (("eager", "torch"), ("run_eagerly", "torch"), ("captured", "torch"),
                 ("fit", "torch"), ("captured", "fit"), ("eager", "fit")):
        if a in med and b in med:
            ratios[f"{a}/{b}"] = med[a] / med[b]
    return {"workload": workload, "batch": BATCH, "steps": steps, "rounds": rounds,
            "threads": threads, "ms_per_step": med,
            "mean_ms": {m: statistics.fmean(v) for m, v in rounds_ms.items()},
            "warmup_epoch_s": first, "ratios": ratios}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", default=["mlp", "convnet"],
                        choices=["mlp", "convnet"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    print(f"host: {platform.node()} {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for workload in args.workloads:
        res = run(workload, args.steps, args.rounds, args.modes)
        print(f"\n{workload} (batch {BATCH}, {args.steps} steps x {args.rounds} rounds, "
              f"{res['threads']} kernel threads): median ms/step, (mean), warm-up epoch s")
        for mode, ms in res["ms_per_step"].items():
            print(f"  {mode:12s} {ms:8.2f}  ({res['mean_ms'][mode]:.2f})  "
                  f"{res['warmup_epoch_s'][mode]:.2f}")
        print("  ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in res["ratios"].items()))
        if args.json:
            print(json.dumps(res))


if __name__ == "__main__":
    main()
