"""kiln's ``predict`` against onnxruntime on the model kiln exports (``model.export``).

For the MNIST MLP and convnet of ``examples/`` (784-512-512-10 with dropout; two conv +
max-pool blocks, dropout, softmax) at batch 1 (serving latency: where per-call overhead
shows) and batch 1024 (throughput), in ONE process: the model is exported once, then the
repetitions alternate kiln and onnxruntime (each repetition times a fixed number of calls of
each, after a warm-up, in an order that turns from one repetition to the next), so both see
the same machine noise. Reported per workload: the
median time per call of ``model.predict(x, batch_size=len(x), verbose=0)``, of
``model.predict_on_batch(x)`` (kiln's serving call, no batching loop or callbacks), of
``model(x)``, of
``session.run`` (onnxruntime with its default threads), and the median of the per-repetition
ratios kiln / onnxruntime (> 1: onnxruntime is faster); each as the median call of a
repetition (a call the scheduler of a busy machine preempted for milliseconds counts once)
and as the mean call (``*_mean_*``: throughput, preemptions included).

    python benchmarks/bench_onnx.py [--reps 7] [--batch 1]

Prints a table and one JSON line per workload (``{"bench": "onnx", ...}``). Needs
``pip install "kiln-nn[onnx]"``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import mnist_convnet  # noqa: E402
import mnist_mlp  # noqa: E402

import kiln  # noqa: E402

#: (model, input shape, batch size, calls per repetition)
WORKLOADS = [("mlp", (784,), 1, 400), ("mlp", (784,), 1024, 30),
             ("convnet", (28, 28, 1), 1, 200), ("convnet", (28, 28, 1), 1024, 3)]


def per_call(fn, n: int) -> tuple[float, float]:
    """``n`` calls of ``fn``: the median time of one call (the issue's serving figure: a call
    that a busy machine's scheduler preempted counts once, not for its milliseconds) and the
    mean (throughput, preemptions included)."""
    clock = time.perf_counter
    ts = []
    t0 = clock()
    for _ in range(n):
        t = clock()
        fn()
        ts.append(clock() - t)
    return statistics.median(ts), (clock() - t0) / n


def callables(model, sess, x) -> dict:
    """The calls timed: kiln's predict, predict_on_batch and ``model(x)``, onnxruntime's run."""
    feed = {sess.get_inputs()[0].name: x}
    return {"predict": lambda: model.predict(x, batch_size=len(x), verbose=0),
            "predict_on_batch": lambda: model.predict_on_batch(x),
            "call": lambda: model(x),
            "onnxruntime": lambda: sess.run(None, feed)}


def main(reps: int = 7, batches: tuple[int, ...] = (1, 1024)) -> list[dict]:
    import onnxruntime as ort

    kiln.utils.set_random_seed(0)
    models = {"mlp": mnist_mlp.build_model(), "convnet": mnist_convnet.build_model()}
    sessions = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models.items():
            path = os.path.join(tmp, f"{name}.onnx")
            model.export(path)
            sessions[name] = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    results = []
    for name, shape, batch, calls in WORKLOADS:
        if batch not in batches:
            continue
        model, sess = models[name], sessions[name]
        x = rng.uniform(size=(batch,) + shape).astype(np.float32)
        fns = callables(model, sess, x)
        got, want = fns["onnxruntime"]()[0], fns["predict"]()
        err = float(np.max(np.abs(got - want)))
        for fn in fns.values():  # warm-up: compile, plan, first allocations
            per_call(fn, max(2, calls // 10))
        medians: dict[str, list[float]] = {k: [] for k in fns}
        means: dict[str, list[float]] = {k: [] for k in fns}
        order = list(fns)
        for r in range(reps):
            # the order turns each repetition: what runs right after onnxruntime shares the
            # cores with its threads' spin-wait (and after kiln's, with kiln's)
            for k in order[r % len(order):] + order[:r % len(order)]:
                med, mean = per_call(fns[k], calls)
                medians[k].append(med)
                means[k].append(mean)
        row = {"bench": "onnx", "model": name, "batch": batch, "calls": calls, "reps": reps,
               "max_abs_diff": err}
        for k in fns:
            row[f"{k}_ms"] = statistics.median(medians[k]) * 1e3
            row[f"{k}_mean_ms"] = statistics.median(means[k]) * 1e3
        for k in ("predict", "predict_on_batch", "call"):  # per repetition, then their median
            for stat, t in (("", medians), ("_mean", means)):
                row[f"{k}{stat}_over_ort"] = statistics.median(
                    a / b for a, b in zip(t[k], t["onnxruntime"]))
        results.append(row)
    print(f"onnxruntime {ort.__version__}, kiln {kiln.__version__}, {os.cpu_count()} cores; "
          f"ms per call: the median call of each repetition, median over {reps} interleaved "
          f"repetitions (ratios per repetition, then their median; 'mean': of the means)")
    print(f"{'model':<9}{'batch':>6}{'predict':>10}{'on_batch':>10}{'model(x)':>10}{'ort':>10}"
          f"{'predict/ort':>13}{'on_batch/ort':>14}{'model(x)/ort':>14}{'mean pr/ort':>13}"
          f"{'mean ob/ort':>13}{'max|diff|':>11}")
    for r in results:
        print(f"{r['model']:<9}{r['batch']:>6}{r['predict_ms']:>10.3f}"
              f"{r['predict_on_batch_ms']:>10.3f}{r['call_ms']:>10.3f}{r['onnxruntime_ms']:>10.3f}"
              f"{r['predict_over_ort']:>12.2f}x{r['predict_on_batch_over_ort']:>13.2f}x"
              f"{r['call_over_ort']:>13.2f}x"
              f"{r['predict_mean_over_ort']:>12.2f}x{r['predict_on_batch_mean_over_ort']:>12.2f}x"
              f"{r['max_abs_diff']:>11.1e}")
    for r in results:
        print(json.dumps(r))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--batch", type=int, action="append",
                        help="only these batch sizes (1, 1024; repeatable); default both")
    args = parser.parse_args()
    main(args.reps, tuple(args.batch or (1, 1024)))
