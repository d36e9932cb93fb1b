"""Pictures of models and of training: :func:`plot_model` and :func:`plot_history`.

``plot_model`` writes the layer graph as a Graphviz DOT file (always; no dependency) and, when
Graphviz's ``dot`` program is installed, renders it to PNG, SVG or any format ``dot`` knows.
``plot_history`` draws the loss and metric curves of ``fit`` with matplotlib (the optional
``viz`` extra: ``pip install "kiln-nn[viz]"``).

Both write their files atomically (a temporary file renamed over the target), like everything
kiln writes.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from kiln.core import Node, placeholder

# kiln.layers is imported inside the functions: `import kiln.utils` stays light.

__all__ = ["plot_model", "plot_history", "model_to_dot", "GraphvizNotFoundError"]

INSTALL_GRAPHVIZ = ("install Graphviz: `apt-get install graphviz` (Debian/Ubuntu), "
                    "`brew install graphviz` (macOS), `conda install graphviz`, or see "
                    "https://graphviz.org/download/")
INSTALL_MATPLOTLIB = 'pip install "kiln-nn[viz]"   (or: pip install matplotlib)'
_RANKDIRS = ("TB", "LR", "BT", "RL")
_DOT_EXTENSIONS = (".dot", ".gv")


class GraphvizNotFoundError(RuntimeError):
    """Raised by :func:`plot_model` when Graphviz's ``dot`` program is not on the PATH."""


# ---- the layer graph ------------------------------------------------------------------------
@dataclass
class _Vertex:
    """One box of the picture: a layer, an input, or a raw op applied between layers."""

    key: Any
    name: str
    class_name: str
    input_shapes: list = field(default_factory=list)
    output_shapes: list = field(default_factory=list)
    input_dtypes: list = field(default_factory=list)
    output_dtypes: list = field(default_factory=list)
    is_input: bool = False


class _LayerGraph:
    """Vertices (in insertion order) and directed edges between their keys."""

    def __init__(self) -> None:
        self.vertices: dict[Any, _Vertex] = {}
        self.edges: list[tuple[Any, Any]] = []
        self._edge_set: set[tuple[Any, Any]] = set()

    def vertex(self, key: Any, name: str, class_name: str, is_input: bool = False) -> _Vertex:
        v = self.vertices.get(key)
        if v is None:
            v = self.vertices[key] = _Vertex(key, name, class_name, is_input=is_input)
        return v

    def edge(self, src: Any, dst: Any) -> None:
        if src is not None and (src, dst) not in self._edge_set:
            self._edge_set.add((src, dst))
            self.edges.append((src, dst))

    def ordered(self) -> list[_Vertex]:
        """The vertices in a topological order (insertion order among the ready ones)."""
        indeg = {k: 0 for k in self.vertices}
        out: dict[Any, list] = {k: [] for k in self.vertices}
        for a, b in self.edges:
            indeg[b] += 1
            out[a].append(b)
        position = {k: i for i, k in enumerate(self.vertices)}
        ready = sorted((k for k, d in indeg.items() if d == 0), key=position.__getitem__)
        order = []
        while ready:
            k = ready.pop(0)
            order.append(self.vertices[k])
            for b in out[k]:
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready.append(b)
                    ready.sort(key=position.__getitem__)
        seen = {v.key for v in order}
        return order + [v for k, v in self.vertices.items() if k not in seen]  # cycles: rare


def _flatten(x: Any) -> list:
    """The leaves of nested lists, tuples and dicts (like ``kiln.layers.base.flatten``)."""
    if isinstance(x, dict):
        return [v for k in x for v in _flatten(x[k])]
    if isinstance(x, list | tuple):
        return [v for item in x for v in _flatten(item)]
    return [x]


