"""A/B figures behind the serving and kernel choices of issue 47, each pair in ONE process,
interleaved (these machines are shared and noisy: ratios, not absolute times):

* ``products``: a Dense layer at batch 1 in a native plan, one thread against its product
  split over the inner dimension (``gemv_split_work``), per shape;
* ``plan``: the MNIST MLP at batch 1, its plan as one native call against its steps run from
  Python (``runtime/native_plan.py``);
* ``tiles``: training steps of small convnets with the register-tiled convolutions on and off
  (``native_tile``), on the current target: run with ``KILN_CPU=x86-64-v3`` for AVX2's.

    python benchmarks/bench_serving.py [--modes products plan tiles] [--reps 9]

Prints a table per mode and one JSON line per row (``{"bench": "serving", ...}``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import kiln  # noqa: E402
from kiln.core.backends.cpu import options  # noqa: E402

SHAPES = [(128, 128), (256, 256), (512, 512), (784, 512), (1024, 512), (256, 4096)]
CONVNETS = ["lenet5", "dilated_conv1d", "conv_autoencoder", "cifar_cnn"]


def _median_call(fn: Callable[[], object], n: int) -> float:
    clock, ts = time.perf_counter, []
    for _ in range(n):
        t = clock()
        fn()
        ts.append(clock() - t)
    return statistics.median(ts)


def interleaved(fns: dict[str, Callable[[], object]], reps: int, n: int) -> dict[str, float]:
    """The median over ``reps`` rounds of each function's median call (rounds alternate)."""
    got: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(reps):
        order = list(fns)[r % len(fns):] + list(fns)[:r % len(fns)]
        for k in order:
            got[k].append(_median_call(fns[k], n))
    return {k: statistics.median(v) for k, v in got.items()}


def _plan(model, x):
    model.predict_on_batch(x)
    return model.predict_function.program.plan([x])


def _dense(k: int, n: int, split: bool):
    opts = replace(options.current(), gemv_split_work=0 if split else 1 << 62)
    x = np.random.default_rng(k + n).random((1, k), np.float32)
    with options.use(opts):  # the program records the options it is compiled under
        model = kiln.Sequential([kiln.Input((k,)), kiln.layers.Dense(n, activation="relu")])
        plan = _plan(model, x)
    native = plan.native
    return (lambda: native([x])) if native is not None else (lambda: plan.run([x]))


def products(reps: int) -> list[dict]:
    rows = []
    for k, n in SHAPES:
        t = interleaved({"one": _dense(k, n, False), "split": _dense(k, n, True)}, reps, 400)
        rows.append({"mode": "products", "shape": f"{k}x{n}", "one_us": t["one"] * 1e6,
                     "split_us": t["split"] * 1e6, "split_over_one": t["split"] / t["one"]})
    return rows


def plan(reps: int) -> list[dict]:
    import mnist_mlp

    x = np.random.default_rng(0).random((1, 784), np.float32)
    model = mnist_mlp.build_model()
    p = _plan(model, x)
    if p.native is None:
        return [{"mode": "plan", "note": "no native plan here (spin engine off?)"}]
    native = p.native

    def loop() -> None:
        for fn, args in p.calls:
            fn(*args)

    t = interleaved({"native": lambda: native([x]), "python": loop}, reps, 400)
    return [{"mode": "plan", "model": "mnist_mlp", "native_us": t["native"] * 1e6,
             "python_us": t["python"] * 1e6, "native_over_python": t["native"] / t["python"]}]


def _step(workload: str, tiles: bool) -> Callable[[], object]:
    import bench_suite

    x, y = bench_suite.make_data(workload)
    batch = bench_suite.spec(workload)["batch"]
    with options.use(replace(options.current(), native_tile=tiles)):
        model = bench_suite.kiln_model(workload)
        model.train_on_batch(x[:batch], y[:batch])  # compiled (and planned) under the options
    return lambda: model.train_on_batch(x[:batch], y[:batch])


def tiles(reps: int) -> list[dict]:
    rows = []
    for w in CONVNETS:
        t = interleaved({"on": _step(w, True), "off": _step(w, False)}, reps, 5)
        rows.append({"mode": "tiles", "workload": w, "target": kiln_target(),
                     "on_ms": t["on"] * 1e3, "off_ms": t["off"] * 1e3,
                     "on_over_off": t["on"] / t["off"]})
    return rows


def kiln_target() -> str:
    from kiln.core.backends.cpu import target

    t = target.current()
    return f"{t.name} ({'AVX-512' if t.has_avx512 else 'no AVX-512'})"


def main(modes: list[str], reps: int) -> list[dict]:
    runs = {"products": products, "plan": plan, "tiles": tiles}
    rows = [row for m in modes for row in runs[m](reps)]
    print(f"kiln {kiln.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; "
          f"median of {reps} interleaved rounds (ratio < 1: the first named is faster)")
    for r in rows:
        print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in r.items()))
    for r in rows:
        print(json.dumps({"bench": "serving", **r}))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["products", "plan", "tiles"],
                    choices=["products", "plan", "tiles"])
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    main(args.modes, args.reps)
