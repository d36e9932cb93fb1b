"""GPU training benchmark: kiln's cuda backend next to PyTorch on CUDA, same machine, same run.

Workloads (synthetic MNIST-shaped data; one warm-up epoch, then whole epochs timed):

* ``mlp_train``     MLP 784-512-256-10 ReLU, softmax cross-entropy, SGD momentum 0.9,
                    batch 128, 12,800 samples;
* ``convnet_train`` the Keras MNIST convnet (Conv2D 32 3x3 relu - MaxPool 2 - Conv2D 64 3x3
                    relu - MaxPool 2 - Flatten - Dropout 0.5 - Dense 10), Adam, batch 128,
                    6,400 samples.

Both frameworks copy every batch from host NumPy arrays to the GPU and read the loss back
each step (kiln's compiled function returns it; torch's ``loss.item()``), so both synchronize
once per step. kiln uses its core API: placeholders, Variables, ``kiln.grad``, optimizer
update nodes written with ``kiln.ops`` and ``kiln.function(..., backend="cuda")``; weights and
optimizer slots stay on the GPU between steps.

Each (framework, workload) runs in its own subprocess. Reported per case: samples/s (median
over the timed epochs), ms per step, first-step latency (graph build + optimization + kernel
compilation + the first step) and the first/last loss.

Usage::

    python benchmarks/gpu.py                           # both workloads, kiln and torch
    python benchmarks/gpu.py --workloads mlp_train --epochs 5
    python benchmarks/gpu.py --sim --tiny              # test this script without a GPU

``--sim`` runs kiln under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1) and torch on the CPU;
``--tiny`` shrinks models and data so that the simulator finishes in seconds. The numbers of
those modes mean nothing; they exercise the script. Prints a table, then one JSON line per case
(prefix ``JSON``). Exit status 0 unless ``--strict`` and a case failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

WORKLOADS = ("mlp_train", "convnet_train")
FULL = {
    "mlp_train": {"samples": 12800, "batch": 128, "sizes": [784, 512, 256, 10]},
    "convnet_train": {"samples": 6400, "batch": 128, "image": 28, "filters": (32, 64)},
}
TINY = {
    "mlp_train": {"samples": 8, "batch": 4, "sizes": [16, 8, 8, 10]},
    "convnet_train": {"samples": 4, "batch": 2, "image": 10, "filters": (2, 3)},
}
LR = 0.01


def conv_dims(image: int) -> int:
    """Flattened size after conv3 - pool2 - conv3 - pool2 (valid padding)."""
    s = (image - 2) // 2
    return ((s - 2) // 2) ** 2


# ---- data ----------------------------------------------------------------------------------------
def make_data(workload: str, cfg: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = cfg["samples"]
    if workload == "mlp_train":
        x = rng.random((n, cfg["sizes"][0]), dtype=np.float32)
    else:
        x = rng.random((n, cfg["image"], cfg["image"], 1), dtype=np.float32)
    return x, rng.integers(0, 10, n).astype(np.int32)


def batches(x: np.ndarray, y: np.ndarray, batch: int):
    for i in range(0, len(x) - batch + 1, batch):
        yield x[i:i + batch], y[i:i + batch]


# ---- kiln ----------------------------------------------------------------------------------------
def _glorot(kiln, rng, shape, fan_in, fan_out, name):
    lim = np.sqrt(6 / (fan_in + fan_out))
    return kiln.Variable(rng.uniform(-lim, lim, size=shape), name=name)


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


def kiln_case(workload: str, cfg: dict) -> tuple[Callable[[Any, Any], Any], dict]:
    import kiln
    import kiln.ops as K

    rng = np.random.default_rng(1)
    if workload == "mlp_train":
        sizes = cfg["sizes"]
        x = kiln.placeholder((None, sizes[0]), name="x")
        y = kiln.placeholder((None,), "int32", name="y")
        params = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            params += [_glorot(kiln, rng, (a, b), a, b, f"w{i}"),
                       kiln.Variable(np.zeros(b), name=f"b{i}")]
        h = x
        for i in range(len(sizes) - 1):
            h = h @ params[2 * i] + params[2 * i + 1]
            if i < len(sizes) - 2:
                h = K.relu(h)
        loss = K.mean(K.sparse_softmax_cross_entropy(h, y))
        fn = kiln.function([x, y], loss, backend="cuda",
                           updates=_sgd_momentum(kiln, params, kiln.grad(loss, params)))
        return fn, {"function": fn}
    size, (f1, f2) = cfg["image"], cfg["filters"]
    flat = conv_dims(size) * f2
    x = kiln.placeholder((None, size, size, 1), name="x")
    y = kiln.placeholder((None,), "int32", name="y")
    key = kiln.placeholder((2,), "int64", name="key")
    w1, b1 = _glorot(kiln, rng, (3, 3, 1, f1), 9, 9 * f1, "w1"), kiln.Variable(np.zeros(f1))
    w2, b2 = (_glorot(kiln, rng, (3, 3, f1, f2), 9 * f1, 9 * f2, "w2"),
              kiln.Variable(np.zeros(f2)))
    w3, b3 = _glorot(kiln, rng, (flat, 10), flat, 10, "w3"), kiln.Variable(np.zeros(10))
    params = [w1, b1, w2, b2, w3, b3]
    h = K.max_pool2d(K.relu(K.conv2d(x, w1) + b1), 2)
    h = K.max_pool2d(K.relu(K.conv2d(h, w2) + b2), 2)
    h = K.dropout(K.reshape(h, (-1, flat)), 0.5, key, salt=1)
    loss = K.mean(K.sparse_softmax_cross_entropy(h @ w3 + b3, y))
    fn = kiln.function([x, y, key], loss, backend="cuda",
                       updates=_adam(kiln, K, params, kiln.grad(loss, params)))
    counter = [0]

    def step(xb, yb):
        counter[0] += 1
        return fn(xb, yb, np.array([1234, counter[0]], np.int64))

    return step, {"function": fn}


def kiln_info(info: dict) -> dict:
    from kiln.core.backends import cuda as kcuda
    from kiln.core.backends.cuda import _lower

    fn = info.get("function")
    prog = getattr(fn, "program", None)
    out = {"device": kcuda.device_info().get("name"),
           "kernels_per_step": getattr(prog, "num_kernels", None),
           "compile_s": round(getattr(fn, "compile_seconds", 0.0), 3),
           "gemm": "cuBLAS (CuPy)" if _lower.BLAS.cp is not None else "kiln"}
    if prog is not None:
        labels = prog.kernel_labels()
        host = sorted({lb for lb in labels if lb.endswith("(host)")})
        if host:
            out["host_fallbacks"] = host
    return out


# ---- torch ---------------------------------------------------------------------------------------
def torch_case(workload: str, cfg: dict, device: str) -> tuple[Callable[[Any, Any], Any], dict]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    dev = torch.device(device)
    if workload == "mlp_train":
        sizes = cfg["sizes"]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        model = nn.Sequential(*layers).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        is_conv = False
    else:
        f1, f2 = cfg["filters"]
        flat = conv_dims(cfg["image"]) * f2
        model = nn.Sequential(nn.Conv2d(1, f1, 3), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(f1, f2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Dropout(0.5), nn.Linear(flat, 10)).to(dev)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        is_conv = True
    model.train()

    def step(xb, yb):
        xt = torch.from_numpy(xb).to(dev)
        if is_conv:
            xt = xt.permute(0, 3, 1, 2)
        yt = torch.from_numpy(yb).to(dev).long()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()

    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return step, {"device": name, "torch": torch.__version__}


# ---- one case, in this process -------------------------------------------------------------------
def run_case(framework: str, workload: str, epochs: int, tiny: bool, torch_device: str) -> dict:
    cfg = (TINY if tiny else FULL)[workload]
    if framework == "kiln":
        import kiln  # noqa: F401  (import time is not part of the first step)
    else:
        import torch  # noqa: F401
    x, y = make_data(workload, cfg)
    batch = cfg["batch"]
    t0 = time.perf_counter()
    if framework == "kiln":
        step, info = kiln_case(workload, cfg)
    else:
        step, info = torch_case(workload, cfg, torch_device)
    losses = [float(step(x[:batch], y[:batch]))]
    first_step = time.perf_counter() - t0
    for xb, yb in batches(x, y, batch):  # warm-up epoch
        step(xb, yb)
    epoch_times = []
    for _ in range(epochs):
        t = time.perf_counter()
        for xb, yb in batches(x, y, batch):
            loss = step(xb, yb)
        epoch_times.append(time.perf_counter() - t)
    losses.append(float(loss))
    steps = len(x) // batch
    med = statistics.median(epoch_times)
    result = {"framework": framework, "workload": workload, "batch": batch,
              "samples_per_s": steps * batch / med, "step_ms": med / steps * 1e3,
              "first_step_s": first_step, "first_loss": losses[0], "last_loss": losses[-1],
              "epochs": epochs, "tiny": tiny}
    if framework == "kiln":
        result.update(kiln_info(info))
        from kiln.core.backends.cuda import simulator_enabled

        result["simulator"] = simulator_enabled()
    else:
        result.update({k: v for k, v in info.items()})
    if not np.isfinite(losses).all():
        result["warning"] = "non-finite loss"
    return result


def _subprocess(framework: str, workload: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", framework, workload,
           "--epochs", str(args.epochs), "--torch-device", args.torch_device]
    if args.tiny:
        cmd.append("--tiny")
    env = dict(os.environ)
    if args.sim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    base = {"framework": framework, "workload": workload}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {**base, "error": f"timed out after {args.timeout} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()
    return {**base, "error": " | ".join(tail[-3:]) or f"exit status {proc.returncode}"}


def _torch_device(requested: str, sim: bool) -> str | None:
    """The device torch runs on, or None to skip torch."""
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return None
    except (ImportError, ValueError):
        return None
    if requested != "auto":
        return requested
    code = "import torch; print(torch.cuda.is_available())"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300)
        has_cuda = proc.stdout.strip() == "True"
    except (subprocess.SubprocessError, OSError):
        has_cuda = False
    if has_cuda:
        return "cuda"
    return "cpu" if sim else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--frameworks", nargs="+", default=["kiln", "torch"],
                    choices=["kiln", "torch"])
    ap.add_argument("--epochs", type=int, default=3, help="timed epochs after the warm-up")
    ap.add_argument("--sim", action="store_true",
                    help="kiln under the CUDA simulator, torch on the CPU (tests the script)")
    ap.add_argument("--tiny", action="store_true", help="tiny models and data (with --sim)")
    ap.add_argument("--torch-device", default="auto",
                    help="auto (cuda when available; cpu with --sim), cuda or cpu")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per case")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a case failed")
    ap.add_argument("--one", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        try:
            r = run_case(args.one[0], args.one[1], args.epochs, args.tiny, args.torch_device)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            traceback.print_exc()
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print("RESULT " + json.dumps(r))
        return 0
    results = []
    notes = []
    frameworks = list(args.frameworks)
    if "torch" in frameworks:
        device = _torch_device(args.torch_device, args.sim)
        if device is None:
            frameworks.remove("torch")
            notes.append("torch skipped: not installed or no CUDA device (use --torch-device cpu "
                         "to compare with torch on the CPU)")
        else:
            args.torch_device = device
    for w in args.workloads:
        for f in frameworks:
            r = _subprocess(f, w, args)
            results.append(r)
            status = (f"{r['samples_per_s']:>10.0f} samples/s" if "error" not in r
                      else f"ERROR {r['error']}")
            print(f"  done {f:<6} {w:<14} {status}", file=sys.stderr, flush=True)
    print_table(results)
    for note in notes:
        print(f"note: {note}")
    for r in results:
        print("JSON " + json.dumps(r))
    failed = any("error" in r for r in results)
    return 1 if failed and args.strict else 0


def print_table(results: list[dict]) -> None:
    by = {(r["framework"], r["workload"]): r for r in results}
    print(f"\n{'workload':<15}{'framework':<10}{'device':<24}{'samples/s':>12}{'step ms':>10}"
          f"{'first step s':>14}{'loss first->last':>20}{'vs torch':>10}")
    for r in results:
        if "error" in r:
            print(f"{r['workload']:<15}{r['framework']:<10}  error: {r['error']}")
            continue
        ratio = ""
        t = by.get(("torch", r["workload"]))
        if r["framework"] == "kiln" and t and "error" not in t:
            ratio = f"{r['samples_per_s'] / t['samples_per_s']:.2f}x"
        device = str(r.get("device", ""))[:23]
        losses = f"{r['first_loss']:.3f}->{r['last_loss']:.3f}"
        print(f"{r['workload']:<15}{r['framework']:<10}{device:<24}{r['samples_per_s']:>12.0f}"
              f"{r['step_ms']:>10.3f}{r['first_step_s']:>14.2f}{losses:>20}{ratio:>10}")


if __name__ == "__main__":
    sys.exit(main())
