"""CPU training / inference benchmark: kiln (numba backend) against PyTorch eager, same machine,
same run.

Workloads (synthetic data, one warm-up epoch, then whole epochs timed):

* ``mlp_train``    MLP 784-512-256-10 ReLU, softmax cross-entropy, SGD momentum 0.9, batch 128,
                   10,240 samples;
* ``mlp_predict``  the same MLP, inference at batch 1024 over 10,240 samples;
* ``convnet_train`` the Keras MNIST convnet (Conv2D 32 3x3 relu - MaxPool 2 - Conv2D 64 3x3 relu
                   - MaxPool 2 - Flatten - Dropout 0.5 - Dense 10 softmax), Adam, batch 128,
                   3,840 samples;
* ``tiny_train``   MLP 32-64-64-1 regression (MSE), SGD momentum 0.9, batch 32, 16,000 samples.

Every (framework, workload) runs in its own process, so peak RSS, thread pools and caches are
its own. By default (interleaved mode) the processes of one workload are long-lived workers:
each builds its case (first-step latency: model and graph construction + compilation + the
first step, in a process that has already imported the framework), runs the warm-up epoch and
then times one epoch at a time on request. The coordinator runs ``--epochs`` x ``--rounds``
*pairs*: one epoch of every framework, one worker computing at a time, the order reversed every
pair, so all frameworks see the same machine noise. Reported per case: samples/s of the best
and of the median epoch, first-step latency, peak RSS, and for kiln the ratio against torch as
the median over pairs of torch_epoch_s / kiln_epoch_s (min and max too). ``--sequential`` runs
the old way instead: one process per case and round, run after one another, the best round
counts (pairs are then rounds, each side's best epoch).

``gemm`` (table: ``gemm-floor``, MLP workloads only) is no framework: per batch it runs exactly
the GEMMs of the MLP step with the BLAS kiln's GEMMs use (``blas_matmul``: NumPy's, or kiln's
private OpenBLAS with this CPU's kernels) (training: the 3 forward GEMMs and the 5 backward
ones, dW3 dh2 dW2 dh1 dW1; predict: the 3 forward ones) and nothing else. Every implementation
whose GEMMs run on that BLAS must do at least that much work per step, so the ``cap`` column
(median pair ratio torch_epoch_s / gemm_epoch_s) is the best kiln/torch ratio it could reach.

Usage::

    python benchmarks/bench_cpu.py                      # all workloads: kiln, torch, gemm
    python benchmarks/bench_cpu.py --workloads mlp_train tiny_train --epochs 5 --rounds 2
    python benchmarks/bench_cpu.py --workloads mlp_train --api fit
    python benchmarks/bench_cpu.py --frameworks kiln    # no torch, no gemm floor
    python benchmarks/bench_cpu.py --sequential --rounds 3   # one process per case and round

kiln's side uses the core API (placeholders, Variables, kiln.grad, update nodes,
kiln.function, a Python loop over batches); ``--api fit`` times whole epochs of
``model.fit(..., verbose=0)`` (``predict`` for the inference workload) on the same models
built with ``kiln.Sequential(...).compile(...)``.
Prints a table, then one JSON line per case (prefix ``JSON``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# kiln from this tree, or a kiln@base worker's ($KILN_BENCH_TREE, harness.worker_env)
sys.path.insert(0, os.environ.get("KILN_BENCH_TREE") or os.path.dirname(HERE))
sys.path.insert(0, HERE)  # benchmarks/ is not a package: its modules, from anywhere

import floors  # noqa: E402
import harness  # noqa: E402
from floors import blas_matmul  # noqa: E402,F401  (bench_suite and the tests use it here)
from harness import Worker, WorkerError, _has_torch, _order  # noqa: E402,F401

WORKLOADS = {
    "mlp_train": {"samples": 10240, "batch": 128, "kind": "train"},
    "mlp_predict": {"samples": 10240, "batch": 1024, "kind": "predict"},
    "convnet_train": {"samples": 3840, "batch": 128, "kind": "train"},
    "tiny_train": {"samples": 16000, "batch": 32, "kind": "train"},
}
TARGETS = {"mlp_train": 1.4, "mlp_predict": 1.3, "convnet_train": 1.2, "tiny_train": 4.5}
FRAMEWORKS = ["kiln", "torch", "gemm"]
GEMM_WORKLOADS = ("mlp_train", "mlp_predict")
LABELS = {"gemm": "gemm-floor"}
LR = 0.01


# ---- data -------------------------------------------------------------------------------------
def make_data(workload: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = WORKLOADS[workload]["samples"]
    if workload.startswith("mlp"):
        return (rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n).astype(np.int32))
    if workload == "convnet_train":
        return (rng.random((n, 28, 28, 1), dtype=np.float32),
                rng.integers(0, 10, n).astype(np.int32))
    x = rng.normal(size=(n, 32)).astype(np.float32)
    return x, (x[:, :1] * 0.5 + 0.1 * rng.normal(size=(n, 1))).astype(np.float32)


def batches(x: np.ndarray, y: np.ndarray,
            batch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for i in range(0, len(x) - batch + 1, batch):
        yield x[i:i + batch], y[i:i + batch]


# ---- kiln, core API ---------------------------------------------------------------------------
def _kiln_dense_params(kiln, rng, sizes: list[int]) -> list:
    params = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lim = np.sqrt(6 / (a + b))
        params.append(kiln.Variable(rng.uniform(-lim, lim, size=(a, b)), name=f"w{i}"))
        params.append(kiln.Variable(np.zeros(b), name=f"b{i}"))
    return params


def _kiln_mlp(K, x, params, final_relu: bool = False):
    h = x
    n = len(params) // 2
    for i in range(n):
        h = h @ params[2 * i] + params[2 * i + 1]
        if i < n - 1:
            h = K.relu(h)
    return h


def _sgd_momentum(kiln, params, grads, lr: float = LR, momentum: float = 0.9) -> list:
    updates = []
    for p, g in zip(params, grads):
        v = kiln.Variable(np.zeros(p.shape), name=f"velocity_{p.name}")
        new_v = momentum * v - lr * g
        updates += [(v, new_v), (p, p + new_v)]
    return updates


def _adam(kiln, K, params, grads, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-7) -> list:
    t = kiln.Variable(np.zeros(()), name="adam_t")
    t_new = t + 1.0
    updates = [(t, t_new)]
    corr = K.sqrt(1.0 - b2 ** t_new) / (1.0 - b1 ** t_new) * lr
    for p, g in zip(params, grads):
        m = kiln.Variable(np.zeros(p.shape), name=f"m_{p.name}")
        v = kiln.Variable(np.zeros(p.shape), name=f"v_{p.name}")
        m_new = b1 * m + (1 - b1) * g
        v_new = b2 * v + (1 - b2) * K.square(g)
        updates += [(m, m_new), (v, v_new), (p, p - corr * m_new / (K.sqrt(v_new) + eps))]
    return updates


def kiln_case(workload: str) -> tuple[Callable[[Any, Any], Any], dict]:
    """Builds kiln's step for ``workload``: returns (step(x, y), info)."""
    import kiln
    import kiln.ops as K

    rng = np.random.default_rng(1)
    if workload in ("mlp_train", "mlp_predict"):
        x = kiln.placeholder((None, 784), name="x")
        params = _kiln_dense_params(kiln, rng, [784, 512, 256, 10])
        logits = _kiln_mlp(K, x, params)
        if workload == "mlp_predict":
            fn = kiln.function([x], K.softmax(logits))
            return (lambda xb, yb: fn(xb)), {"function": fn}
        y = kiln.placeholder((None,), "int32", name="y")
        loss = K.mean(K.sparse_softmax_cross_entropy(logits, y))
        fn = kiln.function([x, y], loss,
                           updates=_sgd_momentum(kiln, params, kiln.grad(loss, params)))
        return fn, {"function": fn}
    if workload == "tiny_train":
        x = kiln.placeholder((None, 32), name="x")
        y = kiln.placeholder((None, 1), name="y")
        params = _kiln_dense_params(kiln, rng, [32, 64, 64, 1])
        loss = K.mean(K.square(_kiln_mlp(K, x, params) - y))
        fn = kiln.function([x, y], loss,
                           updates=_sgd_momentum(kiln, params, kiln.grad(loss, params)))
        return fn, {"function": fn}
    # convnet
    x = kiln.placeholder((None, 28, 28, 1), name="x")
    y = kiln.placeholder((None,), "int32", name="y")
    key = kiln.placeholder((2,), "int64", name="key")

    def glorot(shape, fan_in, fan_out):
        lim = np.sqrt(6 / (fan_in + fan_out))
        return kiln.Variable(rng.uniform(-lim, lim, size=shape))

    w1, b1 = glorot((3, 3, 1, 32), 9, 288), kiln.Variable(np.zeros(32))
    w2, b2 = glorot((3, 3, 32, 64), 288, 576), kiln.Variable(np.zeros(64))
    w3, b3 = glorot((1600, 10), 1600, 10), kiln.Variable(np.zeros(10))
    params = [w1, b1, w2, b2, w3, b3]
    h = K.max_pool2d(K.relu(K.conv2d(x, w1) + b1), 2)
    h = K.max_pool2d(K.relu(K.conv2d(h, w2) + b2), 2)
    h = K.dropout(K.reshape(h, (-1, 1600)), 0.5, key, salt=1)
    loss = K.mean(K.sparse_softmax_cross_entropy(h @ w3 + b3, y))
    fn = kiln.function([x, y, key], loss, updates=_adam(kiln, K, params,
                                                        kiln.grad(loss, params)))
    counter = [0]

    def step(xb, yb):
        counter[0] += 1
        return fn(xb, yb, np.array([1234, counter[0]], np.int64))

    return step, {"function": fn}


