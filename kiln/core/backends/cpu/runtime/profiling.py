"""The table ``KILN_PROFILE=1`` (``CpuProgram.profile``) prints: time per kernel call of a
plan and per op kind."""

from __future__ import annotations

from typing import Any


def format_profile(plan: Any, times: list[float], total: float, repeat: int) -> str:
    """A table: per kernel call and per op kind, time per run in microseconds."""
    rows = [("feeds", "copy", times[0])] + [(s.label, s.kind, t)
                                            for s, t in zip(plan.steps, times[1:])]
    per_kind: dict[str, list[float]] = {}
    for _, kind, t in rows:
        acc = per_kind.setdefault(kind, [0.0, 0])
        acc[0] += t
        acc[1] += 1
    lines = [f"kiln cpu profile: {len(plan.steps)} kernels, {total / repeat * 1e6:.1f} us per "
             f"run ({repeat} runs)", f"{'#':>4} {'kernel':<48}{'kind':<12}{'us':>10}{'%':>7}"]
    measured = sum(times) or 1.0
    for k, (labelk, kind, t) in enumerate(rows):
        lines.append(f"{k:>4} {labelk[:47]:<48}{kind:<12}{t / repeat * 1e6:>10.1f}"
                     f"{100 * t / measured:>7.1f}")
    lines.append(f"{'':>4} {'by kind':<48}{'calls':<12}{'us':>10}{'%':>7}")
    for kind, (t, c) in sorted(per_kind.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"{'':>4} {kind:<48}{c:<12}{t / repeat * 1e6:>10.1f}"
                     f"{100 * t / measured:>7.1f}")
    overhead = total - measured
    lines.append(f"{'':>4} {'(python loop overhead)':<48}{'':<12}"
                 f"{overhead / repeat * 1e6:>10.1f}")
    return "\n".join(lines)
