"""How long building, differentiating and sorting a chain of 100,000 elementwise ops takes.

    python benchmarks/bench_graph.py [--n 100000]
"""

import argparse
import json
import time

import kiln
import kiln.ops as K
from kiln.core.ir import toposort


def main(n: int) -> dict:
    t0 = time.perf_counter()
    x = kiln.placeholder((None, 8))
    y = x
    for i in range(n):
        y = K.tanh(y) if i % 2 else y * 1.0001
    t1 = time.perf_counter()
    (g,) = kiln.grad(K.sum(y), [x])
    t2 = time.perf_counter()
    order = toposort([g])
    t3 = time.perf_counter()
    result = {"bench": "graph_chain", "ops": n, "build_s": round(t1 - t0, 3),
              "grad_s": round(t2 - t1, 3), "toposort_s": round(t3 - t2, 3),
              "nodes_after_grad": len(order)}
    print(f"chain of {n} ops: build {t1 - t0:.2f} s, grad {t2 - t1:.2f} s, "
          f"toposort of {len(order)} nodes {t3 - t2:.2f} s")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100_000)
    main(p.parse_args().n)
