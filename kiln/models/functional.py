"""Functional models: a DAG of layer calls found by walking ``kiln.layers.base.HISTORY``
back from the outputs to the inputs.

Each symbolic layer call is recorded (``layer._inbound`` and ``HISTORY[output] = (layer,
call index, output index)``). The model keeps the calls between its inputs and outputs in
topological order and, when called on new tensors (inside a training trace, or as a layer of
another model), replays them: every layer is called again on the mapped inputs, so Dropout,
BatchNormalization updates and layer losses behave as in a fresh call. Plain ``kiln.ops``
applied between layers are replayed too (rebuilt on the mapped inputs).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import kiln.tape
from kiln import ops
from kiln.core import Node, format_shape, rebuild
from kiln.layers.base import HISTORY, Layer, flatten, map_structure
from kiln.layers.host_tensor import HostTensor
from kiln.models.data import TensorSpec, structure_of
from kiln.models.host_prefix import split_host_prefix
from kiln.models.model import Model, deserialize_layer, is_input_layer, serialize_layer
from kiln.saving.registration import register_builtin


class _Call:
    """One layer call (or one raw op node) of a functional graph."""

    __slots__ = ("layer", "index", "record", "op_node")

    def __init__(self, layer: Layer | None, index: int, record: Any, op_node: Node | None):
        self.layer = layer
        self.index = index
        self.record = record
        self.op_node = op_node

    def input_tensors(self) -> list[Node]:
        if self.layer is None:
            return [i for i in self.op_node.inputs if i.op not in ("constant", "param")]
        rec = self.record
        items = flatten(rec.inputs) + flatten(list(getattr(rec, "args", ()))) + flatten(
            list(rec.kwargs.values()))
        return [t for t in items if isinstance(t, Node | HostTensor)]

    def output_tensors(self) -> list[Node]:
        if self.layer is None:
            return [self.op_node]
        return [t for t in flatten(self.record.outputs) if isinstance(t, Node | HostTensor)]


def _disconnected(t: Node, found: list[str]) -> ValueError:
    return ValueError(f"Graph disconnected: cannot obtain a value for tensor {t!r}; it is not "
                      "one of the model's inputs and was not produced by a layer call from "
                      f"them. Layers reached so far: {found}. Functional model inputs must come "
                      "from kiln.Input()")


def build_graph(inputs: list[Node], outputs: list[Node]) -> tuple[list[_Call], list[Layer]]:
    """Walks back from ``outputs`` to ``inputs``; returns the calls in an executable order and
    the layers ordered like Keras (by decreasing depth, then traversal order), InputLayers
    first."""
    input_ids = {id(t) for t in inputs}
    visited: dict[Any, _Call] = {}
    order: list[_Call] = []
    layer_index: dict[int, int] = {}
    layers_by_id: dict[int, Layer] = {}

    def call_of(t: Node) -> tuple[Any, _Call] | None:
        if id(t) in input_ids:
            return None
        h = HISTORY.get(t)
        if h is not None:
            layer, ci, _ = h
            if is_input_layer(layer):
                raise _disconnected(t, [layer.name for layer in layers_by_id.values()])
            key = (id(layer), ci)
            return key, visited.get(key) or _Call(layer, ci, layer._inbound[ci], None)
        if t.op in ("constant", "param"):
            return None
        if t.op == "placeholder":
            raise _disconnected(t, [layer.name for layer in layers_by_id.values()])
        return ("op", id(t)), visited.get(("op", id(t))) or _Call(None, 0, None, t)

    in_progress: set = set()
    stack: list[tuple[Any, _Call, list[Node], int]] = []

    def push(key: Any, call: _Call) -> None:
        if call.layer is not None and id(call.layer) not in layer_index:
            layer_index[id(call.layer)] = len(layer_index)  # traversal order, like Keras
            layers_by_id[id(call.layer)] = call.layer
        in_progress.add(key)
        stack.append((key, call, call.input_tensors(), 0))

    for root in outputs:
        start = call_of(root)
        if start is None or start[0] in visited:
            continue
        push(*start)
        while stack:
            key, call, ins, i = stack[-1]
            if i < len(ins):
                stack[-1] = (key, call, ins, i + 1)
                nxt = call_of(ins[i])
                if nxt is None or nxt[0] in visited:
                    continue
                if nxt[0] in in_progress:
                    raise ValueError(f"the layer graph has a cycle through {ins[i]!r}")
                push(*nxt)
            else:
                stack.pop()
                in_progress.discard(key)
                visited[key] = call
                order.append(call)

    # Depths like Keras: outputs at depth 0, a call one deeper than any call using it.
    depth: dict[int, int] = {}
    producer: dict[int, _Call] = {}
    for call in order:
        for t in call.output_tensors():
            producer[id(t)] = call
    for call in reversed(order):
        d = depth.setdefault(id(call), 0)
        for t in call.input_tensors():
            p = producer.get(id(t))
            if p is not None:
                depth[id(p)] = max(depth.get(id(p), 0), d + 1)
    layer_depth: dict[int, int] = {}
    for call in order:
        if call.layer is not None:
            layer_depth[id(call.layer)] = max(layer_depth.get(id(call.layer), 0),
                                              depth[id(call)])
    input_layers = []
    for t in inputs:
        h = HISTORY.get(t)
        if h is not None and is_input_layer(h[0]) and h[0] not in input_layers:
            input_layers.append(h[0])
    rest = sorted(layers_by_id.values(), key=lambda layer: (-layer_depth[id(layer)],
                                                            layer_index[id(layer)]))
    return order, input_layers + [layer for layer in rest if layer not in input_layers]


def init_functional(model: Model, inputs: Any = None, outputs: Any = None,
                    name: str | None = None, trainable: bool = True, **kwargs: Any) -> None:
    """Sets up ``model`` as a functional model of ``inputs`` -> ``outputs``."""
    if inputs is None or outputs is None:
        raise ValueError("Model(inputs, outputs): both inputs and outputs are required, "
                         f"received inputs={inputs!r}, outputs={outputs!r}")
    model._init_model(name=name, trainable=trainable, **kwargs)
    if isinstance(inputs, tuple):
        inputs = list(inputs)
    if isinstance(outputs, tuple):
        outputs = list(outputs)
    flat_in, flat_out = flatten(inputs), flatten(outputs)
    for what, flat in (("inputs", flat_in), ("outputs", flat_out)):
        for t in flat:
            if not isinstance(t, Node | HostTensor):
                raise TypeError(f"Model: all {what} must be symbolic tensors (from kiln.Input "
                                f"and layer calls), received {type(t).__name__}")
    if not flat_in or not flat_out:
        raise ValueError("Model: inputs and outputs must not be empty")
    calls, layers = build_graph(flat_in, flat_out)
    model._is_graph_network = True
    model._inputs_struct = inputs
    model._outputs_struct = outputs
    model.inputs = flat_in
    model.outputs = flat_out
    model._calls = calls
    model._layers = layers
    model.built = True
    in_struct = structure_of(inputs)
    names = list(in_struct[1]) if in_struct[0] == "dict" else [
        _tensor_name(t, f"input_{i}") for i, t in enumerate(flat_in)]
    model._input_specs = [TensorSpec(t.shape, t.dtype, n) for t, n in zip(flat_in, names)]
    # string inputs and the host preprocessing on them run before the compiled graph
    model._host = split_host_prefix(model, calls)
    model._build_input_spec = map_structure(TensorSpec.of, inputs)
    model.build_input_shape = map_structure(lambda t: tuple(t.shape), inputs)


def _tensor_name(t: Node, default: str) -> str:
    h = HISTORY.get(t)
    if h is not None:
        return h[0].name
    return t.name or default


class Functional(Model):
    """A model defined by its input and output tensors: ``kiln.Model(inputs, outputs)``."""

    def __init__(self, inputs: Any = None, outputs: Any = None, name: str | None = None,
                 trainable: bool = True, **kwargs: Any):
        init_functional(self, inputs, outputs, name=name, trainable=trainable, **kwargs)

    def _sublayers(self) -> list[Layer]:
        return list(self._layers)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self._input_specs]

    @property
    def output_names(self) -> list[str]:
        struct = structure_of(self._outputs_struct)
        if struct[0] == "dict":
            return list(struct[1])
        names = [_tensor_name(t, f"output_{i}") for i, t in enumerate(self.outputs)]
        seen: dict[str, int] = {}
        out = []
        for n in names:
            if n in seen:
                seen[n] += 1
                n = f"{n}_{seen[n]}"
            else:
                seen[n] = 0
            out.append(n)
        return out

    @property
    def input_shape(self) -> Any:
        return map_structure(lambda t: tuple(t.shape), self._inputs_struct)

    @property
    def output_shape(self) -> Any:
        return map_structure(lambda t: tuple(t.shape), self._outputs_struct)

    # trainer hooks (a model with a host prefix: its compiled graph's inputs, host_prefix.py)
    def _model_input_specs(self) -> list[TensorSpec]:
        host = getattr(self, "_host", None)
        return self._input_specs if host is None else host.graph_specs

    def _model_input_structure(self) -> tuple:
        host = getattr(self, "_host", None)
        return structure_of(self._inputs_struct) if host is None else host.graph_structure()

    def _standardize_x(self, x: Any) -> list:
        host = getattr(self, "_host", None)
        if host is not None:  # raw inputs -> the host prefix -> the graph's inputs
            x = host.run(self, x)
        return super()._standardize_x(x)

    def _call_eager(self, inputs: Any, *args: Any, training: bool | None = None,
                    **kwargs: Any) -> Any:
        host = getattr(self, "_host", None)
        if host is None or (not training and not args and not kwargs
                            and not kiln.tape.recording()):
            return super()._call_eager(inputs, *args, training=training, **kwargs)
        return Layer._call_eager(self, self._pack_inputs(host.run(self, inputs)), *args,
                                 training=training, **kwargs)

    def _model_output_specs(self) -> list[TensorSpec]:
        return [TensorSpec.of(t) for t in self.outputs]

    def _model_output_structure(self) -> tuple:
        return structure_of(self._outputs_struct)

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        return run_graph(self, inputs, training)

    def get_config(self) -> dict:
        return functional_config(self)

    @classmethod
    def from_config(cls, config: dict, custom_objects: dict[str, Any] | None = None
                    ) -> Functional:
        return functional_from_config(cls, config, custom_objects)


def _match_inputs(model: Model, inputs: Any) -> list[Node]:
    """The call's inputs in the order of ``model.inputs``."""
    struct = structure_of(model._inputs_struct)
    n = len(model.inputs)
    if struct[0] == "dict" and isinstance(inputs, dict):
        missing = [k for k in struct[1] if k not in inputs]
        if missing:
            raise ValueError(f"{model.name}: missing inputs {missing}; expected keys "
                             f"{list(struct[1])}")
        flat = [inputs[k] for k in struct[1]]
    elif isinstance(inputs, dict):
        names = model.input_names
        if all(k in inputs for k in names):
            flat = [inputs[k] for k in names]
        else:
            flat = flatten(inputs)
    else:
        flat = flatten(inputs)
    if len(flat) != n:
        raise ValueError(f"{model.name}: expected {n} input(s), received {len(flat)}")
    flat = [adjust_input_rank(t, spec) if isinstance(t, Node) else t
            for t, spec in zip(flat, model._input_specs)]
    for t, spec in zip(flat, model._input_specs):
        if isinstance(t, Node):
            ok = t.ndim == len(spec.shape) and all(
                a is None or b is None or a == b for a, b in zip(t.shape[1:], spec.shape[1:]))
            if not ok:
                raise ValueError(f"Input {spec.name!r} of model '{model.name}' is incompatible "
                                 f"with the model: expected shape {format_shape(spec.shape)}, "
                                 f"received {format_shape(t.shape)}")
    return flat


