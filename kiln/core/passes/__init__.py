"""The graph optimization pipeline (docs/architecture.md, "Passes").

``optimize(graph)`` runs these passes, in this order; each is a small pure function
``Graph -> Graph`` in its own file and can be switched off by name with ``exclude``:

=============  ======================================================================
canonicalize   one spelling per computation (constants right, static broadcasts ...)
constant_fold  nodes with constant inputs -> constants (the ops' NumPy references)
cse            global value numbering (commutative operands, equal constants)
simplify       algebraic identities + numerical stabilization (log_softmax, cross-entropy)
dce            drop what no output needs
loops          one forward loop per sequence, unused loop outputs dropped, bodies optimized
fold_affine    a per-channel scale and shift after a convolution -> its kernel and bias
gemm           a product scaled into a sum with a same-shaped tensor -> one BLAS ``gemm``
fuse           elementwise groups (+ reduction epilogue) -> one ``fused`` node each
remat          recomputation until the memory plan fits ``memory_budget`` (only if given)
verify         graph invariants (types by the shape rules, acyclic, inputs/outputs kept)
=============  ======================================================================

With ``KILN_DEBUG=1`` the invariants are checked after every pass. Passes never change
``graph.inputs`` and keep the outputs' count, order and types (an unknown dim may become known).

Example:
    >>> graph, report = optimize(kiln.Graph([x], [loss, *updates]), exclude=("fuse",))
    >>> print(report)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kiln import config
from kiln.core.ir import Graph
from kiln.core.memory import MemoryPlan, plan_memory
from kiln.core.passes import barrier  # noqa: F401  (registers remat_barrier)
from kiln.core.passes._util import num_kernels
from kiln.core.passes.canonicalize import canonicalize
from kiln.core.passes.constant_fold import constant_fold
from kiln.core.passes.cse import cse
from kiln.core.passes.dce import dce
from kiln.core.passes.fold_affine import fold_affine
from kiln.core.passes.fuse import fuse
from kiln.core.passes.gemm import gemm
from kiln.core.passes.loops import loops
from kiln.core.passes.remat import format_bytes, parse_bytes, remat
from kiln.core.passes.report import to_dot
from kiln.core.passes.simplify import simplify
from kiln.core.passes.verify import GraphInvariantError, check_graph, check_preserved, verify

PIPELINE: list[tuple[str, Callable[..., Graph]]] = [
    ("canonicalize", canonicalize),
    ("constant_fold", constant_fold),
    ("cse", cse),
    ("simplify", simplify),
    ("dce", dce),
    ("loops", loops),
    ("fold_affine", fold_affine),
    ("gemm", gemm),
    ("fuse", fuse),
    ("remat", remat),
    ("verify", verify),
]
PASS_NAMES = tuple(name for name, _ in PIPELINE)


@dataclass
class PassEntry:
    """What one pass did: node counts before/after and kernels after (a fused node is one
    kernel; placeholders, params and constants are not kernels)."""

    name: str
    nodes_before: int
    nodes_after: int
    kernels_after: int
    seconds: float = 0.0


@dataclass
class Report:
    """The result of :func:`optimize` besides the graph.

    Attributes:
        passes: one :class:`PassEntry` per pass that ran, in order.
        peak_bytes: planned arena size of the optimized graph (``plan_memory``) at
            ``batch_size``.
        naive_bytes: sum of all kernel results' sizes (no buffer reuse) at ``batch_size``.
        num_kernels: kernels in the optimized graph.
        batch_size: the size used for unknown (None) dims in the memory figures.
        memory_budget: the budget in bytes, or None.
        before, after: the graphs before and after the pipeline.
        plan: the :class:`~kiln.core.memory.MemoryPlan` of the optimized graph.
        target: the backend's lines about the machine it compiled for (the CPU backend: its
            cpu, features and the engines they enable, then its options that differ from the
            defaults); the report's first lines ("" where none was given).
    """

    passes: list[PassEntry] = field(default_factory=list)
    peak_bytes: int = 0
    naive_bytes: int = 0
    num_kernels: int = 0
    batch_size: int = 1
    memory_budget: int | None = None
    before: Graph | None = None
    after: Graph | None = None
    plan: MemoryPlan | None = None
    target: str = ""

    @property
    def nodes_before(self) -> int:
        return len(self.before) if self.before is not None else 0

    @property
    def nodes_after(self) -> int:
        return len(self.after) if self.after is not None else 0

    def entry(self, name: str) -> PassEntry:
        for e in self.passes:
            if e.name == name:
                return e
        raise KeyError(f"pass {name!r} did not run; ran {[e.name for e in self.passes]}")

    def __str__(self) -> str:
        kernels_before = num_kernels(self.before) if self.before is not None else 0
        # the machine and the backend's options off their defaults first, then the passes
        lines = [self.target] if self.target else []
        lines += [f"{'pass':<14}{'nodes before':>13}{'nodes after':>13}{'kernels':>9}"
                  f"{'ms':>9}",
                  f"{'(input)':<14}{'':>13}{self.nodes_before:>13}{kernels_before:>9}{'':>9}"]
        for e in self.passes:
            lines.append(f"{e.name:<14}{e.nodes_before:>13}{e.nodes_after:>13}"
                         f"{e.kernels_after:>9}{e.seconds * 1e3:>9.1f}")
        budget = "" if self.memory_budget is None else \
            f", budget {format_bytes(self.memory_budget)}"
        lines.append(f"{self.num_kernels} kernels; planned peak {format_bytes(self.peak_bytes)}"
                     f" vs {format_bytes(self.naive_bytes)} without reuse "
                     f"(batch_size={self.batch_size}{budget})")
        lines += self._loop_lines()
        return "\n".join(lines)

    def _loop_lines(self, indent: str = "") -> list[str]:
        """One block per loop of the optimized graph: its body's kernels (nested loops
        indented)."""
        lines: list[str] = []
        for n in (self.after.nodes if self.after is not None else []):
            if n.op != "scan":
                continue
            body = n.attrs["body"]
            sub = getattr(body, "report", None)
            ops = sorted({m.op for m in body.graph.nodes if m.inputs})
            lines.append(f"{indent}loop {body.name!r} ({'reverse, ' if n.attrs['reverse'] else ''}"
                         f"{body.n_carry} carries, {body.n_x} sequences, {len(body.consts)} "
                         f"consts, {body.n_y} stacked outputs): body of "
                         f"{sub.num_kernels if sub else '?'} kernels: {', '.join(ops)}")
            if sub is not None:
                lines += sub._loop_lines(indent + "  ")
        return lines

    def to_dot(self, stage: str = "after") -> str:
        """DOT text of the graph ``"before"`` or ``"after"`` the pipeline; fused nodes are
        drawn as clusters listing their instructions."""
        if stage not in ("before", "after"):
            raise ValueError(f"to_dot: stage must be 'before' or 'after', received {stage!r}")
        graph = self.before if stage == "before" else self.after
        if graph is None:
            raise ValueError("to_dot: the report holds no graph")
        return to_dot(graph, name=f"kiln_{stage}")


def _exclusions(exclude: Any) -> set[str]:
    if isinstance(exclude, str):
        exclude = (exclude,)
    names = set(exclude or ())
    unknown = names - set(PASS_NAMES)
    if unknown:
        raise ValueError(f"optimize: unknown pass name(s) {sorted(unknown)} in exclude; the "
                         f"passes are {', '.join(PASS_NAMES)}")
    return names


def optimize(graph: Graph, exclude: Iterable[str] | str = (), memory_budget: Any = None,
             batch_size: int | None = None) -> tuple[Graph, Report]:
    """Runs the pass pipeline on ``graph``.

    Args:
        graph: the graph (inputs and outputs; after autodiff).
        exclude: names of passes to skip (see ``PASS_NAMES``).
        memory_budget: bytes (int) or a string like ``"64MB"`` / ``"1.5GiB"``; when given, the
            remat pass recomputes values until the planned peak fits, or raises ValueError.
        batch_size: size of unknown (None) dims for memory planning (default 1).

    Returns:
        ``(optimized_graph, report)``; ``str(report)`` is a table of the passes.

    Example:
        >>> g, report = optimize(Graph([x], [loss]), exclude=["remat"])
        >>> report.num_kernels <= report.passes[0].nodes_before
        True
    """
    skip = _exclusions(exclude)
    bs = 1 if batch_size is None else int(batch_size)
    if bs < 1:
        raise ValueError(f"optimize: batch_size must be >= 1, received {batch_size}")
    budget = None if memory_budget is None else parse_bytes(memory_budget)
    debug = config.debug_enabled()
    report = Report(before=graph, batch_size=bs, memory_budget=budget)
    if debug:
        check_graph(graph, "the input graph")
    current = graph
    for name, fn in PIPELINE:
        if name in skip or (name == "remat" and budget is None):
            continue
        t0 = time.perf_counter()
        n_before = len(current)
        if name == "remat":
            new = fn(current, budget, batch_size=bs)
        else:
            new = fn(current)
        seconds = time.perf_counter() - t0
        check_preserved(graph, new, f"pass {name}")
        if debug:
            check_graph(new, f"pass {name}")
        report.passes.append(PassEntry(name, n_before, len(new), num_kernels(new), seconds))
        current = new
    plan = plan_memory(current, batch_size=bs)
    report.after = current
    report.plan = plan
    report.peak_bytes = plan.peak_bytes
    report.naive_bytes = plan.naive_bytes
    report.num_kernels = num_kernels(current)
    return current, report


__all__ = ["optimize", "Report", "PassEntry", "PIPELINE", "PASS_NAMES", "GraphInvariantError",
           "canonicalize", "constant_fold", "cse", "simplify", "dce", "loops", "fuse", "remat",
           "verify",
           "parse_bytes", "to_dot"]
