"""Sequence-model training benchmark: kiln against PyTorch eager, same machine, same run.

Workloads (synthetic data, fixed batch, training steps with Adam):

* ``lstm``         text classifier: Embedding(20,000, 128) -> LSTM(128) -> Dense(1, sigmoid),
                   sequences of 200 tokens, batch 64 (torch: ``nn.Embedding``, ``nn.LSTM``,
                   ``nn.Linear``);
* ``transformer``  one transformer encoder block on embedded tokens: d_model 128, 4 heads,
                   feed-forward 256, post-norm (``nn.TransformerEncoderLayer(batch_first=True,
                   dropout=0)``; kiln: ``MultiHeadAttention`` + ``LayerNormalization`` + two
                   ``Dense``), then mean pooling and Dense(1, sigmoid); length 128, batch 32.

Each (framework, workload) runs in its own long-lived worker process (its own thread pools).
A worker first builds its case and reports the **first-step latency** (model construction,
graph building and compilation, the first step: the "cold" figure when kiln's kernel cache
is empty, see ``--cold``), then runs warm-up steps, then times ``--steps`` steps whenever the
coordinator asks. The coordinator runs ``--rounds`` pairs, one framework computing at a time,
the order reversed every pair, so both see the same machine noise. Reported: steps/s (median
round), first-step seconds, and the median over pairs of torch_step_s / kiln_step_s (>1: kiln
faster).

Usage::

    python benchmarks/bench_sequence.py                         # both workloads
    python benchmarks/bench_sequence.py --workloads lstm --rounds 5 --steps 5
    python benchmarks/bench_sequence.py --cold                  # kiln with an empty cache
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

WORKLOADS = {
    "lstm": {"vocab": 20000, "embed": 128, "units": 128, "length": 200, "batch": 64},
    "transformer": {"vocab": 20000, "embed": 128, "heads": 4, "ff": 256, "length": 128,
                    "batch": 32},
}
TARGET = 1.0  # the floor (aim: 1.3)


def make_data(workload: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    w = WORKLOADS[workload]
    rng = np.random.default_rng(seed)
    x = rng.integers(1, w["vocab"], size=(w["batch"], w["length"])).astype("int32")
    y = rng.integers(0, 2, size=(w["batch"], 1)).astype("float32")
    return x, y


# ---- kiln ----------------------------------------------------------------------------------------
def kiln_case(workload: str) -> Any:
    import kiln
    from kiln import layers as L

    w = WORKLOADS[workload]
    x, y = make_data(workload)
    inputs = L.Input((w["length"],), dtype="int32")
    h = L.Embedding(w["vocab"], w["embed"])(inputs)
    if workload == "lstm":
        h = L.LSTM(w["units"])(h)
    else:
        att = L.MultiHeadAttention(w["heads"], w["embed"] // w["heads"])(h, h)
        h = L.LayerNormalization(epsilon=1e-5)(h + att)
        ff = L.Dense(w["embed"])(L.Dense(w["ff"], activation="relu")(h))
        h = L.LayerNormalization(epsilon=1e-5)(h + ff)
        h = L.GlobalAveragePooling1D()(h)
    outputs = L.Dense(1, activation="sigmoid")(h)
    model = kiln.Model(inputs, outputs)
    model.compile("adam", "binary_crossentropy")

    def step() -> None:
        model.train_on_batch(x, y)

    return step


# ---- torch ---------------------------------------------------------------------------------------
def torch_case(workload: str) -> Any:
    import torch

    w = WORKLOADS[workload]
    x, y = make_data(workload)
    xt, yt = torch.tensor(x).long(), torch.tensor(y)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(w["vocab"], w["embed"])
            if workload == "lstm":
                self.body = torch.nn.LSTM(w["embed"], w["units"], batch_first=True)
                self.head = torch.nn.Linear(w["units"], 1)
            else:
                self.body = torch.nn.TransformerEncoderLayer(
                    w["embed"], w["heads"], w["ff"], dropout=0.0, batch_first=True)
                self.head = torch.nn.Linear(w["embed"], 1)

        def forward(self, ids: Any) -> Any:
            h = self.embed(ids)
            if workload == "lstm":
                _, (hn, _) = self.body(h)
                h = hn[0]
            else:
                h = self.body(h).mean(dim=1)
            return torch.sigmoid(self.head(h))

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = torch.nn.BCELoss()

    def step() -> None:
        opt.zero_grad()
        loss_fn(net(xt), yt).backward()
        opt.step()

    return step


# ---- workers -------------------------------------------------------------------------------------
def worker(framework: str, workload: str, warmup: int) -> int:
    t0 = time.perf_counter()
    step = (kiln_case if framework == "kiln" else torch_case)(workload)
    step()
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    _reply({"first_step_s": first})
    for line in sys.stdin:
        n = int(line)
        if n <= 0:
            break
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        _reply({"step_s": (time.perf_counter() - t0) / n})
    return 0


def _reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Worker:
    def __init__(self, framework: str, workload: str, warmup: int, env: dict) -> None:
        self.framework = framework
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", framework, workload,
             "--warmup", str(warmup)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env)
        self.first = self._read()["first_step_s"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.framework} worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def time(self, steps: int) -> float:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return self._read()["step_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("0\n")
            self.proc.stdin.flush()
            self.proc.wait()


def run(workload: str, frameworks: list[str], rounds: int, steps: int, warmup: int,
        cold: bool) -> list[dict]:
    env = dict(os.environ)
    cache = None
    if cold:
        cache = tempfile.mkdtemp(prefix="kiln-cold-")
        env["KILN_CACHE_DIR"] = cache
    workers = {f: Worker(f, workload, warmup, env) for f in frameworks}
    times: dict[str, list[float]] = {f: [] for f in frameworks}
    ratios = []
    try:
        for r in range(rounds):
            order = frameworks if r % 2 == 0 else frameworks[::-1]
            pair = {f: workers[f].time(steps) for f in order}
            for f, t in pair.items():
                times[f].append(t)
            if "kiln" in pair and "torch" in pair:
                ratios.append(pair["torch"] / pair["kiln"])
    finally:
        for wk in workers.values():
            wk.close()
    results = []
    for f in frameworks:
        med = statistics.median(times[f])
        res = {"workload": workload, "framework": f, "steps_per_s": 1.0 / med,
               "step_ms": med * 1e3, "first_step_s": workers[f].first, "cold_cache": cold}
        if f == "kiln" and ratios:
            res.update({"ratio_vs_torch": statistics.median(ratios),
                        "ratio_min": min(ratios), "ratio_max": max(ratios)})
        results.append(res)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS),
                        choices=list(WORKLOADS))
    parser.add_argument("--frameworks", nargs="+", default=["kiln", "torch"],
                        choices=["kiln", "torch"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps timed per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--cold", action="store_true",
                        help="kiln compiles with an empty kernel cache (first-step = cold)")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker[0], args.worker[1], args.warmup)
    frameworks = list(args.frameworks)
    if "torch" in frameworks:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("torch is not installed: timing kiln alone")
            frameworks.remove("torch")
    results = []
    for workload in args.workloads:
        results += run(workload, frameworks, args.rounds, args.steps, args.warmup, args.cold)
    print(f"{'workload':<13}{'framework':<10}{'steps/s':>9}{'ms/step':>10}{'first step s':>14}"
          f"{'torch/kiln':>12}")
    for r in results:
        ratio = f"{r['ratio_vs_torch']:.2f}" if "ratio_vs_torch" in r else ""
        print(f"{r['workload']:<13}{r['framework']:<10}{r['steps_per_s']:>9.2f}"
              f"{r['step_ms']:>10.1f}{r['first_step_s']:>14.2f}{ratio:>12}")
    print(f"(target: torch/kiln >= {TARGET} for training; first step < 5 s cold for lstm)")
    for r in results:
        print("JSON " + json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