def adjust_input_rank(t: Node, spec: Any) -> Node:
    """Keras' ``_adjust_input_rank``: a tensor one rank short of an input whose last dimension
    is 1 gains that axis; one rank over with a last dimension of 1 loses it."""
    want = len(spec.shape)
    if t.ndim == want - 1 and spec.shape[-1] == 1:
        return ops.expand_dims(t, -1)
    if t.ndim == want + 1 and t.shape[-1] == 1:
        return ops.squeeze(t, -1)
    return t


def run_graph(model: Model, inputs: Any, training: bool | None = None) -> Any:
    """Replays ``model``'s layer calls on new input tensors (with a host prefix: the
    compiled part's calls on its inputs)."""
    host = getattr(model, "_host", None)
    graph_inputs, calls = (model.inputs, model._calls) if host is None else (
        host.graph_inputs, host.graph_calls)
    flat = _match_inputs(model, inputs) if host is None else _match_graph_inputs(
        model, host, inputs)
    mapping: dict[int, Any] = {}
    for orig, new in zip(graph_inputs, flat):
        if isinstance(new, Node) and new.dtype != orig.dtype:
            new = ops.cast(new, orig.dtype)
        mapping[id(orig)] = new

    def conv(v: Any) -> Any:
        if isinstance(v, Node):
            return mapping.get(id(v), v)
        return v

    for call in calls:
        if call.layer is None:
            node = call.op_node
            mapping[id(node)] = rebuild(node, [conv(i) for i in node.inputs])
            continue
        rec = call.record
        kwargs = {k: map_structure(conv, v) for k, v in rec.kwargs.items()}
        if training is not None:
            kwargs["training"] = training
        args = tuple(map_structure(conv, a) for a in getattr(rec, "args", ()))
        outs = call.layer(map_structure(conv, rec.inputs), *args, **kwargs)
        for old, new in zip(flatten(rec.outputs), flatten(outs)):
            mapping[id(old)] = new
    return map_structure(lambda t: mapping[id(t)] if isinstance(t, Node) else t,
                         model._outputs_struct)


