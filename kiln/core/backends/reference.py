"""The reference backend: interprets a graph with each op's NumPy reference.

Slow and obviously right: the oracle that every faster backend is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kiln.core.ir import Graph, Node
from kiln.core.ops.registry import get_op


def evaluate(outputs: Sequence[Node], feeds: dict[Node, np.ndarray] | None = None) -> list:
    """Computes ``outputs`` given values for placeholders (and optionally any other node).

    Params read their Variable's current value.
    """
    from kiln.core.ir import toposort

    values: dict[int, np.ndarray] = {id(k): v for k, v in (feeds or {}).items()}
    for node in toposort(outputs):
        if id(node) in values:
            continue
        values[id(node)] = _run_node(node, values)
    return [values[id(o)] for o in outputs]


def _run_node(node: Node, values: dict[int, np.ndarray]) -> np.ndarray:
    if node.op == "param":
        return node.attrs["var"].value
    if node.op == "placeholder":
        raise ValueError(f"no value fed for placeholder {node.name or ''} {node.type}")
    op = get_op(node.op)
    args = [values[id(i)] for i in node.inputs]
    with np.errstate(all="ignore"):
        out = op.ref(*args, **node.attrs)
    out = np.asarray(out)
    if out.dtype.name != node.dtype:
        out = out.astype(node.dtype)
    return out


class ReferenceProgram:
    """A compiled-function body for the reference backend."""

    backend = "reference"

    def __init__(self, graph: Graph):
        self.graph = graph
        self.num_kernels = len([n for n in graph.nodes if n.inputs])

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        values: dict[int, np.ndarray] = {id(p): v for p, v in zip(self.graph.inputs, feeds)}
        for node in self.graph.nodes:
            if id(node) not in values:
                values[id(node)] = _run_node(node, values)
        return [values[id(o)] for o in self.graph.outputs]


def compile_graph(graph: Graph, updates: object = None) -> ReferenceProgram:
    """``updates`` (output index, Variable) pairs are accepted for the common backend
    signature; the reference backend returns new values and the executor writes them."""
    return ReferenceProgram(graph)
