"""kiln.core: the static-graph compiler. Imports nothing above it (tests/test_layering.py).

This module is the core's ONLY public face besides ``kiln.ops`` (the op builders): code outside
``kiln/core`` imports the names below and nothing from ``kiln.core.<module>``. See
docs/architecture.md, "The layers of the house".

* graph values: :class:`Node` (a symbolic tensor), :class:`TensorType`, :class:`Graph`,
  :class:`Variable` (a persistent, updatable value);
* building: :func:`placeholder`, :func:`constant`, :func:`convert_to_tensor`,
  :func:`is_tensor`, :func:`grad`;
* compiling: :func:`function` / :class:`Function`, :func:`optimize`,
  :func:`backend_for_device`;
* tracing steps: :func:`trace_variables` (symbolic ``Variable.assign`` records updates);
* collectives: :func:`register_group` (a transport's in-place sum, used by ``allreduce``);
* graph utilities for the frontend: :func:`toposort`, :func:`depends_on`, :func:`rebuild`,
  :func:`canonical_dtype`, :func:`format_shape`, :class:`WeakIdentityDict` (weak keys by
  identity: a symbolic tensor's ``==`` is elementwise);
* :func:`gc_paused`: no automatic garbage collection while the frontend traces a model's steps
  (kiln/core/gc_pause.py).
"""

from kiln.core import (
    ops,  # noqa: F401  (registers every op)
    passes,  # noqa: F401  (registers remat_barrier)
)
from kiln.core.autodiff import grad
from kiln.core.executor import Function, backend_for_device, function
from kiln.core.gc_pause import paused as gc_paused
from kiln.core.ir import (
    TENSOR_MASKS,
    Graph,
    HashableArray,
    Node,
    NodeAttrTable,
    TensorType,
    WeakIdentityDict,
    canonical_dtype,
    depends_on,
    rebuild,
    toposort,
)
from kiln.core.ops._rules import as_node as convert_to_tensor
from kiln.core.ops._rules import fmt as format_shape
from kiln.core.ops._rules import is_node as is_tensor
from kiln.core.ops.collective import register_group
from kiln.core.ops.source import constant, placeholder
from kiln.core.variable import (
    DISCARD_SYMBOLIC_ASSIGNS,
    EAGER_READS,
    Variable,
    VariableTrace,
    discarding_symbolic_assigns,
    trace_variables,
)


def optimize(graph, exclude=(), **kwargs):
    """Runs the optimization pipeline on ``graph``; returns ``(graph, report)``."""
    return passes.optimize(graph, exclude=exclude, **kwargs)


__all__ = ["Graph", "Node", "TensorType", "HashableArray", "WeakIdentityDict",
           "NodeAttrTable", "Variable",
           "Function", "function",
           "grad", "placeholder", "constant", "convert_to_tensor", "is_tensor", "toposort",
           "depends_on", "rebuild", "canonical_dtype", "format_shape", "backend_for_device",
           "optimize", "register_group", "trace_variables", "VariableTrace",
           "discarding_symbolic_assigns",
           "TENSOR_MASKS", "gc_paused", "EAGER_READS", "DISCARD_SYMBOLIC_ASSIGNS"]