def _add_shapes(v: _Vertex, inputs: list[Node], outputs: list[Node]) -> None:
    ins = [tuple(t.shape) for t in inputs]
    outs = [tuple(t.shape) for t in outputs]
    if ins and ins not in v.input_shapes:
        v.input_shapes.append(ins)
        v.input_dtypes.append([t.dtype for t in inputs])
    if outs and outs not in v.output_shapes:
        v.output_shapes.append(outs)
        v.output_dtypes.append([t.dtype for t in outputs])


def _record_inputs(record: Any) -> list[Node]:
    items = _flatten(record.inputs) + _flatten(list(getattr(record, "args", ()))) + _flatten(
        list(getattr(record, "kwargs", {}).values()))
    return [t for t in items if isinstance(t, Node)]


def _walk(inputs: list[Node], outputs: list[Node], input_names: list[str] | None = None
          ) -> _LayerGraph:
    """The layer graph between ``inputs`` and ``outputs``, found from the layer-call records
    (``kiln.layers.base.HISTORY`` and each layer's ``_inbound``)."""
    from kiln.layers.base import HISTORY

    g = _LayerGraph()
    input_keys: dict[int, Any] = {}
    for i, t in enumerate(inputs):
        h = HISTORY.get(t)
        if h is not None and type(h[0]).__name__ == "InputLayer":
            layer = h[0]
            key = ("layer", id(layer))
            v = g.vertex(key, layer.name, "InputLayer", is_input=True)
        else:
            key = ("input", i)
            name = (input_names[i] if input_names and i < len(input_names) else None) or \
                t.name or (f"input_{i}" if len(inputs) > 1 else "input")
            v = g.vertex(key, name, "Input", is_input=True)
        _add_shapes(v, [], [t])
        input_keys[id(t)] = key

    done: dict[int, Any] = {}          # id(tensor) -> vertex key (None: constant / weight)
    expanded: set[Any] = set()         # (layer id, call index) or ("op", node id) already walked

    def producer(t: Node) -> tuple[Any, list[Node]]:
        """The vertex key that computes ``t``, and the tensors that vertex consumes (empty when
        already walked)."""
        if id(t) in input_keys:
            return input_keys[id(t)], []
        h = HISTORY.get(t)
        if h is not None:
            layer, ci, _ = h
            key = ("layer", id(layer))
            is_input = type(layer).__name__ == "InputLayer"
            v = g.vertex(key, layer.name, type(layer).__name__, is_input=is_input)
            call_id = (id(layer), ci)
            if call_id in expanded or ci >= len(layer._inbound):
                return key, []
            expanded.add(call_id)
            record = layer._inbound[ci]
            ins = _record_inputs(record)
            _add_shapes(v, ins, [o for o in _flatten(record.outputs) if isinstance(o, Node)])
            return key, ins
        if t.op in ("constant", "param"):
            return None, []
        if t.op == "identity" and t.inputs:  # an untracked tag: look through it
            return producer(t.inputs[0])
        if t.op == "placeholder":
            key = ("placeholder", id(t))
            v = g.vertex(key, t.name or "placeholder", "Input", is_input=True)
            _add_shapes(v, [], [t])
            return key, []
        key = ("op", id(t))
        v = g.vertex(key, t.op, "op")
        if key in expanded:
            return key, []
        expanded.add(key)
        ins = [i for i in t.inputs if i.op not in ("constant", "param")]
        _add_shapes(v, ins, [t])
        return key, ins

    # Iterative walk: deep models (hundreds of layers) must not hit the recursion limit.
    pending: list[tuple[Node, Any]] = [(t, None) for t in reversed(outputs)]
    while pending:
        t, consumer = pending.pop()
        if id(t) in done:
            g.edge(done[id(t)], consumer)
            continue
        key, ins = producer(t)
        done[id(t)] = key
        if key is None:
            continue
        if consumer is not None:
            g.edge(key, consumer)
        for i in reversed(ins):
            pending.append((i, key))
    return g


