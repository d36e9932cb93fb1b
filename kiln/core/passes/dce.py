"""dce: dead-code elimination.

A graph is its outputs plus everything they depend on; nodes that no output reaches are dead.
Nodes are immutable and hash-consed, so the passes before this one leave dead nodes behind
only as unreachable objects: this pass makes the removal explicit by marking the live set
backwards from the outputs over the graph's current node list and returning a graph whose
node list is exactly that set (in the same topological order). Inputs are kept even when no
output uses them (the call signature must not change).

Example:
    >>> g = dce(graph)
    >>> len(g.nodes) <= len(graph.nodes)
    True
"""

from __future__ import annotations

from kiln.core.ir import Graph, Node


def live_nodes(graph: Graph) -> list[Node]:
    """The nodes of ``graph.nodes`` that some output depends on, in the same order."""
    nodes = graph.nodes
    live: set[int] = {id(o) for o in graph.outputs}
    for node in reversed(nodes):
        if id(node) in live:
            live.update(id(i) for i in node.inputs)
    return [n for n in nodes if id(n) in live]


def dce(graph: Graph) -> Graph:
    """Returns a graph over the live nodes of ``graph`` (same inputs and outputs)."""
    live = live_nodes(graph)
    out = Graph(graph.inputs, graph.outputs)
    out._order = live  # already a topological order of exactly the reachable nodes
    return out
