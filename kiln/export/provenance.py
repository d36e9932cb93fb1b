"""Which layer added each node of a traced model, so an export error can name the layer.

While :func:`record_layers` is open, every layer of the model (nested ones included) notes
each of its ``call``s; on exit, each node a call added (reachable from its outputs, not from
its inputs) is attributed to the innermost layer that made it. Nodes inside a loop's body
belong to the layer of the loop.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from kiln.core import Node, WeakIdentityDict, toposort

_MISSING = object()


def _layers_of(model: Any) -> list[Any]:
    found: list[Any] = []
    seen: set[int] = set()
    stack = [model]
    while stack:
        layer = stack.pop()
        if id(layer) in seen or not callable(getattr(layer, "call", None)):
            continue
        seen.add(id(layer))
        found.append(layer)
        stack.extend(getattr(layer, "layers", None) or [])
    return found


def _tensors(value: Any) -> list[Node]:
    if isinstance(value, Node):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _recording(name: str, call: Callable[..., Any], calls: list) -> Callable[..., Any]:
    @functools.wraps(call)  # keeps the signature Layer.__call__ inspects (training, mask)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = call(*args, **kwargs)
        calls.append((name, _tensors([args, kwargs]), _tensors(out)))
        return out
    return recorded


def _claim(node: Node, layer: str, origin: WeakIdentityDict) -> None:
    if node in origin:
        return
    origin[node] = layer
    body = node.attrs.get("body") if node.op == "scan" else None
    if body is not None:
        for inner in body.graph.nodes:
            _claim(inner, layer, origin)


@contextlib.contextmanager
def record_layers(model: Any) -> Iterator[WeakIdentityDict]:
    """Records which layer of ``model`` adds each node traced inside the block.

    Yields:
        A mapping node -> layer name, filled when the block exits (weak keys: it keeps no
        graph alive).

    Example:
        >>> with record_layers(model) as origin, trace(training=False):
        ...     y = model(x)
        >>> origin[y]
        'dense_1'
    """
    origin: WeakIdentityDict = WeakIdentityDict()
    calls: list[tuple[str, list[Node], list[Node]]] = []
    patched = []
    try:
        for layer in _layers_of(model):
            patched.append((layer, vars(layer).get("call", _MISSING)))
            layer.call = _recording(str(getattr(layer, "name", type(layer).__name__)),
                                    layer.call, calls)
        yield origin
    finally:
        for layer, previous in reversed(patched):
            if previous is _MISSING:
                del layer.call
            else:
                layer.call = previous
        for name, ins, outs in calls:  # in the order the calls returned: innermost first
            before = {id(n) for n in toposort(ins)}
            for n in toposort(outs):
                if id(n) not in before and n.inputs:
                    _claim(n, name, origin)
