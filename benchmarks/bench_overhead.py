"""Per-call overhead of the CPU backend: what a step costs besides the kernels' own work.

Measures, on this machine:

1. calling one compiled kernel (5 array arguments, trivial body) through numba's dispatcher,
   through its compiled entry point (what the executor calls), with a NumPy scalar argument
   instead of an array, and ``np.matmul(out=)`` on tiny matrices;
2. for the tiny MLP training step (32-64-64-1, batch 32; ~40 kernels): the whole
   ``kiln.function`` call, ``program.run`` alone, the plan's Python loop of kernel calls, and the
   same calls from a generated straight-line driver (one Python function with every call
   written out), which is the alternative the executor could use;
3. (``--parallel``) generated elementwise loops serial vs on all threads, by size: a 2-array
   loop (``relu(2x - 1)``) and the merged momentum update (5 arrays: g, v, p in; v, p out), to
   set ``CpuOptions.parallel_min_bytes`` (kiln/core/backends/cpu/options.py);
4. (``--pool``) split calls of kiln's thread pool right after the machine idled 0.2 s against
   back to back, and how many ran both parts on one CPU;
5. (``--blas``) single float32 GEMMs right after the machine idled 0.2 s: kiln's (a plan
   step's ``products.MatmulCall``: the private OpenBLAS whose worker threads kiln places)
   against NumPy's own OpenBLAS (``np.matmul``), alternated, and how many calls stalled
   (took over 2 ms more than back to back); then an MLP's ``predict`` and
   ``train_on_batch`` after a pause, its products on either;
6. (``--phases``) the MLP's training step against its GEMMs alone, round by round (the host's
   fast and slow phases);
7. (``--spin``) split calls of native kernels on the spin pool (workers waiting in native
   code, kiln/core/backends/cpu/runtime/spin_pool.py) against the same calls on the Python pool:
   kiln's Dense kernel on products of a few microseconds to a few hundred, alternated in
   blocks, median us a call;
8. (``--split``) the MLP's training step with its Dense products split over the threads as
   kiln splits them (by columns where that keeps a layer's units with one core) and all by
   rows, against its GEMMs alone, round by round, with the large kernels timed in place.

Usage::

    python benchmarks/bench_overhead.py [--parallel | --pool | --blas | --phases | --spin |
                                         --split]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_call_us(fn: Callable[[], None], n: int = 20000, repeat: int = 7) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    return min(times) * 1e6


def kernel_call_costs() -> dict:
    from kiln.core.backends.cpu.codegen import jit

    src = "def touch(o, a, b, c, p):\n    o[0] = a[0] + b[0] + c[0] + p[0]\n"
    k = jit.load(src, "touch", signature="bench")
    arrays = [np.ones(16, np.float32) for _ in range(4)]
    p = np.ones(4, np.int64)
    args = (*arrays, p)
    entry = k.specialize(args)
    disp = k.dispatcher
    src2 = "def touch_scalar(o, a, b, c, s):\n    o[0] = a[0] + b[0] + c[0] + s\n"
    k2 = jit.load(src2, "touch_scalar", signature="bench")
    args2 = (*arrays, np.int64(1))
    entry2 = k2.specialize(args2)
    x = np.ones((32, 32), np.float32)
    out = np.empty((32, 32), np.float32)
    return {
        "dispatcher_us": per_call_us(lambda: disp(*args)),
        "entry_point_us": per_call_us(lambda: entry(*args)),
        "entry_point_numpy_scalar_arg_us": per_call_us(lambda: entry2(*args2)),
        "matmul_32x32_out_us": per_call_us(lambda: np.matmul(x, x, out)),
    }


def straight_line_driver(calls: list) -> Callable[[], None]:
    """One generated Python function calling every kernel in order (no loop, no unpacking of
    (fn, args) pairs)."""
    env: dict = {}
    lines = ["def drive():"]
    for k, (fn, args) in enumerate(calls):
        env[f"f{k}"] = fn
        names = []
        for j, a in enumerate(args):
            env[f"a{k}_{j}"] = a
            names.append(f"a{k}_{j}")
        lines.append(f"    f{k}({', '.join(names)})")
    if len(lines) == 1:
        lines.append("    pass")
    exec(compile("\n".join(lines), "<kiln driver>", "exec"), env)
    return env["drive"]


def step_overheads() -> dict:
    from benchmarks.bench_cpu import batches, kiln_case, make_data

    step, info = kiln_case("tiny_train")
    fn = info["function"]
    x, y = make_data("tiny_train")
    for xb, yb in batches(x[:3200], y[:3200], 32):
        step(xb, yb)
    xb, yb = x[:32], y[:32]
    feeds = [xb, yb]
    prog = fn.program
    plan = prog.plan(feeds)
    calls = list(plan.calls)

    def loop() -> None:
        for f, a in calls:
            f(*a)

    drive = straight_line_driver(calls)
    res = {
        "kernels": len(calls),
        "function_call_us": per_call_us(lambda: fn(xb, yb), n=2000),
        "program_run_us": per_call_us(lambda: prog.run(feeds), n=2000),
        "python_loop_us": per_call_us(loop, n=2000),
        "straight_line_driver_us": per_call_us(drive, n=2000),
    }
    times = [0.0] * (len(calls) + 1)
    reps = 2000
    for _ in range(reps):
        plan.run_profiled(feeds, times)
    res["sum_of_kernel_times_us"] = sum(times[1:]) / reps * 1e6
    res["per_kernel_us"] = {}
    for s, t in zip(plan.steps, times[1:]):
        res["per_kernel_us"].setdefault(s.kind, []).append(t / reps * 1e6)
    res["per_kernel_us"] = {k: round(statistics.fmean(v), 2)
                            for k, v in res["per_kernel_us"].items()}
    return res


def parallel_threshold() -> dict:
    import kiln
    import kiln.ops as K
    from kiln.core.backends.cpu import options

    res = {}
    for n in (1 << 14, 1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20, 1 << 22):
        x = kiln.placeholder((n,))
        xv = np.random.default_rng(0).random(n, dtype=np.float32)
        row = {}
        for mode, threshold in (("serial", 1 << 62), ("parallel", 0)):
            with options.use(replace(options.current(), parallel_min_bytes=threshold)):
                f = kiln.function([x], K.relu(x * 2.0 - 1.0), backend="cpu")
                row[f"relu_{mode}_us"] = per_call_us(
                    lambda f=f, xv=xv: f.program.run([xv]), n=200)
                p = kiln.Variable(np.zeros(n))
                v = kiln.Variable(np.zeros(n))
                nv = 0.9 * v - 0.01 * x
                g = kiln.function([x], [], updates=[(v, nv), (p, p + nv)], backend="cpu")
                row[f"momentum_{mode}_us"] = per_call_us(
                    lambda g=g, xv=xv: g.program.run([xv]), n=200)
        res[n] = row
    return res


def pool_after_pause(pause: float = 0.2, calls: int = 40, rounds: int = 8) -> dict:
    """Split calls of two parts (a GIL-free NumPy loop of ~0.5 ms each; the caller runs one,
    a pool worker the other) right after the machine idled ``pause`` seconds, against back to
    back: median us per call over ``rounds``, and how many calls ran both parts on one CPU
    (the pool's workers move off their caller's CPU: kiln/core/backends/cpu/runtime/threads.py);
    ``after_pause_caller_moved``: the caller also runs on another CPU than before the pause
    (the CPU a worker placed off the caller's last CPU is confined to, on two CPUs)."""
    from kiln.core.backends.cpu.runtime import threads

    arrays = [np.random.default_rng(k).random(200_000) for k in range(2)]
    where: list[int] = [-1, -1]

    def part(k: int) -> None:
        np.sqrt(arrays[k], out=arrays[k])
        np.sqrt(arrays[k], out=arrays[k])
        where[k] = threads.current_cpu()

    split = [(part, (0,)), (part, (1,))]
    threads.POOL.run(split)
    out = {}
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    for mode in ("after_pause", "after_pause_caller_moved", "back_to_back"):
        times = np.zeros((rounds, calls))
        shared = 0
        for r in range(rounds):
            if mode.startswith("after_pause"):
                time.sleep(pause)
            if mode == "after_pause_caller_moved" and len(cpus) > 1:
                # the caller wakes on another CPU than before the pause, as a thread may
                os.sched_setaffinity(0, {cpus[r % len(cpus)]})
                os.sched_setaffinity(0, cpus)
            for i in range(calls):
                t0 = time.perf_counter()
                threads.POOL.run(split)
                times[r, i] = time.perf_counter() - t0
                shared += where[0] == where[1] >= 0
                part(0)  # the caller's serial work between split kernels
        med = np.median(times, axis=0) * 1e6
        out[mode] = {"first_10_us": round(float(med[:10].mean()), 1),
                     "rest_us": round(float(med[10:].mean()), 1),
                     "calls_on_one_cpu": f"{shared}/{rounds * calls}"}
    return out


# (M, K, N): the MLP benchmark's forward products at batch 128 and 1024, a Dense head of a
# convnet, a deep MLP's layer
BLAS_SHAPES = ((128, 784, 512), (1024, 784, 512), (128, 512, 256), (64, 128, 128),
               (64, 1600, 10))


def _gemm_pair(m: int, k: int, n: int, rng: np.random.Generator) -> dict:
    """``{"kiln": f, "numpy": g}``: the same product ``(m x k) @ (k x n)`` by a plan step's
    GEMM (``products.MatmulCall``) and by ``np.matmul``, each into its own output."""
    from kiln.core.backends.cpu.gemm import products

    a = rng.random((m, k), dtype=np.float32)
    b = rng.random((k, n), dtype=np.float32)
    outs = {"kiln": np.empty((m, n), np.float32), "numpy": np.empty((m, n), np.float32)}
    step = products.MatmulCall()
    fs = {"kiln": lambda: step(a, b, outs["kiln"]),
          "numpy": lambda: np.matmul(a, b, out=outs["numpy"])}
    for f in fs.values():
        f()
    np.testing.assert_allclose(outs["kiln"], outs["numpy"], rtol=1e-4, atol=1e-3)
    return fs


def blas_after_pause(pause: float = 0.2, calls: int = 12) -> dict:
    """Per shape: median us of a GEMM right after ``pause`` s idle, kiln's against NumPy's
    (alternated, each after its own pause), the back-to-back medians, and the calls after a
    pause that stalled (took over 2 ms more than their back-to-back median)."""
    rng = np.random.default_rng(0)
    out = {}
    for m, k, n in BLAS_SHAPES:
        fs = _gemm_pair(m, k, n, rng)
        row: dict[str, Any] = {}
        for name, f in fs.items():  # back to back, each side on its own
            row[f"{name}_back_to_back_us"] = round(per_call_us(f, n=20, repeat=5), 1)
        after: dict[str, list[float]] = {name: [] for name in fs}
        for _ in range(calls):
            for name, f in fs.items():
                time.sleep(pause)
                t0 = time.perf_counter()
                f()
                after[name].append((time.perf_counter() - t0) * 1e6)
        for name, ts in after.items():
            row[f"{name}_after_pause_us"] = round(statistics.median(ts), 1)
            slow = sum(t > row[f"{name}_back_to_back_us"] + 2000 for t in ts)
            row[f"{name}_stalls"] = f"{slow}/{calls}"
        out[f"{m}x{k}x{n}"] = row
    return out


def mlp_calls_after_pause(pause: float = 0.2, calls: int = 20) -> dict:
    """The MLP 784-512-256-10's ``predict`` on 256 samples and ``train_on_batch`` on 128, each
    right after ``pause`` s idle: median and 90th-percentile ms with the products on the
    placed copy (kiln's way), against the same calls of a second model whose products go to
    NumPy's own instance (``blas.singles`` answering None while it runs). Both models' Dense
    products are BLAS's here (kiln's own kernel off: its ``predict`` would take it)."""
    import kiln
    from kiln.core.backends.cpu import options
    from kiln.core.backends.cpu.gemm import blas

    with options.use(replace(options.current(), native_matmul=False)):
        rng = np.random.default_rng(0)
        x = rng.random((256, 784), dtype=np.float32)
        y = rng.integers(0, 10, 256).astype(np.int32)
        placed = blas.singles

        def model(numpys: bool) -> Any:
            m = kiln.Sequential([kiln.Input((784,)), kiln.layers.Dense(512, activation="relu"),
                                 kiln.layers.Dense(256, activation="relu"),
                                 kiln.layers.Dense(10, activation="softmax")])
            m.compile(kiln.optimizers.SGD(0.01, momentum=0.9), "sparse_categorical_crossentropy")

            def on(f: Callable[[], Any]) -> Callable[[], Any]:
                def call() -> Any:
                    blas.singles = (lambda: None) if numpys else placed
                    try:
                        return f()
                    finally:
                        blas.singles = placed
                return call

            fs = {"predict_256": on(lambda: m.predict(x, batch_size=256, verbose=0)),
                  "train_on_batch_128": on(lambda: m.train_on_batch(x[:128], y[:128]))}
            for f in fs.values():
                f()
            return fs

        sides = {"kiln": model(False), "numpy": model(True)}
        times: dict[str, list[float]] = {f"{c}_{s}": [] for s in sides for c in sides["kiln"]}
        for _ in range(calls):
            for side, fs in sides.items():
                for name, f in fs.items():
                    time.sleep(pause)
                    t0 = time.perf_counter()
                    f()
                    times[f"{name}_{side}"].append((time.perf_counter() - t0) * 1e3)
    return {k: {"median_ms": round(statistics.median(v), 2),
                "p90_ms": round(sorted(v)[int(0.9 * len(v))], 2)} for k, v in times.items()}


def train_step_phases(rounds: int = 25, steps: int = 80) -> dict:
    """The MLP 784-512-256-10's training step (SGD momentum, batch 128: the plan's kernel
    calls, as ``fit`` runs them) against its GEMMs alone (``floors.mlp_step``), alternated in
    rounds of ``steps`` steps: us per step and the ratio, round by round. The host's speed
    swings between phases within seconds; the ratio shows what the step does besides its
    GEMMs in each (docs/architecture.md, "Dense products")."""
    import floors

    x, y, plan = _mlp_step_plan()
    calls = plan.calls
    floor, _ = floors.mlp_step(128, predict=False)
    out: dict[str, dict] = {}
    for r in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            for fn, args in calls:
                fn(*args)
        t1 = time.perf_counter()
        for _ in range(steps):
            floor(x, y)
        t2 = time.perf_counter()
        step, gemms = (t1 - t0) / steps * 1e6, (t2 - t1) / steps * 1e6
        out[f"round_{r}"] = {"step_us": round(step), "gemms_us": round(gemms),
                             "ratio": round(step / gemms, 3)}
    return out


def _mlp_step_plan() -> tuple:
    """``(x, y, plan)``: a batch and the training plan of the MLP 784-512-256-10 (SGD
    momentum, batch 128), as ``fit`` runs it."""
    import kiln

    rng = np.random.default_rng(0)
    x = rng.random((128, 784), dtype=np.float32)
    y = rng.integers(0, 10, 128).astype(np.int32)
    m = kiln.Sequential([kiln.Input((784,)), kiln.layers.Dense(512, activation="relu"),
                         kiln.layers.Dense(256, activation="relu"),
                         kiln.layers.Dense(10, activation="softmax")])
    m.compile(kiln.optimizers.SGD(0.01, momentum=0.9), "sparse_categorical_crossentropy")
    m.train_on_batch(x, y)
    return x, y, m.train_function.program.plan([x, y])


def train_step_splits(rounds: int = 10, steps: int = 30) -> dict:
    """The MLP's training step (``_mlp_step_plan``) with its Dense products split over the
    threads as kiln splits them (an update, and a product under ``COLUMN_ROWS`` rows, by its
    columns: ``native_matmul._ranges``) and with every one split by its rows, against its
    GEMMs alone (``floors.mlp_step``, split by rows), alternated round by round: us per step,
    the ratios, and each side's kernels over 50 us, timed in place (median per kernel)."""
    import floors

    from kiln.core.backends.cpu.gemm import native_matmul

    kilns = native_matmul._ranges
    sides = {"columns": _mlp_step_plan()[2]}
    native_matmul._ranges = lambda m, k, n, update=False, columns=True: kilns(m, k, n, update,
                                                                              False)
    try:
        sides["rows"] = _mlp_step_plan()[2]
    finally:
        native_matmul._ranges = kilns
    x, y, _ = _mlp_step_plan()
    floor, _ = floors.mlp_step(128, predict=False)
    out: dict[str, dict] = {}
    for r in range(rounds):
        row: dict = {}
        for name, plan in sides.items():
            per = [[] for _ in plan.calls]
            for _ in range(steps):
                for k, (fn, args) in enumerate(plan.calls):
                    t0 = time.perf_counter()
                    fn(*args)
                    per[k].append(time.perf_counter() - t0)
            med = [statistics.median(p) * 1e6 for p in per]
            row[f"{name}_us"] = round(sum(med))
            row[f"{name}_kernels"] = {f"{k}:{plan.steps[k].label}": round(v)
                                      for k, v in enumerate(med) if v > 50}
        t0 = time.perf_counter()
        for _ in range(steps):
            floor(x, y)
        row["floor_us"] = round((time.perf_counter() - t0) / steps * 1e6)
        for name in sides:
            row[f"{name}_over_floor"] = round(row[f"{name}_us"] / row["floor_us"], 3)
        out[f"round_{r}"] = row
    return out


def _print_rows(res: dict) -> None:
    """One line per row of ``res`` (its name, then ``key value`` pairs), then the JSON line."""
    for name, row in res.items():
        print(f"{name:<14}" + "  ".join(f"{k} {v}" for k, v in row.items()))
    print("JSON " + json.dumps(res))


SPIN_SHAPES = ((128, 128, 256), (256, 128, 256), (512, 128, 256), (128, 784, 512))


def spin_split_calls(blocks: int = 40, per_block: int = 25) -> dict:
    """Median us a call of kiln's Dense kernel split in two parts (``native_matmul.add``: a
    ``threads.SplitCall``), its parts on the spin pool and on the Python pool
    (``threads.POOL``), each forced (``parts.forced``: whatever the load), alternated in
    blocks whose first call is not counted."""
    from kiln.core.backends.cpu import options
    from kiln.core.backends.cpu.gemm import native_matmul
    from kiln.core.backends.cpu.runtime import parts, threads

    class Steps:
        class node:
            op = "matmul"

        def add(self, fn: Callable, args: tuple, label: str | None = None) -> None:
            self.fn, self.args = fn, args

    out = {}
    for m, k, n in SPIN_SHAPES:
        rng = np.random.default_rng(m + k + n)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        c = np.empty((m, n), np.float32)
        spin, python = Steps(), Steps()
        with options.use(replace(options.current(), matmul_serial_work=0)):  # split all
            with parts.forced("spin" if parts.engine() == "spin" else "portable"):
                taken = native_matmul.add(spin, a, b, c)
            with parts.forced("portable"):
                taken = taken and native_matmul.add(python, a, b, c)
            if not taken:
                out[f"{m}x{k}x{n}"] = {"note": "not taken by the kernel (no AVX-512?)"}
                continue
        if not isinstance(python.fn, threads.SplitCall):
            out[f"{m}x{k}x{n}"] = {"note": "one thread only"}
            continue
        spin.fn(*spin.args)
        bound = spin.fn._native is not None
        times: dict[str, list[float]] = {"spin": [], "python": []}
        for _ in range(blocks):
            for name, step in (("spin", spin), ("python", python)):
                for i in range(per_block):
                    t0 = time.perf_counter()
                    step.fn(*step.args)
                    if i:
                        times[name].append(time.perf_counter() - t0)
        row = {k: round(statistics.median(v) * 1e6, 1) for k, v in times.items()}
        row["python_over_spin"] = round(row["python"] / row["spin"], 2)
        row["spin_pool_bound"] = bound
        out[f"{m}x{k}x{n}"] = row
    return out


def main() -> int:
    if "--spin" in sys.argv:
        _print_rows(spin_split_calls())
        return 0
    if "--blas" in sys.argv:
        _print_rows({**blas_after_pause(), "mlp": mlp_calls_after_pause()})
        return 0
    if "--pool" in sys.argv:
        _print_rows(pool_after_pause())
        return 0
    if "--phases" in sys.argv:
        _print_rows(train_step_phases())
        return 0
    if "--split" in sys.argv:
        _print_rows(train_step_splits())
        return 0
    if "--parallel" in sys.argv:
        res = parallel_threshold()
        print(f"{'elements':>10}" + "".join(f"{k:>22}" for k in next(iter(res.values()))))
        for n, row in res.items():
            print(f"{n:>10}" + "".join(f"{v:>22.1f}" for v in row.values()))
        print("JSON " + json.dumps(res))
        return 0
    costs = kernel_call_costs()
    steps = step_overheads()
    print("one kernel call (us):")
    for k, v in costs.items():
        print(f"  {k:<36}{v:8.3f}")
    print(f"tiny MLP training step ({steps['kernels']} kernel calls), us per step:")
    for k in ("function_call_us", "program_run_us", "python_loop_us",
              "straight_line_driver_us", "sum_of_kernel_times_us"):
        print(f"  {k:<36}{steps[k]:8.1f}")
    print("  mean time per call by kind (profiled):", steps["per_kernel_us"])
    print("JSON " + json.dumps({"kernel_call": costs, "tiny_step": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