def _chain(model: Any) -> _LayerGraph:
    """A Sequential model not (yet) wired as a functional graph: its layers in a chain."""
    g = _LayerGraph()
    prev = None
    layers = list(model.layers)
    shape = getattr(model, "build_input_shape", None) or getattr(model, "_input_shape_arg",
                                                                   None)
    if layers and type(layers[0]).__name__ != "InputLayer" and shape is not None:
        v = g.vertex(("input", 0), "input", "Input", is_input=True)
        v.output_shapes.append([tuple(shape)])
        prev = v.key
    for layer in layers:
        key = ("layer", id(layer))
        v = g.vertex(key, layer.name, type(layer).__name__,
                     is_input=type(layer).__name__ == "InputLayer")
        for rec in getattr(layer, "_inbound", [])[:1]:
            _add_shapes(v, [] if v.is_input else _record_inputs(rec),
                        [o for o in _flatten(rec.outputs) if isinstance(o, Node)])
        g.edge(prev, key)
        prev = key
    return g


def _traced(model: Any) -> _LayerGraph:
    """A subclassed model: call its ``call`` on placeholders (outside any training trace, so
    its sublayers record their calls), walk the records, then drop them again."""
    from kiln.layers.base import map_structure

    spec = getattr(model, "_build_input_spec", None)
    if not getattr(model, "built", False) or spec is None:
        shape = getattr(model, "build_input_shape", None)
        if shape is None:
            raise ValueError(f"plot_model: model '{model.name}' is not built, so its layer "
                             "graph is unknown; call it on data, fit it, or call "
                             "model.build(input_shape) first")
        from kiln.models.data import spec_from_shapes

        spec = spec_from_shapes(shape, model.dtype)
    phs = map_structure(lambda s: placeholder(s.shape, s.dtype or model.dtype, name=s.name),
                        spec)
    every: list[Any] = []
    stack: list[Any] = [model]
    while stack:
        layer = stack.pop()
        if any(layer is x for x in every):
            continue
        every.append(layer)
        stack.extend(layer._sublayers())
    sizes = [(layer, len(layer._inbound)) for layer in every]
    try:
        kwargs = {"training": False} if model._call_accepts("training") else {}
        out = model.call(phs, **kwargs)
        flat_in = [t for t in _flatten(phs) if isinstance(t, Node)]
        names = [getattr(s, "name", None) for s in _flatten(spec)]
        return _walk(flat_in, [t for t in _flatten(out) if isinstance(t, Node)], names)
    finally:
        for layer, n in sizes:  # leave no trace of this call on the model's layers
            del layer._inbound[n:]


def layer_graph(model: Any) -> _LayerGraph:
    """The model's layer graph: functional models and Sequential models built on an input
    from their layer-call records; Sequential models without one as a chain; subclassed
    models by calling them on placeholders."""
    inputs = getattr(model, "inputs", None)
    outputs = getattr(model, "outputs", None)
    if inputs and outputs and all(isinstance(t, Node) for t in _flatten(inputs) +
                                  _flatten(outputs)):
        names = None
        try:
            names = list(model.input_names)
        except Exception:  # noqa: BLE001 - names are cosmetic
            pass
        return _walk(_flatten(inputs), _flatten(outputs), names)
    if type(model).__name__ == "Sequential" or any(
            c.__name__ == "Sequential" for c in type(model).__mro__):
        return _chain(model)
    return _traced(model)


