"""``bench_suite.py --contended``: several copies of one workload training at once, in separate
processes started together on the machine's cores, against one copy alone (issue 47: kiln on a
busy machine).

For each framework, ``--copies`` (4) long-lived worker processes build the workload (as
``bench_suite.py``'s workers do: kiln through ``fit``, PyTorch eager) and run a warm-up epoch,
one after another. Then ``--rounds`` rounds; in each every framework (in an order reversed
every round) makes two measurements (in an order reversed every round too), so all see
the same machine noise:

* alone: copy 0 runs ``--epochs`` epochs while the others sleep; its rate is samples / s;
* together: every copy is told to start its ``--epochs`` epochs at the same moment (a
  ``time.monotonic`` deadline: CLOCK_MONOTONIC is one clock for every process); each reports
  the (start, end) of every epoch. The window is from the last copy's start to the first
  copy's end; each copy's work in it is its epochs' samples, those cut by the window in
  proportion to the time inside it. The total rate is the sum over copies of their work over
  the window's length.

Reported: the median over rounds of total rate together / rate alone (min-max beside it), and
the rates, and the plans kiln's monitor sampled (by thread count: ``cpus.plan``). 1.0 means
four copies do as much work as one alone. That ratio is the product of two (:func:`split`):
the work per CPU-second (each copy's process CPU time over its epochs, spinning included)
together over alone, which is the framework's, and the CPUs the copies got together over
those one got alone, which on a machine shared with other jobs is mostly the scheduler's (a
session's processes share one autogroup's weight, however many run).

Frameworks: ``kiln``, ``kiln@base`` (the tree ``$KILN_BENCH_BASELINE``), ``torch`` (its
default threads: the CPUs) and ``torch1`` (``torch.set_num_threads(1)`` in each copy).
Workloads: any of ``bench_suite.py``'s (default ``mlp_train`` and ``convnet_train``).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMEWORKS = ("kiln", "kiln@base", "torch", "torch1")
DEFAULT_WORKLOADS = ("mlp_train", "convnet_train")


def work_in(spans: list[list[float]], samples: int, lo: float, hi: float) -> float:
    """Samples done between ``lo`` and ``hi`` by a copy whose epochs of ``samples`` samples ran
    over ``spans`` [(start, end), ...]: an epoch cut by the window counts in proportion to the
    share of its time inside."""
    done = 0.0
    for s, e in spans:
        inside = min(e, hi) - max(s, lo)
        if inside > 0 and e > s:
            done += samples * inside / (e - s)
    return done


def split(alone: dict, together: list[dict]) -> tuple[float, float]:
    """(samples per CPU-second together / alone, CPUs used together / alone) from the replies
    (``spans``, ``samples``, ``cpu``: process CPU seconds over the spans) of one copy alone and
    of the copies at once, each over its whole run (their product is about the window's
    ratio of :func:`total_rate`)."""
    def per_cpu(runs: list[dict]) -> float:
        return sum(r["samples"] * len(r["spans"]) for r in runs) / sum(r["cpu"] for r in runs)

    def cpus(runs: list[dict]) -> float:
        wall = max(r["spans"][-1][1] for r in runs) - min(r["spans"][0][0] for r in runs)
        return sum(r["cpu"] for r in runs) / wall

    return per_cpu(together) / per_cpu([alone]), cpus(together) / cpus([alone])


def total_rate(runs: list[dict]) -> tuple[float, float]:
    """(samples / s of all copies together, the window's seconds) from each copy's reply."""
    lo = max(r["spans"][0][0] for r in runs)
    hi = min(r["spans"][-1][1] for r in runs)
    if hi <= lo:
        raise ValueError("contended: the copies did not run at the same time "
                         f"(window {lo:.3f} .. {hi:.3f})")
    return sum(work_in(r["spans"], r["samples"], lo, hi) for r in runs) / (hi - lo), hi - lo


# ---- a worker ------------------------------------------------------------------------------
def worker(framework: str, workload: str) -> int:
    """One copy: builds the case, warms up, then answers ``run <epochs> <start>`` (wait until
    monotonic time ``start``, run the epochs, reply their spans) and ``done``."""
    sys.path.insert(0, HERE)
    import bench_cpu  # (kiln@base: kiln from $KILN_BENCH_TREE, harness.worker_env)
    import bench_suite

    case = bench_suite.SuiteCase("kiln" if framework.startswith("kiln") else "torch",
                                 workload, "fit")
    case.first_step()
    if framework == "torch1":
        import torch

        torch.set_num_threads(1)
    case.epoch()
    kiln_file = sys.modules["kiln"].__file__ if "kiln" in sys.modules else None
    bench_cpu._reply({"ready": True, "kiln": kiln_file, "samples": case.samples})
    for line in iter(sys.stdin.readline, ""):
        words = line.split()
        if words[:1] == ["run"]:
            epochs, start = int(words[1]), float(words[2])
            while time.monotonic() < start:
                time.sleep(min(0.01, max(0.0, start - time.monotonic())))
            spans, cpu = [], os.times()
            for _ in range(epochs):
                s = time.monotonic()
                case.epoch()
                spans.append([s, time.monotonic()])
            used = os.times()
            bench_cpu._reply({"spans": spans, "samples": case.samples, "plans": _plans(),
                              "cpu": used.user + used.system - cpu.user - cpu.system})
        elif words[:1] == ["done"]:
            bench_cpu._reply({"load": os.getloadavg()})
            return 0
        elif words:
            bench_cpu._reply({"error": f"unknown command {line.strip()!r}"})
    return 1


def _plans() -> dict:
    """kiln's contention plans sampled so far, by thread count (and resets the count)."""
    if "kiln" not in sys.modules:
        return {}
    try:
        from kiln.core.backends.cpu.runtime import cpus
    except ImportError:
        return {}
    monitor = getattr(cpus, "MONITOR", None)  # (none in an older kiln)
    counts = dict(getattr(monitor, "counts", {}))
    getattr(monitor, "counts", {}).clear()
    return counts


# ---- the coordinator ------------------------------------------------------------------------
def _start(workers: list[Any], epochs: int, delay: float = 0.3) -> list[dict]:
    """Tells ``workers`` to start ``epochs`` epochs together ``delay`` s from now; their replies."""
    start = time.monotonic() + delay
    for w in workers:
        w.proc.stdin.write(f"run {epochs} {start}\n")
        w.proc.stdin.flush()
    return [w.ask() for w in workers]


def _one(workers: list[Any], epochs: int, what: str) -> tuple[float, dict, list[dict]]:
    """(samples / s, the plans copy 0 sampled, the replies) of copy 0 alone or of every
    copy at once."""
    if what == "alone":
        r = _start(workers[:1], epochs, 0.0)[0]
        return (r["samples"] * epochs / (r["spans"][-1][1] - r["spans"][0][0]), r["plans"],
                [r])
    runs = _start(workers, epochs)
    return total_rate(runs)[0], runs[0]["plans"], runs


def measure(frameworks: list[str], workload: str, copies: int, epochs: int, rounds: int,
            settle: float = 0.5) -> list[dict]:
    """The contended figures of each framework on one workload (see the module docstring):
    ``copies`` workers per framework, the frameworks' rounds interleaved (each round every
    framework alone and together, the orders reversed every round)."""
    from harness import Worker, WorkerError, _order

    command = [sys.executable, os.path.abspath(__file__)]
    workers: dict[str, list[Worker]] = {}
    out = {f: {"framework": f, "workload": workload, "copies": copies} for f in frameworks}
    got: dict[str, dict[str, list]] = {f: {"alone": [], "together": [], "ratio": [],
                                           "per_cpu": [], "cpus": []} for f in frameworks}
    try:
        for f in frameworks:
            try:
                workers[f] = []
                for _ in range(copies):
                    # kiln@base's environment (the old tree, its own cache): harness
                    workers[f].append(Worker(f if f == "kiln@base" else "kiln", workload,
                                             "fit", command + ["--framework", f]))
                    ready = workers[f][-1].ask()
                out[f]["kiln_file"] = ready.get("kiln")
            except WorkerError as e:
                out[f]["error"] = str(e)
        for i in range(rounds):
            for f in _order([f for f in frameworks if "error" not in out[f]], i):
                try:
                    rate, plans, replies = {}, {}, {}
                    for what in _order(["alone", "together"], i):
                        time.sleep(settle)
                        rate[what], plans[what], replies[what] = _one(workers[f], epochs, what)
                except (WorkerError, ValueError) as e:
                    out[f]["error"] = str(e)
                    continue
                for k in ("alone", "together"):
                    got[f][k].append(rate[k])
                got[f]["ratio"].append(rate["together"] / rate["alone"])
                per_cpu, cpus = split(replies["alone"][0], replies["together"])
                got[f]["per_cpu"].append(per_cpu)
                got[f]["cpus"].append(cpus)
                print(f"  {f:<9} {workload:<14} round {i + 1}/{rounds}: alone "
                      f"{rate['alone']:.0f}/s, {copies} together {rate['together']:.0f}/s, "
                      f"ratio {got[f]['ratio'][-1]:.2f} = per CPU-s {per_cpu:.2f} x CPUs "
                      f"{cpus:.2f} (load {os.getloadavg()[0]:.2f}) "
                      f"kiln's plans (samples by threads) {plans}", file=sys.stderr, flush=True)
    finally:
        for ws in workers.values():
            for w in ws:
                w.close()
    for f in frameworks:
        r = got[f]["ratio"]
        if r and "error" not in out[f]:
            out[f].update(alone_per_s=statistics.median(got[f]["alone"]),
                          together_per_s=statistics.median(got[f]["together"]),
                          ratio_median=statistics.median(r), ratio_min=min(r),
                          ratio_max=max(r), rounds=len(r), loadavg=os.getloadavg(),
                          per_cpu_median=statistics.median(got[f]["per_cpu"]),
                          cpus_median=statistics.median(got[f]["cpus"]))
    return [out[f] for f in frameworks]


def run(workloads: list[str], frameworks: list[str], copies: int, epochs: int,
        rounds: int) -> list[dict]:
    results = []
    for w in workloads:
        results += measure(frameworks, w, copies, epochs, rounds)
    print(f"\n{'workload':<16}{'framework':<11}{'alone/s':>10}{f'{copies} at once/s':>16}"
          f"{'total/alone (min-max)':>26}{'per CPU-s':>11}{'CPUs':>7}")
    for r in results:
        if "error" in r:
            print(f"{r['workload']:<16}{r['framework']:<11}  error: {r['error']}")
            continue
        print(f"{r['workload']:<16}{r['framework']:<11}{r['alone_per_s']:>10.0f}"
              f"{r['together_per_s']:>16.0f}{r['ratio_median']:>12.2f}x "
              f"({r['ratio_min']:.2f}-{r['ratio_max']:.2f}){r['per_cpu_median']:>10.2f}x"
              f"{r['cpus_median']:>6.2f}x")
    print(f"(total/alone: samples/s of {copies} copies at once over one copy alone, median "
          f"over rounds; acceptance for kiln: >= 0.9x; about per CPU-s x CPUs: samples per "
          f"CPU-second and CPUs used, together over alone)")
    for r in results:
        print("JSON " + json.dumps(r))
    return results


if __name__ == "__main__":  # a worker: contended.py --worker kiln WORKLOAD --api fit --framework F
    argv = sys.argv[1:]
    f = argv[argv.index("--framework") + 1]
    sys.exit(worker(f, argv[argv.index("--worker") + 2]))
