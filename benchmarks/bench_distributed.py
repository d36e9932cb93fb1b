"""Data-parallel scaling over MPI: samples/s with 1 and 2 ranks, one thread per rank.

Workloads (synthetic MNIST-shaped data, Adam, ``fit`` on arrays):

* ``convnet``  the Keras MNIST convnet (Conv 32, pool, Conv 64, pool, Dropout, Dense 10),
               global batch 128;
* ``mlp``      784-512-512-10 ReLU MLP, global batch 128.

Each configuration runs in fresh processes (``python`` for 1 rank, ``mpiexec -n 2`` for 2),
one thread each (``NUMBA_NUM_THREADS=OPENBLAS_NUM_THREADS=1``): compile and one warm-up
epoch, then ``--rounds`` timed epochs; the median epoch gives samples/s. The 2-rank workers
also time every allreduce (the transport's wait included; with ``--bucket-bytes``, every
bucket's start and wait). Reported per workload:
samples/s at 1 and 2 ranks, **scaling efficiency** = (samples/s at 2) / (2 x samples/s at 1)
(strong scaling: the same global batch), allreduce ms per step and the gradient size.

The section "On paper" projects weak scaling (a fixed per-rank batch of 64) to 8-64 ranks on
a 25 and a 100 Gb/s network with the ring-allreduce cost model
``t = 2 (p-1)/p * bytes / bandwidth + 2 (p-1) * latency`` (latency 5 us), from the measured
compute time per step: efficiency = t_compute / (t_compute + t_allreduce) (no overlap of the
allreduce with the backward pass).

Usage::

    python benchmarks/bench_distributed.py                    # both workloads
    python benchmarks/bench_distributed.py --workloads mlp --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

BATCH = 128
SAMPLES = 128 * 24  # 24 steps per epoch


def build(workload: str):
    import kiln
    from kiln import layers
    if workload == "convnet":
        model = kiln.Sequential([
            kiln.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(2), layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(2), layers.Flatten(), layers.Dropout(0.5),
            layers.Dense(10, activation="softmax")])
        shape = (28, 28, 1)
    else:
        model = kiln.Sequential([kiln.Input((784,)), layers.Dense(512, activation="relu"),
                                 layers.Dense(512, activation="relu"),
                                 layers.Dense(10, activation="softmax")])
        shape = (784,)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    rng = np.random.default_rng(0)
    x = rng.random((SAMPLES,) + shape, dtype=np.float32)
    y = rng.integers(0, 10, SAMPLES).astype("int32")
    return model, x, y


def worker(workload: str, rounds: int, distributed: bool, batch: int,
           bucket_bytes: int | None = None) -> None:
    import kiln
    timer = {"s": 0.0, "n": 0}
    if distributed:
        dist = kiln.distribution.DataParallel(bucket_bytes=bucket_bytes)
        kiln.distribution.set_distribution(dist)

        def timed(inner, count):
            def call(buffer):
                t0 = time.perf_counter()
                inner(buffer)
                timer["s"] += time.perf_counter() - t0
                timer["n"] += count
            return call

        # what the compiled step's allreduce (or each bucket's start and wait) calls
        dist.group.allreduce_sum = timed(dist.group.allreduce_sum, 1)
        dist.group.allreduce_start = timed(dist.group.allreduce_start, 0)
        dist.group.allreduce_wait = timed(dist.group.allreduce_wait, 1)
    kiln.utils.set_random_seed(0)
    model, x, y = build(workload)
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)  # compile, warm up
    timer.update(s=0.0, n=0)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
        times.append(time.perf_counter() - t0)
    grad_bytes = sum(v.value.nbytes for v in model.trainable_weights)
    if kiln.distribution.is_chief():
        print(json.dumps({"epoch_s": statistics.median(times), "steps": len(x) // batch,
                          "allreduce_s": timer["s"], "allreduces": timer["n"],
                          "grad_bytes": grad_bytes}), flush=True)


def launch(workload: str, ranks: int, rounds: int, batch: int,
           bucket_bytes: int | None = None) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", workload, "--rounds",
           str(rounds), "--batch", str(batch)]
    if ranks > 1:
        mpiexec = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable),
                                                          "mpiexec")
        cmd = [mpiexec, "-n", str(ranks)] + cmd + ["--distributed"]
        if bucket_bytes:
            cmd += ["--bucket-bytes", str(bucket_bytes)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ring_allreduce_s(nbytes: int, ranks: int, gbit_s: float, latency_s: float = 5e-6) -> float:
    return 2 * (ranks - 1) / ranks * nbytes / (gbit_s * 1e9 / 8) + 2 * (ranks - 1) * latency_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=["convnet", "mlp"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--worker", default=None)
    p.add_argument("--distributed", action="store_true")
    p.add_argument("--bucket-bytes", type=int, default=None,
                   help="DataParallel(bucket_bytes=...): overlapped buckets of this size")
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.rounds, args.distributed, args.batch, args.bucket_bytes)
        return
    print(f"global batch {args.batch}, {SAMPLES} samples per epoch, one thread per rank, "
          f"median of {args.rounds} epochs\n")
    print(f"{'workload':10} {'1 rank':>12} {'2 ranks':>12} {'efficiency':>11} "
          f"{'allreduce':>12} {'gradient':>10}")
    paper = []
    for w in args.workloads:
        one = launch(w, 1, args.rounds, args.batch)
        two = launch(w, 2, args.rounds, args.batch, args.bucket_bytes)
        s1 = SAMPLES / one["epoch_s"]
        s2 = SAMPLES / two["epoch_s"]
        per_step = two["allreduce_s"] / max(1, args.rounds * two["steps"])
        print(f"{w:10} {s1:9.0f}/s {s2:9.0f}/s {s2 / (2 * s1):10.0%} "
              f"{per_step * 1e3:9.2f} ms {two['grad_bytes'] / 1e6:7.2f} MB")
        # weak scaling on paper: per-rank batch 64 -> compute time of one rank at batch 64
        compute = one["epoch_s"] / one["steps"] * 64 / args.batch
        paper.append((w, compute, two["grad_bytes"]))
    print("\nOn paper (weak scaling, 64 samples per rank, ring allreduce, no overlap):")
    print(f"{'workload':10} {'compute/step':>13} " + " ".join(
        f"{f'{p} r @{g}G':>11}" for g in (25, 100) for p in (8, 64)))
    for w, compute, nbytes in paper:
        cells = []
        for g in (25, 100):
            for ranks in (8, 64):
                t = ring_allreduce_s(nbytes, ranks, g)
                cells.append(f"{compute / (compute + t):11.0%}")
        print(f"{w:10} {compute * 1e3:10.1f} ms " + " ".join(cells))


if __name__ == "__main__":
    main()
