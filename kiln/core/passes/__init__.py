"""The optimization pipeline (see DESIGN.md section 4). Filled in by the passes work; until
then it returns the graph unchanged."""

from __future__ import annotations

from typing import Any

from kiln.core.ir import Graph


def optimize(graph: Graph, exclude: Any = (), memory_budget: Any = None) -> tuple[Graph, Any]:
    return graph, None
