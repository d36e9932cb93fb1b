"""Independent branches on two threads, or each kernel split on two threads?

A graph with two independent towers (each ``depth`` layers ``tanh(x @ W)`` of ``width`` units
on a batch of ``batch`` rows, forward and the gradient of every weight) runs three ways, each
configuration in fresh processes, one step after another, the median step time reported:

* ``serial``    one compiled function, one thread (``KILN_NUM_THREADS=1``, one BLAS thread);
* ``split``     the same function with two threads: the CPU runtime splits each kernel (and
                BLAS its products) over both (``KILN_NUM_THREADS=2``, two BLAS threads);
* ``branches``  each tower its own compiled function with one thread; a step runs tower A on
                a second Python thread while tower B runs on the first (kernels release the
                GIL): what a scheduler running independent chains of plan steps concurrently
                would get at best (no dependencies between the towers to synchronize).

``branches`` beats ``split`` only where a kernel is too small to split well and the two
chains hold about the same work (docs/architecture.md, "Data parallelism" records the
figures). Rounds interleave the modes, so a busy host slows each alike.

Usage::

    python benchmarks/bench_branches.py                      # the default grid
    python benchmarks/bench_branches.py --widths 64 --batches 32 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def tower(kiln, x, width: int, depth: int, rng) -> tuple:
    weights = [kiln.Variable(rng.standard_normal((x.shape[1] if k == 0 else width, width))
                             .astype("float32") / np.sqrt(width)) for k in range(depth)]
    h = x
    for w in weights:
        h = kiln.ops.tanh(kiln.ops.matmul(h, w))
    loss = kiln.ops.sum(h)
    return [loss] + list(kiln.grad(loss, weights))


def worker(mode: str, width: int, batch: int, depth: int, seconds: float) -> None:
    import kiln
    rng = np.random.default_rng(0)
    xs = [kiln.placeholder((batch, width), "float32") for _ in range(2)]
    feeds = [rng.standard_normal((batch, width)).astype("float32") for _ in range(2)]
    outs = [tower(kiln, x, width, depth, rng) for x in xs]
    if mode == "branches":
        fa = kiln.function([xs[0]], outs[0])
        fb = kiln.function([xs[1]], outs[1])
        go, done = threading.Semaphore(0), threading.Semaphore(0)

        def side() -> None:
            while True:
                go.acquire()
                fa(feeds[0])
                done.release()

        threading.Thread(target=side, daemon=True).start()

        def step() -> None:
            go.release()
            fb(feeds[1])
            done.acquire()
    else:
        f = kiln.function(xs, outs[0] + outs[1])

        def step() -> None:
            f(*feeds)
    for _ in range(20):  # warm up (compile, pools)
        step()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 20:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"ms": statistics.median(times) * 1e3, "steps": len(times)}), flush=True)


def launch(mode: str, width: int, batch: int, depth: int, seconds: float) -> float:
    threads = "2" if mode == "split" else "1"
    # KILN_CONTENTION=off: split kernels use both threads even on a busy host (as the two
    # branches do), so the modes differ only in how the work is divided
    env = dict(os.environ, KILN_NUM_THREADS=threads, NUMBA_NUM_THREADS="2",
               OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads, KILN_CONTENTION="off")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", mode, "--widths", str(width),
           "--batches", str(batch), "--depth", str(depth), "--seconds", str(seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--widths", type=int, nargs="+", default=[32, 128, 512])
    p.add_argument("--batches", type=int, nargs="+", default=[16, 128])
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--worker", default=None)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.widths[0], args.batches[0], args.depth, args.seconds)
        return
    modes = ("serial", "split", "branches")
    print(f"two towers of {args.depth} layers, forward + weight gradients; median step ms "
          f"(median over {args.rounds} interleaved rounds)\n")
    print(f"{'width':>6} {'batch':>6} " + " ".join(f"{m:>9}" for m in modes)
          + "  branches/split")
    for width in args.widths:
        for batch in args.batches:
            got: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(args.rounds):
                for m in modes:
                    got[m].append(launch(m, width, batch, args.depth, args.seconds))
            med = {m: statistics.median(v) for m, v in got.items()}
            print(f"{width:6d} {batch:6d} " + " ".join(f"{med[m]:9.3f}" for m in modes)
                  + f"  {med['branches'] / med['split']:14.2f}", flush=True)


if __name__ == "__main__":
    main()