# ---- DOT ---------------------------------------------------------------------------------------
def _fmt_shape(shape: tuple) -> str:
    dims = ["None" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _fmt_shapes(groups: list[list[tuple]]) -> str:
    if not groups:
        return "?"
    if len(groups) > 1:
        return "multiple"
    shapes = groups[0]
    if len(shapes) == 1:
        return _fmt_shape(shapes[0])
    return "[" + ", ".join(_fmt_shape(s) for s in shapes) + "]"


def _fmt_dtypes(groups: list[list[str]]) -> str:
    flat = sorted({d for g in groups for d in g})
    return flat[0] if len(flat) == 1 else ("[" + ", ".join(flat) + "]" if flat else "?")


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _row(title: str, value: str) -> str:
    return f"<tr><td>{html.escape(title)}</td><td>{html.escape(value)}</td></tr>"


def _label(v: _Vertex, show_shapes: bool, show_dtype: bool, show_layer_names: bool,
           layer: Any = None, show_activations: bool = False,
           show_trainable: bool = False) -> str:
    e = html.escape
    if v.class_name == "op":
        title = f"<b>{e(v.name)}</b> (op)"
    elif show_layer_names:
        title = f"<b>{e(v.name)}</b> ({e(v.class_name)})"
    else:
        title = f"<b>{e(v.class_name)}</b>"
    rows = [f'<tr><td colspan="2">{title}</td></tr>']
    if show_shapes:
        if not v.is_input:
            rows.append(_row("Input shape", _fmt_shapes(v.input_shapes)))
        rows.append(_row("Output shape", _fmt_shapes(v.output_shapes)))
    if show_dtype:
        if not v.is_input:
            rows.append(_row("Input dtype", _fmt_dtypes(v.input_dtypes)))
        rows.append(_row("Output dtype", _fmt_dtypes(v.output_dtypes)))
    activation = getattr(layer, "activation", None)
    if show_activations and callable(activation):
        rows.append(_row("Activation", getattr(activation, "__name__", str(activation))))
    if show_trainable and layer is not None:
        rows.append(_row("Trainable", str(bool(getattr(layer, "trainable", True)))))
    return ('<<table border="0" cellborder="1" cellspacing="0" cellpadding="4">'
            + "".join(rows) + "</table>>")


def model_to_dot(model: Any, show_shapes: bool = True, show_dtype: bool = False,
                 show_layer_names: bool = True, rankdir: str = "TB", dpi: int = 96, *,
                 expand_nested: bool = False, show_layer_activations: bool = False,
                 show_trainable: bool = False, splines: str | None = None) -> str:
    """The model's layer graph as Graphviz DOT source (one node per layer, named by the
    layer's name; an edge for each layer output another layer consumes).

    Args:
        model: a built kiln model (Sequential, functional or subclassed).
        show_shapes, show_dtype, show_layer_names, rankdir, dpi, expand_nested,
            show_layer_activations, show_trainable, splines: see :func:`plot_model`.

    Returns:
        The DOT source text.

    Example:
        >>> print(kiln.utils.plot.model_to_dot(model))
    """
    if rankdir not in _RANKDIRS:
        raise ValueError(f"plot_model: rankdir must be one of {_RANKDIRS}, received "
                         f"{rankdir!r}")
    graph = f"rankdir={rankdir}, dpi={int(dpi)}" + (f", splines={splines}" if splines else "")
    lines = [f"digraph {_quote(getattr(model, 'name', 'model'))} {{",
             f'  graph [{graph}];',
             '  node [shape=plaintext, fontname="Helvetica", fontsize=11];',
             '  edge [fontname="Helvetica"];']
    options = (show_shapes, show_dtype, show_layer_names, show_layer_activations,
               show_trainable, expand_nested)
    nodes, edges = _dot_body(model, options, "", "  ")
    lines += nodes + edges + ["}"]
    return "\n".join(lines) + "\n"


def _dot_body(model: Any, options: tuple, prefix: str, indent: str
              ) -> tuple[list[str], list[str]]:
    """The node and edge lines of ``model``'s graph; node ids start with ``prefix``. With
    ``expand_nested`` a nested model also gets its own graph in a box (a DOT cluster)."""
    shapes, dtypes, names, activations, trainable, expand = options
    g = layer_graph(model)
    sublayers = {id(layer): layer for layer in getattr(model, "layers", [])}
    ids: dict[Any, str] = {}
    used: set[str] = set()
    nodes: list[str] = []
    order = g.ordered()
    for v in order:
        base = v.name if v.class_name != "op" else f"op:{v.name}"
        name, n = base, 1
        while name in used:  # raw ops of the same kind, or clashing input names
            name, n = f"{base}_{n}", n + 1
        used.add(name)
        ids[v.key] = prefix + name
        layer = sublayers.get(v.key[1]) if v.key[0] == "layer" else None
        label = _label(v, shapes, dtypes, names, layer, activations, trainable)
        nodes.append(f"{indent}{_quote(prefix + name)} [label={label}];")
        if expand and layer is not None and hasattr(layer, "layers") and layer.layers:
            inner_nodes, inner_edges = _dot_body(layer, options, f"{prefix}{name}/",
                                                 indent + "  ")
            nodes += ([f"{indent}subgraph {_quote('cluster_' + prefix + name)} {{",
                       f"{indent}  label={_quote(name)};"] + inner_nodes + inner_edges
                      + [f"{indent}}}"])
    rank = {v.key: i for i, v in enumerate(order)}
    edges = [f"{indent}{_quote(ids[a])} -> {_quote(ids[b])};"
             for a, b in sorted(g.edges, key=lambda e: (rank[e[0]], rank[e[1]]))]
    return nodes, edges


def _write_text(path: str, text: str) -> None:
    from kiln.saving.atomic import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def plot_model(model: Any, to_file: str | os.PathLike = "model.png", show_shapes: bool = False,
               show_dtype: bool = False, show_layer_names: bool = False, rankdir: str = "TB",
               expand_nested: bool = False, dpi: int = 200, show_layer_activations: bool = False,
               show_trainable: bool = False, splines: str = "ortho", **kwargs: Any) -> str:
    """Draws the model's layer graph, like ``keras.utils.plot_model``.

    The DOT file is always written (``model.png`` -> ``model.dot`` next to it; ``to_file``
    itself when it ends in ``.dot`` or ``.gv``). Any other extension (``.png``, ``.svg``,
    ``.pdf`` ...; none means ``.png``) is then rendered by Graphviz's ``dot`` program.

    Args:
        model: a built kiln model (Sequential, functional or subclassed).
        to_file: the picture to write.
        show_shapes: show each layer's input and output shapes.
        show_dtype: show each layer's input and output dtypes.
        show_layer_names: show layer names (otherwise only class names).
        rankdir: ``"TB"`` (top to bottom), ``"LR"`` (left to right), ``"BT"`` or ``"RL"``.
        expand_nested: also draw each nested model's own layers, in a box named after it.
        dpi: the resolution of a PNG.
        show_layer_activations: show the activation of layers that have one.
        show_trainable: show whether each layer is trainable.
        splines: Graphviz's edge style (``"ortho"``, ``"spline"``, ``"line"`` ...).

    Returns:
        The path of the file written last (the picture, or the DOT file).

    Raises:
        GraphvizNotFoundError: a picture format was asked for and ``dot`` is not installed
            (the DOT file is written first; the message says how to install Graphviz).
        ValueError: for a bad ``rankdir`` or a model whose graph is unknown (not built).

    Example:
        >>> kiln.utils.plot_model(model, "convnet.png", show_shapes=True)
        'convnet.png'
    """
    if kwargs:
        raise TypeError(f"plot_model: unexpected keyword argument(s) {sorted(kwargs)}")
    to_file = os.fspath(to_file)
    stem, ext = os.path.splitext(to_file)
    if not ext:
        ext, to_file = ".png", to_file + ".png"
    source = model_to_dot(model, show_shapes=show_shapes, show_dtype=show_dtype,
                          show_layer_names=show_layer_names, rankdir=rankdir, dpi=dpi,
                          expand_nested=expand_nested,
                          show_layer_activations=show_layer_activations,
                          show_trainable=show_trainable, splines=splines)
    if ext.lower() in _DOT_EXTENSIONS:
        _write_text(to_file, source)
        return to_file
    dot_file = stem + ".dot"
    _write_text(dot_file, source)
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFoundError(
            f"plot_model: Graphviz's `dot` program was not found on the PATH, so {to_file!r} "
            f"cannot be rendered. The graph was written to {dot_file!r}. To get pictures, "
            f"{INSTALL_GRAPHVIZ}; then `dot -T{ext[1:].lower()} {dot_file} -o {to_file}` "
            "renders it, or call plot_model again.")
    from kiln.saving.atomic import atomic_path

    with atomic_path(to_file) as tmp:
        proc = subprocess.run([exe, f"-T{ext[1:].lower()}", dot_file, "-o", tmp],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"plot_model: `dot -T{ext[1:].lower()}` failed with exit code "
                               f"{proc.returncode} rendering {dot_file!r}: "
                               f"{proc.stderr.strip()}")
    return to_file


# ---- history -------------------------------------------------------------------------------
def _history_dict(history: Any) -> tuple[dict[str, list], list[int] | None]:
    if isinstance(history, dict):
        return history, None
    data = getattr(history, "history", None)
    if isinstance(data, dict):
        epochs = getattr(history, "epoch", None)
        return data, list(epochs) if epochs else None
    raise TypeError(f"plot_history: expected a History (what fit returns) or its .history "
                    f"dict, received {type(history).__name__}")


def plot_history(history: Any, to_file: str | os.PathLike, metrics: list[str] | None = None
                 ) -> str:
    """Draws the training curves of ``fit``: one panel per metric, training and validation.

    Args:
        history: the :class:`kiln.callbacks.History` that ``fit`` returns, or its
            ``.history`` dict (``{"loss": [...], "val_loss": [...], ...}``).
        to_file: the picture (``.png``, ``.svg``, ``.pdf`` ...; the extension picks the
            format).
        metrics: the metrics to draw (names without ``val_``); default: ``loss`` and then
            every other training metric recorded.

    Returns:
        ``to_file``.

    Raises:
        ImportError: matplotlib is not installed (the message gives the pip command).
        ValueError: a requested metric is not in the history, or the history is empty.

    Example:
        >>> history = model.fit(x, y, epochs=5, validation_split=0.1)
        >>> kiln.utils.plot_history(history, "curves.png")
        'curves.png'
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError("plot_history needs matplotlib, an optional extra of kiln; install "
                          f"it with: {INSTALL_MATPLOTLIB}") from exc
    data, epochs = _history_dict(history)
    train_keys = [k for k in data if not k.startswith("val_")]
    if metrics is None:
        metrics = ([k for k in train_keys if k == "loss"] +
                   [k for k in train_keys if k not in ("loss", "learning_rate", "lr")])
        if not metrics:
            metrics = [k[4:] for k in data if k.startswith("val_")]
    else:
        metrics = [metrics] if isinstance(metrics, str) else list(metrics)
        missing = [m for m in metrics if m not in data and f"val_{m}" not in data]
        if missing:
            raise ValueError(f"plot_history: metric(s) {missing} are not in the history; it "
                             f"has {sorted(data)}")
    if not metrics or not any(len(data.get(m, [])) or len(data.get(f"val_{m}", []))
                              for m in metrics):
        raise ValueError("plot_history: the history is empty; train with fit() first")
    to_file = os.fspath(to_file)
    ext = os.path.splitext(to_file)[1].lower().lstrip(".") or "png"
    fig = Figure(figsize=(5.0 * len(metrics), 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, name in zip(axes, metrics):
        for key, label, style in ((name, "train", "-o"), (f"val_{name}", "validation", "-s")):
            values = [float("nan") if v is None else float(v) for v in data.get(key, [])]
            if not values:
                continue
            xs = ([e + 1 for e in epochs] if epochs and len(epochs) == len(values)
                  else list(range(1, len(values) + 1)))
            ax.plot(xs, values, style, markersize=3, label=label)
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend()
    from kiln.saving.atomic import atomic_path

    with atomic_path(to_file) as tmp:
        fig.savefig(tmp, format=ext, dpi=100)
    return to_file
