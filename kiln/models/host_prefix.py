"""The host prefix of a functional model: string inputs and the preprocessing layers on them.

Keras' end-to-end export ``inputs = keras.Input(shape=(1,), dtype="string"); x =
vectorize(inputs); outputs = model(x)`` needs strings inside the model, and strings never
enter a kiln graph. So the model is split when it is built: the layer calls made on the host
(``kiln.layers.host_tensor``: TextVectorization, StringLookup, Hashing, FeatureSpace ...
called on string inputs) form the *host prefix*, run eagerly on NumPy arrays on the caller's
thread; their numeric outputs, with the numeric inputs the graph uses, are the inputs of the
compiled graph. ``predict``/``evaluate``/``fit``/``__call__`` on arrays or on ``tf.data``
batches run the prefix on each batch of raw data (arrays given whole to ``fit`` are mapped
once, before batching), then the compiled step.

The model itself keeps every layer and call: ``summary()``, ``get_config()`` and ``.keras``
files show and rebuild the whole model, strings included.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import Node, format_shape
from kiln.layers.base import flatten, map_structure
from kiln.layers.host_tensor import HOST_OUTPUTS, HostTensor
from kiln.models.data import TensorSpec, flatten_data, structure_of, to_numpy


class HostPrefix:
    """The host calls of a functional model and the inputs of its compiled graph.

    Attributes:
        calls: the host layer calls, in executable order.
        graph_inputs: the compiled graph's inputs: the numeric model inputs it uses, then
            the host calls' numeric outputs it uses.
        graph_calls: the model's other calls (the compiled part), in order.
    """

    def __init__(self, model: Any, calls: list, graph_calls: list, graph_inputs: list[Node]):
        self.model_name = model.name
        self.calls = calls
        self.graph_calls = graph_calls
        self.graph_inputs = graph_inputs
        self.graph_specs = [TensorSpec(t.shape, t.dtype, _name(t, i))
                            for i, t in enumerate(graph_inputs)]

    def graph_structure(self) -> tuple:
        return ("single",) if len(self.graph_inputs) == 1 else ("list", len(self.graph_inputs))

    def run(self, model: Any, x: Any) -> list[np.ndarray]:
        """The compiled graph's input arrays from the model's raw inputs ``x`` (arrays, lists
        of str, TF tensors; a dict by input name for several)."""
        if isinstance(x, dict):
            x = {k: to_numpy(v) for k, v in x.items()}
        elif type(x) in (list, tuple) and len(model.inputs) > 1:
            x = type(x)(to_numpy(v) for v in x)
        else:
            x = to_numpy(x)
        flat, _ = flatten_data(x, structure_of(model._inputs_struct), model.input_names, "x",
                               model.name)
        values: dict[int, Any] = {}
        for t, a, spec in zip(model.inputs, flat, model._input_specs):
            values[id(t)] = conform_host_input(
                np.asarray(a) if not isinstance(a, np.ndarray) else a, spec, model.name)

        def value(t: Any) -> Any:
            if isinstance(t, Node | HostTensor):
                return values[id(t)]
            return t

        for call in self.calls:
            out = call.layer(map_structure(value, call.record.inputs))
            for old, new in zip(flatten(call.record.outputs), flatten(out)):
                values[id(old)] = np.asarray(new)
        return [values[id(t)] for t in self.graph_inputs]


def _name(t: Node, i: int) -> str:
    from kiln.layers.base import HISTORY
    h = HISTORY.get(t)
    return h[0].name if h is not None else (t.name or f"input_{i}")


def conform_host_input(a: np.ndarray, spec: TensorSpec, model_name: str) -> np.ndarray:
    """A raw input array in its input's rank (Keras' ``_adjust_input_rank``)."""
    want = spec.shape
    if a.ndim == len(want) - 1 and want and want[-1] == 1:
        a = a[..., None]
    elif a.ndim == len(want) + 1 and a.ndim > 1 and a.shape[-1] == 1:
        a = a[..., 0]
    if a.ndim != len(want):
        raise ValueError(f"{model_name}: input {spec.name!r} expects data of shape "
                         f"{format_shape(want)}, received an array of shape "
                         f"{format_shape(a.shape)}")
    if spec.dtype == "string" and a.dtype.kind not in "OUS":
        raise TypeError(f"{model_name}: input {spec.name!r} takes strings, received an array "
                        f"of dtype {a.dtype}")
    return a


def split_host_prefix(model: Any, calls: list) -> HostPrefix | None:
    """The model's host prefix, or None when no call runs on the host (see the module
    docstring). Raises ValueError naming the layer when a host call takes a value computed
    inside the graph, or when a model output is a string."""
    host = [c for c in calls if c.layer is not None and any(
        HOST_OUTPUTS.get(t, False) for t in flatten(c.record.outputs))]
    if not host and not any(isinstance(t, HostTensor) for t in model.inputs):
        return None
    for t in model.outputs:
        if isinstance(t, HostTensor):
            raise ValueError(f"{model.name}: the output {t.name!r} is a string tensor; a kiln "
                             "model's outputs are numeric (strings never enter its graph)")
    host_ids = {id(c) for c in host}
    graph_calls = [c for c in calls if id(c) not in host_ids]
    model_inputs = {id(t) for t in model.inputs}
    produced = {id(t) for c in host for t in flatten(c.record.outputs)}
    for c in host:
        for t in c.input_tensors():
            if id(t) not in model_inputs and id(t) not in produced:
                raise ValueError(
                    f"{model.name}: layer '{c.layer.name}' ({type(c.layer).__name__}) runs "
                    "on the host, before the compiled graph, so it must take the model's "
                    f"inputs or other host layers' outputs; it takes {t!r}, computed inside "
                    "the graph")
    used: set[int] = {id(t) for c in graph_calls for t in c.input_tensors()}
    used |= {id(t) for t in model.outputs}
    graph_inputs = [t for t in model.inputs if isinstance(t, Node) and id(t) in used]
    seen = {id(t) for t in graph_inputs}
    for c in host:
        for t in flatten(c.record.outputs):
            if isinstance(t, Node) and id(t) in used and id(t) not in seen:
                seen.add(id(t))
                graph_inputs.append(t)
    if not graph_inputs:
        raise ValueError(f"{model.name}: no numeric tensor reaches the model's outputs from "
                         "its host preprocessing layers")
    return HostPrefix(model, host, graph_calls, graph_inputs)


__all__ = ["HostPrefix", "conform_host_input", "split_host_prefix"]
