"""First-step latency of the MLP training step (784-512-256-10, SGD momentum, batch 128), in a
fresh process: cold (empty KILN_CACHE_DIR: every kernel is compiled) and warm (a second
process with the same cache: kernels load from numba's disk cache).

Each run is a subprocess; its wall time includes the interpreter start and ``import kiln``.
The child also reports the split: import, graph construction, ``kiln.function`` (optimization
passes + backend setup) and the first call (plans, JIT, run).

Usage::

    python benchmarks/bench_compile.py            # cold, then warm, in a temporary cache dir
    python benchmarks/bench_compile.py --runs 3   # warm runs repeated

Targets: warm <= 1.5 s, cold <= 10 s (including import). Prints a table and JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r"""
import time
t0 = time.perf_counter()
import json
import numpy as np
import kiln
import kiln.ops as K
t_import = time.perf_counter()
rng = np.random.default_rng(0)
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
t_graph = time.perf_counter()
step = kiln.function([x, y], loss, updates=updates)
t_function = time.perf_counter()
xb = rng.random((128, 784), dtype=np.float32)
yb = rng.integers(0, 10, 128).astype(np.int32)
step(xb, yb)
t_first = time.perf_counter()
from kiln.core.backends.cpu import jit
print("RESULT " + json.dumps({
    "import_s": t_import - t0, "graph_s": t_graph - t_import,
    "function_s": t_function - t_graph, "first_call_s": t_first - t_function,
    "in_process_s": t_first - t0, "compiled": jit.stats["compiled"],
    "cache_hits": jit.stats["cache_hits"], "backend": type(step.program).__module__}))
"""


def run_child(cache_dir: str) -> dict:
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, PYTHONPATH=ROOT + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
            out["wall_s"] = wall
            return out
    raise RuntimeError(f"child failed:\n{proc.stderr}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2, help="warm runs")
    ap.add_argument("--cache-dir", help="cache dir to use (default: a fresh temporary one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kiln-cache-") as tmp:
        cache = args.cache_dir or tmp
        rows = [("cold", run_child(cache))]
        rows += [(f"warm{i + 1}", run_child(cache)) for i in range(args.runs)]
    print(f"{'run':<7}{'wall s':>8}{'import':>8}{'graph':>8}{'function':>10}{'1st call':>10}"
          f"{'compiled':>10}{'cache hits':>12}")
    for name, r in rows:
        print(f"{name:<7}{r['wall_s']:>8.2f}{r['import_s']:>8.2f}{r['graph_s']:>8.2f}"
              f"{r['function_s']:>10.2f}{r['first_call_s']:>10.2f}{r['compiled']:>10}"
              f"{r['cache_hits']:>12}")
    cold, warm = rows[0][1]["wall_s"], min(r["wall_s"] for _, r in rows[1:])
    print(f"cold {cold:.2f} s (target <= 10 s), warm {warm:.2f} s (target <= 1.5 s)")
    for name, r in rows:
        print("JSON " + json.dumps(dict(r, run=name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
