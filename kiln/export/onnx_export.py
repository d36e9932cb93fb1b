"""``to_onnx``: a kiln inference graph written as an ONNX model (docs/features.md,
"Export to ONNX").

The graph exported is the one the backends receive, up to lowering: the pass pipeline runs
with everything but elementwise fusion (constant folding, CSE, the algebraic simplifications,
dead-code removal, the loop pass), so training-only parts (Dropout is the identity at
inference, no updates, no random key) are gone and onnxruntime gets plain ops it can fuse
its own way. Every op then goes through its rule (the tables of ``onnx_rules*.py`` and
``onnx_scan.py``); weights become initializers named after their Variables; the model is
checked with ``onnx.checker`` and written atomically (``kiln.saving.atomic``), so a failed
export never leaves a partial file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kiln.core import Function, Graph, Node, WeakIdentityDict, optimize
from kiln.export.onnx_emit import (
    Emitter,
    ExportError,
    Names,
    Options,
    Rule,
    prune,
    require_onnx,
    subgraph_reads,
    value_info,
)
from kiln.export.onnx_rules import RULES as _BASIC
from kiln.export.onnx_rules_nn import NOT_EXPORTABLE
from kiln.export.onnx_rules_nn import RULES as _NN
from kiln.export.onnx_scan import RULES as _LOOPS
from kiln.saving.atomic import atomic_write

#: op name -> ONNX rule, for every exportable op of the registry
RULES: dict[str, Rule] = {**_BASIC, **_NN, **_LOOPS}
DEFAULT_OPSET = 17
MIN_OPSET = 13


def to_onnx(obj: Any, path: Any = None, *, opset: int | None = None,
            dynamic_batch: bool = True, input_names: Sequence[str] | None = None,
            output_names: Sequence[str] | None = None, unroll: int = 0,
            name: str | None = None, origin: Mapping[Node, str] | None = None) -> Any:
    """Writes the inference graph of a compiled function or a model as an ONNX model.

    Args:
        obj: a ``kiln.function`` without updates, a ``kiln.core.Graph`` (placeholders in,
            tensors out), or a built kiln Model (then this is ``obj.export(path, ...)``).
        path: the ``.onnx`` file to write (atomically), or None to only return the model.
        opset: the ONNX opset (default 17; 13 up to what the installed ``onnx`` knows).
        dynamic_batch: leave the batch dimension (a ``None`` leading dim of an input)
            symbolic, named ``"batch"``; False fixes it to 1. Other unknown input dims (a
            sequence length) stay symbolic, named ``"<input>_dim<i>"``.
        input_names, output_names: names of the graph's inputs and outputs (default: the
            placeholders' names, else ``input_<i>``; ``output_<i>``).
        unroll: unroll loops of at most this many static steps instead of writing ``Scan``
            (a loop without sequences is always unrolled).
        name: the ONNX graph's name.
        origin: node -> layer name (:func:`kiln.export.record_layers`), for errors.

    Returns:
        The ``onnx.ModelProto``.

    Raises:
        ExportError: the graph holds an op with no ONNX translation (the message names the op,
            the reason and, when known, the layer); no file is written.
        ImportError: ``onnx`` is not installed (``pip install "kiln-nn[onnx]"``).

    Example:
        >>> x = kiln.placeholder((None, 3), name="x")
        >>> f = kiln.function([x], kiln.ops.relu(x))
        >>> kiln.export.to_onnx(f, "relu.onnx", output_names=["y"])
    """
    if not isinstance(obj, Function | Graph):
        export = getattr(obj, "export", None)
        if not callable(export):
            raise TypeError(f"to_onnx: expected a kiln Model, a kiln.function or a Graph, "
                            f"received {type(obj).__name__}")
        if input_names is not None or output_names is not None or origin is not None:
            raise ValueError("to_onnx: a model names its own inputs and outputs; "
                             "input_names, output_names and origin are for functions")
        return export(path, format="onnx", opset=opset, dynamic_batch=dynamic_batch,
                      unroll=unroll)
    onnx = require_onnx()
    opset = _check_opset(opset, onnx)
    if not isinstance(dynamic_batch, bool):
        raise TypeError(f"to_onnx: dynamic_batch must be True or False, received "
                        f"{dynamic_batch!r}")
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 0:
        raise ValueError(f"to_onnx: unroll must be a non-negative int, received {unroll!r}")
    graph, label = _graph_of(obj, name)
    ins, outs = _names(graph, input_names, output_names, label)
    origin = WeakIdentityDict(origin or {})
    check_exportable(graph, origin, label)
    optimized, _ = optimize(graph, exclude=("fuse",))
    model = _assemble(onnx, optimized, ins, outs, Options(opset, unroll, origin),
                      dynamic_batch, label)
    onnx.checker.check_model(model)
    if path is not None:
        data = model.SerializeToString()
        atomic_write(path, lambda tmp: _write_bytes(tmp, data))
    return model


def _write_bytes(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _check_opset(opset: Any, onnx: Any) -> int:
    if opset is None:
        return DEFAULT_OPSET
    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= newest:
        raise ValueError(f"to_onnx: opset must be an int from {MIN_OPSET} to {newest} (the "
                         f"newest the installed onnx {onnx.__version__} knows), received "
                         f"{opset!r}")
    return opset


def _graph_of(obj: Any, name: str | None) -> tuple[Graph, str]:
    if isinstance(obj, Function):
        if obj.updates:
            raise ValueError(f"to_onnx: function {obj.name!r} updates "
                             f"{len(obj.updates)} Variable(s) (a training step); export a "
                             "function without updates")
        return Graph(obj.inputs, obj.outputs), name or obj.name
    for i, ph in enumerate(obj.inputs):
        if not isinstance(ph, Node) or ph.op != "placeholder":
            raise TypeError(f"to_onnx: graph input {i} must be a placeholder, received "
                            f"{getattr(ph, 'op', type(ph).__name__)}")
    return obj, name or "kiln_graph"


def _names(graph: Graph, input_names: Sequence[str] | None,
           output_names: Sequence[str] | None, label: str) -> tuple[list[str], list[str]]:
    ins = list(input_names) if input_names is not None else [
        ph.name or f"input_{i}" for i, ph in enumerate(graph.inputs)]
    n_out = len(graph.outputs)
    outs = list(output_names) if output_names is not None else (
        ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)])
    for what, names, nodes in (("input", ins, graph.inputs), ("output", outs, graph.outputs)):
        if len(names) != len(nodes):
            raise ValueError(f"to_onnx: {label} has {len(nodes)} {what}s, received "
                             f"{len(names)} {what} names {names}")
        if not all(isinstance(n, str) and n for n in names):
            raise TypeError(f"to_onnx: {what} names must be non-empty strings, received "
                            f"{names}")
    clash = sorted({n for n in ins + outs if (ins + outs).count(n) > 1})
    if clash:
        raise ValueError(f"to_onnx: the names of {label}'s inputs and outputs must be "
                         f"distinct, {clash} repeat (inputs {ins}, outputs {outs})")
    return ins, outs


def check_exportable(graph: Graph, origin: Mapping[Node, str], label: str = "the graph"
                     ) -> None:
    """Raises ExportError for the first op (loop bodies included) with no ONNX rule, naming
    the op, the reason and the layer it came from (before anything is written)."""
    stack: list[tuple[list[Node], str | None]] = [(graph.nodes, None)]
    while stack:
        nodes, outer = stack.pop()
        for n in nodes:
            layer = origin.get(n) or outer
            where = f" (from layer {layer!r})" if layer else ""
            if n.op in NOT_EXPORTABLE:
                raise ExportError(f"cannot export {label} to ONNX: op {n.op!r}{where} is not "
                                  f"exportable: {NOT_EXPORTABLE[n.op]}")
            if n.op not in RULES:
                raise ExportError(f"cannot export {label} to ONNX: op {n.op!r}{where} has no "
                                  "ONNX translation (kiln/export has no rule for it)")
            if n.op == "scan":
                stack.append((n.attrs["body"].graph.nodes, layer))


def _assemble(onnx: Any, graph: Graph, in_names: list[str], out_names: list[str],
              options: Options, dynamic_batch: bool, label: str) -> Any:
    ctx = Emitter(RULES, Names(in_names + out_names), options)
    env: dict[int, str] = {}
    inputs = []
    for ph, name in zip(graph.inputs, in_names):
        env[id(ph)] = name
        dims = [d if d is not None else ("batch" if dynamic_batch else 1) if i == 0
                else f"{name}_dim{i}" for i, d in enumerate(ph.shape)]
        inputs.append(value_info(onnx, name, ph.type, dims))
    ctx.emit(graph.nodes, env)
    outputs = []
    for node, name in zip(graph.outputs, out_names):
        ctx.nodes.append(onnx.helper.make_node("Identity", [env[id(node)]], [name],
                                               name=f"Identity:{name}"))
        outputs.append(value_info(onnx, name, node.type))
    nodes = prune(ctx.nodes, out_names)
    read = {i for n in nodes for i in n.input}
    for n in nodes:
        read |= subgraph_reads(n)
    inits = [t for t in ctx.initializers if t.name in read]
    g = onnx.helper.make_graph(nodes, label, inputs, outputs, initializer=inits)
    opsets = [onnx.helper.make_opsetid("", options.opset)]
    model = onnx.helper.make_model(g, opset_imports=opsets, producer_name="kiln",
                                   producer_version=_version(),
                                   doc_string=f"kiln inference graph of {label}")
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    return model


def _version() -> str:
    import kiln

    return str(getattr(kiln, "__version__", ""))


__all__ = ["to_onnx", "check_exportable", "RULES", "NOT_EXPORTABLE", "ExportError",
           "DEFAULT_OPSET", "MIN_OPSET"]
