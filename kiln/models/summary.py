"""``Model.summary()``: a Keras 3 style table of layers, output shapes and parameter counts.

Shapes come from the graph the model was built on (no "multiple"/"?" for a built subclassed
model: its layers' symbolic calls are recorded when it is built).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.core import Node
from kiln.layers.base import HISTORY, Layer, flatten


def _fmt_shape(shape: tuple) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + (
        "," if len(shape) == 1 else "") + ")"


def _fmt_outputs(outputs: Any) -> str:
    tensors = [t for t in flatten(outputs) if isinstance(t, Node)]
    if not tensors:
        return "?"
    if len(tensors) == 1:
        return _fmt_shape(tensors[0].shape)
    return "[" + ", ".join(_fmt_shape(t.shape) for t in tensors) + "]"


def readable_memory_size(n_bytes: float) -> str:
    """``136.04 KB`` style (powers of 1024), like Keras."""
    units = ["B", "KB", "MB", "GB", "TB", "PB"]
    scale = 1024.0
    for unit in units:
        if n_bytes < scale or unit == units[-1]:
            return f"{n_bytes:.2f} {unit}"
        n_bytes /= scale
    return f"{n_bytes:.2f} PB"  # pragma: no cover


def _count(layer: Layer) -> str:
    if not layer.built:
        return "0 (unbuilt)"
    return f"{layer.count_params():,}"


def _rows(model: Any) -> tuple[list[list[str]], bool]:
    """The table rows and whether the model is sequential-like (no "Connected to")."""
    # The model classes import this module: import them only when a summary is printed.
    from kiln.models.functional import Functional
    from kiln.models.model import is_input_layer
    from kiln.models.sequential import Sequential

    rows: list[list[str]] = []
    if isinstance(model, Sequential):
        chain = model._chain
        for i, layer in enumerate(model.layers):
            shape = _fmt_shape(chain[i + 1].shape) if chain is not None else "?"
            rows.append([f"{layer.name} ({type(layer).__name__})", shape, _count(layer)])
        return rows, True
    if isinstance(model, Functional) or getattr(model, "_is_graph_network", False):
        calls_of: dict[int, list] = {}
        for c in model._calls:
            if c.layer is not None:
                calls_of.setdefault(id(c.layer), []).append(c)
        sequential_like = True
        seen_inputs: set[int] = set()
        for c in model._calls:
            if c.layer is None:
                continue
            ins = c.input_tensors()
            if len(ins) > 1 or len(calls_of[id(c.layer)]) > 1:
                sequential_like = False
            for t in ins:
                if id(t) in seen_inputs:
                    sequential_like = False
                seen_inputs.add(id(t))
        if len(model.inputs) > 1 or len(model.outputs) > 1:
            sequential_like = False
        for layer in model._layers:
            if is_input_layer(layer):
                rows.append([f"{layer.name} ({type(layer).__name__})",
                             _fmt_shape(layer.output.shape), "0", "-"])
                continue
            calls = calls_of.get(id(layer), [])
            shape = _fmt_outputs(calls[0].record.outputs) if calls else "?"
            connected = []
            for c in calls:
                for t in c.input_tensors():
                    h = HISTORY.get(t)
                    if h is not None:
                        connected.append(f"{h[0].name}[{_node_index(model, h[0], h[1])}]"
                                         f"[{h[2]}]")
            rows.append([f"{layer.name} ({type(layer).__name__})", shape, _count(layer),
                         ", ".join(connected) or "-"])
        return rows, sequential_like
    # subclassed: shapes from the layers' recorded symbolic calls
    layers = model.layers
    if model.built and any(not layer._inbound for layer in layers) and getattr(
            model, "_build_input_spec", None) is not None:
        # A summary is a report: when tracing the model's call() again fails, it prints "?"
        # for the shapes rather than fail (calling the model shows the error itself).
        try:
            model._symbolic_build(model._build_input_spec)
        except Exception:  # noqa: BLE001
            pass
    for layer in layers:
        shape = _fmt_outputs(layer._inbound[-1].outputs) if layer._inbound else "?"
        rows.append([f"{layer.name} ({type(layer).__name__})", shape, _count(layer)])
    return rows, True


def _node_index(model: Any, layer: Layer, call_index: int) -> int:
    if type(layer).__name__ == "InputLayer":
        return 0
    own = sorted(c.index for c in model._calls if c.layer is layer)
    return own.index(call_index) if call_index in own else call_index


def print_summary(model: Any, line_length: int | None = None, positions: Any = None,
                  print_fn: Callable | None = None, expand_nested: bool = False,
                  show_trainable: bool = False, layer_range: Any = None) -> None:
    """Prints ``model``'s summary (see :meth:`kiln.models.Model.summary`)."""
    if model.built:
        rows, sequential_like = _rows(model)
    else:  # as Keras 3 prints it: the layers known so far, no shapes, no weights yet
        rows = [[f"{layer.name} ({type(layer).__name__})", "?", _count(layer)]
                for layer in model.layers]
        sequential_like = True
    if sequential_like:
        header = ["Layer (type)", "Output Shape", "Param #"]
        rows = [r[:3] for r in rows]
        default_length, default_positions = 88, [0.45, 0.84, 1.0]
        align = ["left", "left", "right"]
    else:
        header = ["Layer (type)", "Output Shape", "Param #", "Connected to"]
        default_length, default_positions = 108, [0.3, 0.56, 0.74, 1.0]
        align = ["left", "left", "right", "left"]
    layers = list(model.layers)  # the rows' layers, in the same order
    if layer_range is not None:
        names = [layer.name for layer in layers]
        if len(layer_range) != 2 or layer_range[0] not in names or layer_range[1] not in names:
            raise ValueError(f"summary: layer_range must be [first_name, last_name] of layers "
                             f"in {names}, received {layer_range!r}")
        lo, hi = names.index(layer_range[0]), names.index(layer_range[1])
        rows = rows[lo:hi + 1]
        layers = layers[lo:hi + 1]
    if show_trainable:
        header.append("Trainable")
        align.append("left")
        for r, layer in zip(rows, layers):
            r.append("Y" if layer.trainable else "N")
        default_positions = [p * 0.9 for p in default_positions] + [1.0]
    line_length = line_length or default_length
    positions = positions or default_positions
    if positions[-1] <= 1:
        positions = [int(line_length * p) for p in positions]
    widths = [positions[0]] + [b - a for a, b in zip(positions[:-1], positions[1:])]
    widths = [max(w - 3, 4) for w in widths]
    for r in rows:  # widen a column rather than cut a name
        for i, cell in enumerate(r):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str]) -> str:
        parts = []
        for cell, w, a in zip(cells, widths, align):
            parts.append(cell.rjust(w) if a == "right" else cell.ljust(w))
        return "│ " + " │ ".join(parts) + " │"

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    out = [f'Model: "{model.name}"',
           rule("┏", "┳", "┓", "━"),
           "┃ " + " ┃ ".join(h.rjust(w) if a == "right" else h.ljust(w)
                            for h, w, a in zip(header, widths, align)) + " ┃",
           rule("┡", "╇", "┩", "━")]
    for i, r in enumerate(rows):
        if i:
            out.append(rule("├", "┼", "┤", "─"))
        out.append(line(r))
    out.append(rule("└", "┴", "┘", "─"))
    trainable = model.trainable_weights if model.built else []
    non_trainable = model.non_trainable_weights if model.built else []
    n_t = sum(int(np.prod(w.shape, dtype=np.int64)) for w in trainable)
    n_n = sum(int(np.prod(w.shape, dtype=np.int64)) for w in non_trainable)
    b_t = sum(w.value.nbytes for w in trainable)
    b_n = sum(w.value.nbytes for w in non_trainable)
    out.append(f" Total params: {n_t + n_n:,} ({readable_memory_size(b_t + b_n)})")
    out.append(f" Trainable params: {n_t:,} ({readable_memory_size(b_t)})")
    out.append(f" Non-trainable params: {n_n:,} ({readable_memory_size(b_n)})")
    if getattr(model, "optimizer", None) is not None and getattr(model.optimizer, "built",
                                                                 False):
        opt_vars = model.optimizer.variables
        n_o = sum(int(np.prod(v.shape, dtype=np.int64)) for v in opt_vars)
        b_o = sum(v.value.nbytes for v in opt_vars)
        out.append(f" Optimizer params: {n_o:,} ({readable_memory_size(b_o)})")
    emit = print_fn or print
    for text in out:
        emit(text)


__all__ = ["print_summary", "readable_memory_size"]
