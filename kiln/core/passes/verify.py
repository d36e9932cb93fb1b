"""verify: graph invariants, checked at the end of the pipeline (and after every pass when
``KILN_DEBUG=1``).

* every node's op is registered and its type is what the op's shape rule gives for its
  inputs' types and attributes (re-running ``infer``; fused programs are re-checked);
* sources (placeholder, param, constant) have no inputs; other nodes have inputs;
* the graph is acyclic (the iterative topological sort raises on a cycle);
* against the graph a pass started from (:func:`check_preserved`): the inputs are the same
  objects in the same order; the outputs keep their count, order and types; no placeholder
  appears that was neither an input nor reachable before (no dangling references).

A violation raises :class:`GraphInvariantError` naming the pass, the node and the problem.
"""

from __future__ import annotations

from kiln.core.ir import Graph, TensorType, toposort
from kiln.core.ops.registry import get_op
from kiln.core.passes._util import is_source


class GraphInvariantError(ValueError):
    """A pass produced a graph that breaks an invariant."""


def check_graph(graph: Graph, where: str = "verify") -> None:
    """Raises GraphInvariantError if ``graph`` breaks an internal invariant."""
    try:
        nodes = toposort(graph.outputs)
    except ValueError as exc:
        raise GraphInvariantError(f"after {where}: {exc}") from exc
    for node in nodes:
        try:
            op = get_op(node.op)
        except KeyError as exc:
            raise GraphInvariantError(f"after {where}: node {node!r} has an unknown op") from exc
        if is_source(node) != (not node.inputs) and node.op != "fused":
            raise GraphInvariantError(f"after {where}: {node.op} node with "
                                      f"{len(node.inputs)} inputs")
        try:
            expected = op.infer(*[i.type for i in node.inputs], **node.attrs)
        except (TypeError, ValueError) as exc:
            raise GraphInvariantError(f"after {where}: {node.op} node {node.type} fails its "
                                      f"shape rule: {exc}") from exc
        if expected != node.type:
            raise GraphInvariantError(f"after {where}: {node.op} node has type {node.type}, "
                                      f"its shape rule gives {expected}")


def refines(new: TensorType, old: TensorType) -> bool:
    """Whether ``new`` is ``old`` with some unknown dims found (a pass may prove a size, e.g.
    a loop's length from a constant cotangent; it may never change a known one)."""
    return new.dtype == old.dtype and new.ndim == old.ndim and all(
        o is None or o == n for n, o in zip(new.shape, old.shape))


def check_preserved(before: Graph, after: Graph, where: str) -> None:
    """Raises GraphInvariantError if ``after`` changed what a pass must keep from ``before``."""
    if len(after.inputs) != len(before.inputs) or any(
            a is not b for a, b in zip(after.inputs, before.inputs)):
        raise GraphInvariantError(f"{where} changed the graph inputs")
    if len(after.outputs) != len(before.outputs):
        raise GraphInvariantError(f"{where} changed the number of outputs from "
                                  f"{len(before.outputs)} to {len(after.outputs)}")
    for k, (a, b) in enumerate(zip(after.outputs, before.outputs)):
        if a.type != b.type and not refines(a.type, b.type):
            raise GraphInvariantError(f"{where} changed the type of output {k} from {b.type} "
                                      f"to {a.type}")
    known = {id(n) for n in before.inputs}
    known.update(id(n) for n in before.nodes if n.op == "placeholder")
    for n in after.nodes:
        if n.op == "placeholder" and id(n) not in known:
            raise GraphInvariantError(f"{where} introduced placeholder {n!r} that is not a "
                                      "graph input")


def verify(graph: Graph) -> Graph:
    """The verify pass: checks ``graph`` (see the module docstring) and returns it."""
    check_graph(graph)
    return graph
