"""kiln.core: the static-graph compiler. Imports nothing from layers, models, optimizers or
callbacks (a test enforces it)."""

from kiln.core import (
    ops,  # noqa: F401  (registers every op)
    passes,  # noqa: F401  (registers remat_barrier)
)
from kiln.core.autodiff import grad
from kiln.core.executor import Function, function
from kiln.core.ir import Graph, HashableArray, Node, TensorType, toposort
from kiln.core.ops.source import constant, placeholder
from kiln.core.variable import Variable


def optimize(graph, exclude=(), **kwargs):
    """Runs the optimization pipeline on ``graph``; returns ``(graph, report)``."""
    from kiln.core.passes import optimize as _optimize

    return _optimize(graph, exclude=exclude, **kwargs)


__all__ = ["Graph", "Node", "TensorType", "HashableArray", "Variable", "Function", "function",
           "grad", "placeholder", "constant", "toposort", "optimize"]
