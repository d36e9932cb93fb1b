"""bench_suite.py's chart (``--chart``): kiln's speed against PyTorch per workload."""

from __future__ import annotations

import sys

import numpy as np


def chart(results: list[dict], path: str, target: float) -> bool:
    """A bar chart of kiln/torch (plain and fused Adam) per workload with min-max error bars
    into ``path``; False (and a note) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no chart written to {path}", file=sys.stderr)
        return False
    kilns = [r for r in results if r["framework"] == "kiln" and "error" not in r]
    x = np.arange(len(kilns))
    fig, ax = plt.subplots(figsize=(max(6, len(kilns) * 0.9), 4.5))
    for j, (key, label) in enumerate((("vs_torch", "vs torch"),
                                      ("vs_torch_fused", "vs torch, fused Adam"))):
        med = np.array([r.get(f"{key}_median", np.nan) for r in kilns])
        err = np.array([[m - r.get(f"{key}_min", m), r.get(f"{key}_max", m) - m]
                        for r, m in zip(kilns, med)]).T
        bars = ax.bar(x + (j - 0.5) * 0.4, med, 0.4, yerr=err, capsize=3, label=label)
        ax.bar_label(bars, [f"{m:.2f}" if m == m else "" for m in med], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(target, color="gray", linestyle="--", linewidth=0.8, label=f"target {target}x")
    ax.set_yscale("log")  # tiny_train's ratio is tens, the others around one
    ax.set_xticks(x, [r["workload"] for r in kilns], rotation=30, ha="right")
    ax.set_ylabel("kiln speed / PyTorch eager (median over pairs)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