def _match_graph_inputs(model: Model, host: Any, inputs: Any) -> list:
    flat = flatten(inputs)
    if any(isinstance(t, HostTensor) for t in flat) or len(flat) != len(host.graph_inputs):
        raise ValueError(f"{model.name}: its string inputs run through host preprocessing "
                         "layers before its graph, so a symbolic call must pass the graph's "
                         f"{len(host.graph_inputs)} numeric input(s) "
                         f"{[s.name for s in host.graph_specs]}, received {len(flat)} "
                         "tensor(s); on data, call it on the raw arrays")
    return flat


# ---- config -------------------------------------------------------------------------------
def functional_config(model: Functional) -> dict:
    """Keras 3's functional config: ``{"name", "trainable", "layers": [{..., "name",
    "inbound_nodes"}], "input_layers", "output_layers"}``; node indices are renumbered
    among the calls that belong to this model."""
    if any(c.layer is None for c in model._calls):
        ops = sorted({c.op_node.op for c in model._calls if c.layer is None})
        raise NotImplementedError(f"{model.name}: get_config() cannot serialize raw kiln.ops "
                                  f"applied between layers ({ops}); wrap them in a layer "
                                  "(e.g. kiln.layers.Lambda or a custom Layer)")
    calls_of: dict[int, list[_Call]] = defaultdict(list)
    for c in model._calls:
        calls_of[id(c.layer)].append(c)
    reindex: dict[tuple[int, int], int] = {}
    for layer in model._layers:
        if is_input_layer(layer):
            reindex[(id(layer), 0)] = 0
            continue
        for j, c in enumerate(sorted(calls_of[id(layer)], key=lambda c: c.index)):
            reindex[(id(layer), c.index)] = j

    def tensor_config(t: Node) -> list:
        layer, ci, oi = HISTORY[t]
        return [layer.name, reindex[(id(layer), ci)], oi]

    def serialize_arg(v: Any) -> Any:
        if isinstance(v, Node | HostTensor):
            return {"class_name": "__keras_tensor__",
                    "config": {"shape": list(v.shape), "dtype": v.dtype,
                               "keras_history": tensor_config(v)}}
        if isinstance(v, dict):
            return {k: serialize_arg(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [serialize_arg(x) for x in v]
        return v

    layer_configs = []
    for layer in model._layers:
        entry = serialize_layer(layer)
        entry["name"] = layer.name
        nodes = []
        if not is_input_layer(layer):
            for c in sorted(calls_of[id(layer)], key=lambda c: c.index):
                rec = c.record
                nodes.append({"args": [serialize_arg(rec.inputs)] + [
                    serialize_arg(a) for a in getattr(rec, "args", ())],
                    "kwargs": serialize_arg(dict(rec.kwargs))})
        entry["inbound_nodes"] = nodes
        layer_configs.append(entry)

    def map_tensors(struct: Any) -> Any:
        if isinstance(struct, Node | HostTensor):
            return [tensor_config(struct)]
        if isinstance(struct, dict):
            return {k: tensor_config(v) for k, v in struct.items()}
        return [tensor_config(t) for t in struct]

    return {"name": model.name, "trainable": model.trainable, "layers": layer_configs,
            "input_layers": map_tensors(model._inputs_struct),
            "output_layers": map_tensors(model._outputs_struct)}


class _Missing(Exception):
    pass


def functional_from_config(cls: type, config: dict, custom_objects: dict[str, Any] | None
                           ) -> Functional:
    """Rebuilds a functional model from a Keras 3 (``{"args", "kwargs"}`` nodes) or Keras 2
    (``[[name, node, tensor, kwargs], ...]`` nodes) config."""
    created: dict[str, Layer] = {}
    outputs_of: dict[str, list[Any]] = defaultdict(list)
    pending: dict[str, list] = {}
    order: list[str] = []
    for layer_data in config["layers"]:
        layer = deserialize_layer(layer_data, custom_objects)
        name = layer_data.get("name") or layer.name
        created[name] = layer
        order.append(name)
        if is_input_layer(layer):
            outputs_of[name].append(layer.output)
            pending[name] = []
        else:
            pending[name] = list(layer_data.get("inbound_nodes", []))

    def get_tensor(layer_name: str, node_index: int, tensor_index: int) -> Node:
        outs = outputs_of.get(layer_name, [])
        if node_index >= len(outs):
            raise _Missing
        return flatten(outs[node_index])[tensor_index]

    def deserialize_arg(v: Any) -> Any:
        if isinstance(v, dict):
            if v.get("class_name") == "__keras_tensor__":
                return get_tensor(*v["config"]["keras_history"])
            return {k: deserialize_arg(x) for k, x in v.items()}
        if isinstance(v, list):
            return [deserialize_arg(x) for x in v]
        return v

    def process(layer: Layer, node: Any) -> Any:
        if isinstance(node, dict):  # Keras 3
            args = [deserialize_arg(a) for a in node.get("args", [])]
            kwargs = deserialize_arg(node.get("kwargs", {}))
            if not args:
                raise ValueError(f"layer {layer.name!r}: inbound node without arguments")
            return layer(args[0], *args[1:], **kwargs)
        # Keras 2: a list of [layer_name, node_index, tensor_index, kwargs]
        tensors, kwargs = [], {}
        for item in node:
            tensors.append(get_tensor(item[0], item[1], item[2]))
            if len(item) > 3 and item[3]:
                kwargs = dict(item[3])
        return layer(tensors[0] if len(tensors) == 1 else tensors, **kwargs)

    progress = True
    while progress and any(pending.values()):
        progress = False
        for name in order:
            while pending[name]:
                try:
                    out = process(created[name], pending[name][0])
                except _Missing:
                    break
                outputs_of[name].append(out)
                pending[name].pop(0)
                progress = True
    left = [n for n, p in pending.items() if p]
    if left:
        raise ValueError(f"from_config: could not connect the layers {left} (their inputs "
                         "were never produced)")

    def map_tensors(struct: Any) -> Any:
        if isinstance(struct, list) and len(struct) == 3 and isinstance(struct[0], str):
            return get_tensor(*struct[:3])
        if isinstance(struct, dict):
            return {k: map_tensors(v) for k, v in struct.items()}
        return [map_tensors(v) for v in struct]

    inputs = map_tensors(config["input_layers"])
    outputs = map_tensors(config["output_layers"])
    if isinstance(inputs, list) and len(inputs) == 1:
        inputs = inputs[0]
    if isinstance(outputs, list) and len(outputs) == 1:
        outputs = outputs[0]
    model = cls(inputs=inputs, outputs=outputs, name=config.get("name"))
    if config.get("trainable") is False:
        model.trainable = False
    return model


register_builtin("Functional", Functional)

__all__ = ["Functional", "build_graph", "run_graph", "functional_config",
           "functional_from_config"]
