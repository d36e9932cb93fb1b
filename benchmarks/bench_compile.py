"""First-step latency in a fresh process, cold (empty KILN_CACHE_DIR: every kernel is
compiled) and warm (a second process with the same cache: kernels load from numba's disk
cache), for these cases:

* ``mlp``            the MLP training step (784-512-256-10, SGD momentum, batch 128), built
                     with ``kiln.function``; first call;
* ``convnet``        examples/mnist_convnet.py's model (two Conv2D + max-pooling blocks,
                     dropout, softmax; Adam): the first ``train_on_batch`` (batch 128);
* ``convnet_epoch``  the same model's first epoch as the example runs it: ``fit`` on the
                     MNIST sample shipped with kiln (10,000 digits, validation_split=0.1,
                     batch 128, one epoch; the validation step's kernels included);
* ``resnet``         benchmarks/bench_suite.py's small ResNet (Conv2D 64 3x3 + BatchNormalization
                     + ReLU, three residual blocks with Add, GlobalAveragePooling2D, Dense
                     softmax; 32x32x3 input, Adam): the first ``train_on_batch`` (batch 64);
* ``lstm``           benchmarks/bench_sequence.py's LSTM text classifier (Embedding
                     20,000 x 128, LSTM 128, length 200, batch 64, Dense(1, sigmoid), Adam):
                     the first ``train_on_batch``.

Each run is a subprocess; its wall time includes the interpreter start and ``import kiln``.
The children run with Python's bytecode cache, as an installed package does (pip compiles it
at install): the benchmark compiles kiln's and the examples' bytecode first and removes
``PYTHONDONTWRITEBYTECODE`` from the children's environment (where it is set, every process
would compile kiln's ~280 source files again: ~0.6 s on the 2-core test host; ``--no-pyc``
measures that).
The child reports the split: import, model/graph construction, the first step (plans, JIT,
run), and its CPU time and its compile workers' (a shared machine's load stretches wall
times; CPU times show the work); ``convnet_epoch`` also times a second epoch in the same
process (``next``: the epoch's own work, so ``1st step - next`` is what the first epoch
waits for). Cold runs each get a new empty cache; warm runs reuse the
last cold run's cache.
``--workers`` sets ``KILN_COMPILE_WORKERS`` in the children (1: the serial compile, to
compare with the compile batch's worker processes, docs/architecture.md "The kernel cache").

Usage::

    python benchmarks/bench_compile.py                            # every case, cold + 2 warm
    python benchmarks/bench_compile.py --cases lstm --repeat 3    # medians of 3 cold, 3 warm
    python benchmarks/bench_compile.py --workers 1                # serial compilation

Targets (issues 14 and 18): MLP warm <= 1.5 s, cold <= 10 s; LSTM first step cold < 5 s;
convnet first epoch cold < 8 s, warm < 1 s (the ResNet has no target of its own). Prints a
table (medians) and JSON lines.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PRELUDE = r"""
import time
t0 = time.perf_counter()
import json, os, sys
import numpy as np
import kiln
t_import = time.perf_counter()
rng = np.random.default_rng(0)
"""

MLP = r"""
import kiln.ops as K
x = kiln.placeholder((None, 784))
y = kiln.placeholder((None,), "int32")
sizes = [784, 512, 256, 10]
params, h = [], x
for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
    w = kiln.Variable(rng.normal(size=(a, b)) * np.sqrt(2 / a))
    c = kiln.Variable(np.zeros(b))
    params += [w, c]
    h = h @ w + c
    if i < 2:
        h = K.relu(h)
loss = K.mean(K.sparse_softmax_cross_entropy(h, y))
grads = kiln.grad(loss, params)
updates = []
for p, g in zip(params, grads):
    v = kiln.Variable(np.zeros(p.shape))
    nv = 0.9 * v - 0.01 * g
    updates += [(v, nv), (p, p + nv)]