def kiln_fit_model(workload: str) -> Any:
    """The same models through ``kiln.Sequential`` + ``compile`` (``--api fit``)."""
    import kiln

    layers = kiln.layers
    if workload in ("mlp_train", "mlp_predict"):
        model = kiln.Sequential([kiln.Input((784,)), layers.Dense(512, activation="relu"),
                                 layers.Dense(256, activation="relu"),
                                 layers.Dense(10, activation="softmax")])
        model.compile(kiln.optimizers.SGD(LR, momentum=0.9), "sparse_categorical_crossentropy")
    elif workload == "tiny_train":
        model = kiln.Sequential([kiln.Input((32,)), layers.Dense(64, activation="relu"),
                                 layers.Dense(64, activation="relu"), layers.Dense(1)])
        model.compile(kiln.optimizers.SGD(LR, momentum=0.9), "mse")
    else:
        model = kiln.Sequential([
            kiln.Input((28, 28, 1)), layers.Conv2D(32, 3, activation="relu"),
            layers.MaxPooling2D(2), layers.Conv2D(64, 3, activation="relu"),
            layers.MaxPooling2D(2), layers.Flatten(), layers.Dropout(0.5),
            layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy")
    return model


# ---- torch ------------------------------------------------------------------------------------
def torch_case(workload: str, fused: bool = False) -> tuple[Callable[[Any, Any], Any], dict]:
    """PyTorch eager twin of ``workload``; ``fused``: ``Adam(fused=True)`` where it uses Adam."""
    import torch
    from torch import nn

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    if workload in ("mlp_train", "mlp_predict"):
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                              nn.Linear(256, 10))
        if workload == "mlp_predict":
            model.eval()

            def predict(xb, yb):
                with torch.no_grad():
                    return torch.softmax(model(torch.from_numpy(xb)), -1).numpy()
            return predict, {}
        loss_fn: Callable = nn.functional.cross_entropy
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    elif workload == "tiny_train":
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                              nn.Linear(64, 1))
        loss_fn = nn.functional.mse_loss
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Dropout(0.5), nn.Linear(1600, 10))
        loss_fn = nn.functional.cross_entropy
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, **({"fused": True} if fused else {}))
    model.train()
    is_conv = workload == "convnet_train"
    is_class = workload != "tiny_train"

    def step(xb, yb):
        xt = torch.from_numpy(xb)
        if is_conv:
            xt = xt.permute(0, 3, 1, 2)
        yt = torch.from_numpy(yb).long() if is_class else torch.from_numpy(yb)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()

    return step, {}