step = kiln.function([x, y], loss, updates=updates)
xb = rng.random((128, 784), dtype=np.float32)
yb = rng.integers(0, 10, 128).astype(np.int32)
t_built = time.perf_counter()
step(xb, yb)
"""

CONVNET = r"""
sys.path.insert(0, os.path.join(ROOT, "examples"))
import mnist_convnet
from kiln.datasets import mnist
kiln.utils.set_random_seed(1337)
(xt, yt), _ = mnist.load_sample()
xt = np.expand_dims(xt.astype("float32") / 255, -1)
model = mnist_convnet.build_model()
model.compile(loss="sparse_categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
t_built = time.perf_counter()
if EPOCH:
    model.fit(xt, yt, batch_size=128, epochs=1, validation_split=0.1, verbose=0)
else:
    model.train_on_batch(xt[:128], yt[:128])
"""

RESNET = r"""
from kiln import layers as L
xb = rng.random((64, 32, 32, 3), dtype=np.float32)
yb = rng.integers(0, 10, 64).astype(np.int32)
inputs = L.Input((32, 32, 3))
h = L.ReLU()(L.BatchNormalization()(L.Conv2D(64, 3, padding="same")(inputs)))
for _ in range(3):
    h = L.Add()([h, L.ReLU()(L.BatchNormalization()(L.Conv2D(64, 3, padding="same")(h)))])
model = kiln.Model(inputs, L.Dense(10, activation="softmax")(L.GlobalAveragePooling2D()(h)))
model.compile("adam", "sparse_categorical_crossentropy")
t_built = time.perf_counter()
model.train_on_batch(xb, yb)
"""

LSTM = r"""
from kiln import layers as L
x = rng.integers(1, 20000, size=(64, 200)).astype("int32")
y = rng.integers(0, 2, size=(64, 1)).astype("float32")
inputs = L.Input((200,), dtype="int32")
h = L.Embedding(20000, 128)(inputs)
h = L.LSTM(128)(h)
model = kiln.Model(inputs, L.Dense(1, activation="sigmoid")(h))
model.compile("adam", "binary_crossentropy")
t_built = time.perf_counter()
model.train_on_batch(x, y)
"""

EPILOGUE = r"""
t_first = time.perf_counter()
from kiln.core.backends.cpu.codegen import jit
tm = os.times()
next_s = 0.0
if globals().get("EPOCH"):  # a second epoch: what the first one costs beyond the work
    model.fit(xt, yt, batch_size=128, epochs=1, validation_split=0.1, verbose=0)
    next_s = time.perf_counter() - t_first
print("RESULT " + json.dumps({"next_s": next_s,
    "cpu_s": tm.user + tm.system, "workers_cpu_s": tm.children_user + tm.children_system,
    "import_s": t_import - t0, "build_s": t_built - t_import, "first_s": t_first - t_built,
    "in_process_s": t_first - t0, "compiled": jit.stats["compiled"],
    "by_workers": jit.stats.get("compiled_by_workers", 0),
    "cache_hits": jit.stats["cache_hits"]}))
"""

CASES = {
    "mlp": MLP,
    "convnet": "EPOCH = False\n" + CONVNET,
    "convnet_epoch": "EPOCH = True\n" + CONVNET,
    "resnet": RESNET,
    "lstm": LSTM,
}


def run_child(case: str, cache_dir: str, workers: str | None, pyc: bool = True) -> dict:
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, PYTHONPATH=ROOT + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    if pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if workers is not None:
        env["KILN_COMPILE_WORKERS"] = workers
    code = PRELUDE + f"ROOT = {ROOT!r}\n" + CASES[case] + EPILOGUE
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["wall_s"] = wall - out["next_s"]  # up to the end of the first step / epoch
            return out
    raise RuntimeError(f"child {case} failed:\n{proc.stderr}")


def median_row(rows: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--repeat", type=int, default=1, help="cold runs (each a fresh cache)")
    ap.add_argument("--runs", type=int, default=2, help="warm runs")
    ap.add_argument("--workers", help="KILN_COMPILE_WORKERS for the children")
    ap.add_argument("--no-pyc", action="store_true",
                    help="children without Python's bytecode cache (PYTHONDONTWRITEBYTECODE)")
    args = ap.parse_args(argv)
    pyc = not args.no_pyc
    if pyc:  # kiln's bytecode, as pip writes it at install
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "kiln"),
                        os.path.join(ROOT, "examples")], env=env, check=True)
    table = []
    for case in args.cases:
        colds, warms = [], []
        for _ in range(args.repeat):  # cold and warm interleaved: the same machine noise
            with tempfile.TemporaryDirectory(prefix="kiln-cache-") as tmp:
                colds.append(run_child(case, tmp, args.workers, pyc))
                warms += [run_child(case, tmp, args.workers, pyc) for _ in range(args.runs)]
        for name, rows in (("cold", colds), ("warm", warms)):
            table.append((case, name, median_row(rows), len(rows)))
            for r in rows:
                print("JSON " + json.dumps(dict(r, case=case, run=name, workers=args.workers)))
    print(f"\n{'case':<15}{'run':<6}{'n':>3}{'wall s':>8}{'import':>8}{'build':>8}"
          f"{'1st step':>10}{'next':>7}{'cpu s':>8}{'workers':>8}{'compiled':>10}"
          f"{'by workers':>12}{'cache hits':>12}  (medians)")
    for case, name, r, n in table:
        print(f"{case:<15}{name:<6}{n:>3}{r['wall_s']:>8.2f}{r['import_s']:>8.2f}"
              f"{r['build_s']:>8.2f}{r['first_s']:>10.2f}{r['next_s']:>7.2f}{r['cpu_s']:>8.2f}"
              f"{r['workers_cpu_s']:>8.2f}{r['compiled']:>10.0f}"
              f"{r['by_workers']:>12.0f}{r['cache_hits']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