# ---- gemm floor (benchmarks/floors.py) -------------------------------------------------------
def gemm_case(workload: str) -> tuple[Callable[[Any, Any], Any], dict]:
    """The MLP workloads' gemm-floor (:func:`floors.mlp_step`)."""
    if workload not in GEMM_WORKLOADS:
        raise ValueError(f"gemm floor is defined for {GEMM_WORKLOADS} only, not {workload}")
    return floors.mlp_step(WORKLOADS[workload]["batch"], WORKLOADS[workload]["kind"] == "predict")


# ---- one case, in this process ------------------------------------------------------------------
class Case:
    """One (framework, workload) in this process, shared by both modes: ``first_step()`` builds
    the model / graph and runs its first step, ``epoch()`` runs and times one epoch."""

    def __init__(self, framework: str, workload: str, api: str) -> None:
        self.framework, self.workload, self.api = framework, workload, api
        # import cost is not part of first-step latency
        importlib.import_module(self._module())
        self.batch = self._spec()["batch"]
        self.x, self.y = self._data()
        self.samples = (len(self.x) // self.batch) * self.batch
        self.info: dict = {}
        self.first_step_s = float("nan")
        self._run_epoch: Callable[[], Any] | None = None

    def first_step(self) -> float:
        t0 = time.perf_counter()
        self._run_epoch = self._build()
        self.first_step_s = time.perf_counter() - t0
        return self.first_step_s

    # hooks: benchmarks/bench_suite.py overrides these to add its workloads and frameworks
    def _module(self) -> str:
        return {"gemm": "numpy"}.get(self.framework, self.framework)

    def _spec(self) -> dict:
        return WORKLOADS[self.workload]

    def _data(self) -> tuple[np.ndarray, np.ndarray]:
        return make_data(self.workload)

    def _fit_model(self) -> Any:
        return kiln_fit_model(self.workload)

    def _maker(self) -> Callable[[str], tuple[Callable[[Any, Any], Any], dict]]:
        return {"kiln": kiln_case, "torch": torch_case, "gemm": gemm_case}[self.framework]

    def _build(self) -> Callable[[], Any]:
        """Builds the case, runs its first step, returns a function running one epoch."""
        x, y, batch = self.x, self.y, self.batch
        predict = self._spec()["kind"] == "predict"
        if self.framework == "kiln" and self.api == "fit":
            model = self._fit_model()
            self.info = {"model": model}
            if predict:
                model.predict(x[:batch], batch_size=batch, verbose=0)
                return lambda: model.predict(x, batch_size=batch, verbose=0)
            model.train_on_batch(x[:batch], y[:batch])
            return lambda: model.fit(x, y, batch_size=batch, epochs=1, verbose=0,
                                     shuffle=False)
        step, self.info = self._maker()(self.workload)
        step(x[:batch], y[:batch])

        def run_epoch() -> None:
            for xb, yb in batches(x, y, batch):
                step(xb, yb)

        return run_epoch

    def epoch(self) -> float:
        assert self._run_epoch is not None, "first_step() builds the case"
        t = time.perf_counter()
        self._run_epoch()
        return time.perf_counter() - t

    def stats(self) -> dict:
        """Everything but the epoch times: first step, peak RSS, kiln's kernel / jit counts."""
        out = {"batch": self.batch, "samples": self.samples, "first_step_s": self.first_step_s,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "cpus": os.cpu_count()}
        if self.framework == "kiln":
            try:
                from kiln.core.backends.cpu.codegen import jit
            except ImportError:  # a kiln@base tree from before the backend's subpackages
                from kiln.core.backends.cpu import jit  # type: ignore[no-redef]

            prog = getattr(self.info.get("function"), "program", None)
            out["kernels"] = getattr(prog, "num_kernels", None)
            out["jit_compiled"] = jit.stats["compiled"]
            out["jit_cache_hits"] = jit.stats["cache_hits"]
        return out


def make_result(framework: str, workload: str, api: str, stats: dict,
                epoch_times: list[float]) -> dict:
    n, batch = stats["samples"], stats["batch"]
    best, med = min(epoch_times), statistics.median(epoch_times)
    return {"framework": framework, "workload": workload, "api": api,
            "samples_per_s": n / best, "samples_per_s_median": n / med, "epoch_s": best,
            "epoch_s_median": med, "step_ms": best / (n // batch) * 1e3,
            "epochs": len(epoch_times), **stats,
            "epoch_times": [round(t, 5) for t in epoch_times]}


def run_case(framework: str, workload: str, epochs: int, api: str) -> dict:
    """Sequential mode, in this process: first step, warm-up epoch, ``epochs`` timed epochs."""
    case = Case(framework, workload, api)
    case.first_step()
    case.epoch()  # warm-up
    times = [case.epoch() for _ in range(epochs)]
    return make_result(framework, workload, api, case.stats(), times)


def worker(framework: str, workload: str, api: str, case_class: type[Case] = Case) -> int:
    """Interleaved mode, one worker: builds the case, warms up, then answers ``epoch`` / ``done``
    read line by line from stdin with one ``RESULT <json>`` line each."""
    case = case_class(harness.base_framework(framework), workload, api)
    case.first_step()
    case.epoch()  # warm-up
    _reply({"ready": True, "first_step_s": case.first_step_s})
    for line in iter(sys.stdin.readline, ""):
        command = line.strip()
        if command == "epoch":
            _reply({"epoch_s": case.epoch()})
        elif command == "done":
            _reply(case.stats())
            return 0
        elif command:
            _reply({"error": f"unknown command {command!r}"})
    return 1


def _reply(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def _api(framework: str, api: str) -> str:
    return api if harness.base_framework(framework) == "kiln" else "core"


def _error(framework: str, workload: str, api: str, message: str) -> dict:
    return {"framework": framework, "workload": workload, "api": _api(framework, api),
            "error": message}


def add_ratios(results: list[dict], pairs: list[dict[str, float]]) -> None:
    """For each non-torch case of one workload: median / min / max over ``pairs`` (epoch seconds
    by framework) of torch_epoch_s / its epoch_s; kiln also gets ``cap``, gemm's median."""
    by = {r["framework"]: r for r in results if "error" not in r}
    for f, r in by.items():
        if f == "torch":
            continue
        ratios = [p["torch"] / p[f] for p in pairs if "torch" in p and f in p]
        if ratios:
            r.update(ratio_median=statistics.median(ratios), ratio_min=min(ratios),
                     ratio_max=max(ratios), pairs=len(ratios))
    if "kiln" in by and "ratio_median" in by.get("gemm", {}):
        by["kiln"]["cap"] = by["gemm"]["ratio_median"]


# ---- sequential mode ----------------------------------------------------------------------------
def _subprocess(framework: str, workload: str, epochs: int, api: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", framework, workload,
           "--epochs", str(epochs), "--api", api]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return _error(framework, workload, api,
                  "".join((proc.stderr or proc.stdout).strip().splitlines()[-1:]))


def run_sequential(workload: str, frameworks: list[str], epochs: int, rounds: int,
                   api: str) -> list[dict]:
    """One process per case and round; the best round counts, pairs are rounds."""
    best: dict[str, dict] = {}
    pairs: list[dict[str, float]] = []
    for i in range(rounds):
        pair: dict[str, float] = {}
        for f in _order(frameworks, i):
            r = _subprocess(f, workload, epochs, _api(f, api))
            print(f"  done {f:<6} {workload:<14} "
                  + (f"{r['samples_per_s']:>10.0f} samples/s" if "error" not in r
                     else f"ERROR {r['error']}"), file=sys.stderr, flush=True)
            if "error" not in r:
                pair[f] = r["epoch_s"]
            old = best.get(f)
            if old is None or "error" in old or (
                    "error" not in r and r["samples_per_s"] > old["samples_per_s"]):
                best[f] = r
        pairs.append(pair)
    results = [best[f] for f in frameworks]
    add_ratios(results, pairs)
    return results


# ---- interleaved mode ---------------------------------------------------------------------------
def run_interleaved(workload: str, frameworks: list[str], epochs: int, rounds: int, api: str,
                    settle: float, command: list[str] | None = None,
                    pairs_out: list[dict[str, float]] | None = None) -> list[dict]:
    """One worker per framework, started and warmed up one after another; then ``epochs`` x
    ``rounds`` pairs of one epoch per framework, one worker computing at a time.
    ``command``: the workers' script (see ``Worker``); ``pairs_out`` receives the pairs."""
    workers: dict[str, Worker] = {}
    errors: dict[str, str] = {}
    try:
        for f in frameworks:
            workers[f] = Worker(f, workload, _api(f, api),
                                command or [sys.executable, os.path.abspath(__file__)])
            try:
                workers[f].ask()  # ready: built, first step and warm-up epoch done
            except WorkerError as e:
                errors[f] = str(e)
        pairs: list[dict[str, float]] = []
        n_pairs = epochs * rounds
        for i in range(n_pairs):
            pair: dict[str, float] = {}
            for f in _order(frameworks, i):
                if f in errors:
                    continue
                time.sleep(settle)  # the previous worker's BLAS / OpenMP threads stop spinning
                try:
                    pair[f] = workers[f].ask("epoch")["epoch_s"]
                except WorkerError as e:
                    errors[f] = str(e)
            pairs.append(pair)
            if pairs_out is not None:
                pairs_out.append(pair)
            ratio = (f"  kiln/torch {pair['torch'] / pair['kiln']:.2f}x"
                     if "kiln" in pair and "torch" in pair else "")
            print(f"  pair {i + 1}/{n_pairs} {workload:<14}"
                  + "".join(f" {f} {s:.3f}s" for f, s in pair.items()) + ratio,
                  file=sys.stderr, flush=True)
        results = []
        for f in frameworks:
            try:
                if f in errors:
                    raise WorkerError(errors[f])
                stats = workers[f].ask("done")
                results.append(make_result(f, workload, _api(f, api), stats,
                                           [p[f] for p in pairs if f in p]))
            except WorkerError as e:
                results.append(_error(f, workload, api, str(e)))
    finally:
        for w in workers.values():
            w.close()
    add_ratios(results, pairs)
    return results


# ---- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--frameworks", nargs="+", default=FRAMEWORKS, choices=FRAMEWORKS,
                    help="gemm: the BLAS floor, MLP workloads only")
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs after the warm-up")
    ap.add_argument("--api", default="core", choices=["core", "fit"])
    ap.add_argument("--rounds", type=int, default=1,
                    help="interleaved: epochs x rounds pairs; sequential: runs per case, the "
                         "best counts")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--interleave", dest="sequential", action="store_false",
                      help="long-lived workers, epochs interleaved in pairs (default)")
    mode.add_argument("--sequential", action="store_true",
                      help="one process per case and round, one after another")
    ap.set_defaults(sequential=False)
    ap.add_argument("--settle", type=float, default=0.2,
                    help="interleaved: seconds of idle before each epoch (default 0.2)")
    ap.add_argument("--one", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"), help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print("RESULT " + json.dumps(run_case(args.one[0], args.one[1], args.epochs, args.api)))
        return 0
    if args.worker:
        return worker(args.worker[0], args.worker[1], args.api)
    frameworks = [f for f in args.frameworks if f != "torch" or _has_torch()]
    results = []
    for w in args.workloads:
        fs = [f for f in frameworks if f != "gemm" or w in GEMM_WORKLOADS]
        if args.sequential:
            results += run_sequential(w, fs, args.epochs, args.rounds, args.api)
        else:
            results += run_interleaved(w, fs, args.epochs, args.rounds, args.api, args.settle)
    print_table(results)
    for r in results:
        print("JSON " + json.dumps(r))
    return 0


def print_table(results: list[dict]) -> None:
    print(f"\n{'workload':<15}{'framework':<12}{'samples/s':>11}{'median/s':>10}{'step ms':>9}"
          f"{'first step s':>14}{'peak RSS MB':>13}{'vs torch':>10}{'pairs min-max':>17}"
          f"{'target':>8}{'cap':>7}")
    for r in results:
        name = LABELS.get(r["framework"], r["framework"])
        if "error" in r:
            print(f"{r['workload']:<15}{name:<12}  error: {r['error']}")
            continue
        ratio = spread = target = cap = ""
        if "ratio_median" in r:
            ratio = f"{r['ratio_median']:.2f}x"
            spread = f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}x ({r['pairs']})"
            if r["framework"] == "kiln":
                target = f">={TARGETS[r['workload']]}x"
        if "cap" in r:
            cap = f"{r['cap']:.2f}x"
        print(f"{r['workload']:<15}{name:<12}{r['samples_per_s']:>11.0f}"
              f"{r['samples_per_s_median']:>10.0f}{r['step_ms']:>9.3f}{r['first_step_s']:>14.2f}"
              f"{r['peak_rss_mb']:>13.0f}{ratio:>10}{spread:>17}{target:>8}{cap:>7}")


if __name__ == "__main__":
    sys.exit(main())
