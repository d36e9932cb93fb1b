"""Symbolic values that never enter a kiln graph: string model inputs, and the host-side
preprocessing layer calls on them.

``kiln.Input(shape=(1,), dtype="string")`` returns a :class:`HostTensor`: a symbolic string
value with a shape, a dtype and a name, but no graph node (a compiled graph holds numbers
only). Calling a host preprocessing layer (TextVectorization, StringLookup, Hashing,
FeatureSpace ...) on it records the call like any functional layer call and returns a new
numeric placeholder of the layer's output shape and dtype: the boundary where the compiled
graph starts. A functional model whose inputs feed such calls is split at build time
(``kiln.models.host_prefix``): the host calls run eagerly on the arrays, the rest is compiled.

Any other layer called on a HostTensor raises TypeError naming the layer and the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.core import Node, WeakIdentityDict, format_shape, placeholder
from kiln.layers.context import current

STRING_DTYPES = ("string", "str", "object", "bytes")

# output tensor (a placeholder or HostTensor) of a host-side layer call -> True
HOST_OUTPUTS: WeakIdentityDict = WeakIdentityDict()


def is_string_dtype(dtype: Any) -> bool:
    """``"string"`` (Keras' name), ``str``, ``object``, ``bytes`` or TensorFlow's tf.string."""
    if dtype in (str, bytes, object):
        return True
    name = getattr(dtype, "name", dtype)
    return isinstance(name, str) and name in STRING_DTYPES


class HostTensor:
    """A symbolic host-side value (strings) of a functional model (see the module docstring).

    Example:
        >>> s = kiln.Input(shape=(1,), dtype="string")
        >>> s.shape, s.dtype
        ((None, 1), 'string')
    """

    op = "host_input"

    def __init__(self, shape: tuple, dtype: str = "string", name: str | None = None):
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = dtype
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return (f"<HostTensor name={self.name!r} shape={format_shape(self.shape)} "
                f"dtype={self.dtype}>")

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"the {self.dtype} input {self.name!r} (shape "
                        f"{format_shape(self.shape)}) cannot enter a kiln graph: strings "
                        "never do. Feed it to a host preprocessing layer (TextVectorization, "
                        "StringLookup, Hashing, FeatureSpace) first; numeric ops take that "
                        "layer's output")

    __array__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __getitem__ = _refuse
    __kiln_node__ = _refuse


def has_host_tensor(*values: Any) -> bool:
    """Whether any (nested) value is a HostTensor."""
    from kiln.layers.base import flatten
    return any(isinstance(v, HostTensor) for v in flatten(list(values)))


def refuse_host_input(layer: Any, inputs: Any) -> TypeError:
    """The error for a graph layer called on a string input."""
    from kiln.layers.base import flatten
    names = [v.name for v in flatten([inputs]) if isinstance(v, HostTensor)]
    return TypeError(f"Layer '{layer.name}' ({type(layer).__name__}) received the string "
                     f"input(s) {names}: strings never enter a kiln graph. Only host "
                     "preprocessing layers (TextVectorization, StringLookup, Hashing, "
                     "FeatureSpace) take them; this layer takes their numeric output")


def _probe_value(layer: Any) -> Any:
    lookup = getattr(layer, "_lookup", layer)
    get_vocabulary = getattr(lookup, "get_vocabulary", None)
    if callable(get_vocabulary) and getattr(lookup, "_tokens", None) is not None:
        vocab = get_vocabulary(include_special_tokens=False)
        if vocab:
            return vocab[0]
    return ""


def _probe(layer: Any, t: Any) -> np.ndarray:
    shape = tuple(1 if d is None else d for d in t.shape) or (1,)
    if isinstance(t, HostTensor):
        return np.full(shape, _probe_value(layer), dtype=object)
    return np.zeros(shape, dtype=t.dtype)


def _output_specs(layer: Any, inputs: Any) -> Any:
    """The structure of ``(shape, dtype)`` of the layer's output on ``inputs``: run once on a
    one-sample probe; a dimension the layer's own ``compute_output_shape`` leaves open (a
    TextVectorization without ``output_sequence_length``) stays None."""
    from kiln.layers.base import Layer, flatten, map_structure
    make_probe = getattr(layer, "_host_probe", None)  # a layer's own (FeatureSpace's)
    probe = make_probe(inputs) if callable(make_probe) else map_structure(
        lambda t: _probe(layer, t) if isinstance(t, HostTensor | Node) else t, inputs)
    try:
        out = layer(probe)
    except Exception as exc:
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) could not run on a "
                         f"one-sample probe of its symbolic input, to find its output shape "
                         f"and dtype (adapt it, or set its vocabulary, before calling it on "
                         f"kiln.Input): {type(exc).__name__}: {exc}") from exc
    own = type(layer).compute_output_shape is not Layer.compute_output_shape \
        if isinstance(layer, Layer) else False
    declared = None
    if own and not isinstance(inputs, dict | list | tuple):
        try:
            declared = tuple(layer.compute_output_shape(tuple(inputs.shape)))
        except Exception:  # noqa: BLE001 - the probe's shape is used instead
            declared = None

    def spec(a: Any) -> tuple:
        a = np.asarray(a)
        shape: tuple = (None,) + a.shape[1:]
        if declared is not None and len(declared) == a.ndim:
            shape = (None,) + tuple(d if d is None or k == 0 else a.shape[k]
                                    for k, d in enumerate(declared))[1:]
        dtype = "string" if a.dtype.kind in "OUS" else a.dtype.name
        return shape, dtype

    if isinstance(out, dict):
        return {k: spec(v) for k, v in out.items()}
    if isinstance(out, list | tuple):
        return [spec(v) for v in flatten(out)]
    return spec(out)


def host_call(layer: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
    """A host preprocessing layer called on symbolic inputs while a functional model is being
    built: records the call and returns the placeholder(s) its output becomes (see the module
    docstring). Inside a traced step (a compiled graph) this is an error."""
    from kiln.layers.base import HISTORY, CallRecord, flatten, map_structure
    from kiln.layers.preprocessing.hashing import host_only
    if current() is not None:
        raise host_only(layer)
    kwargs.pop("training", None)
    if args or kwargs:
        raise TypeError(f"Layer '{layer.name}' ({type(layer).__name__}) on symbolic inputs "
                        f"takes only its inputs, received {len(args)} more positional "
                        f"argument(s) and {sorted(kwargs)}")
    specs = _output_specs(layer, inputs)

    def make(spec: tuple) -> Any:
        shape, dtype = spec
        if dtype == "string":
            return HostTensor(shape, "string", name=layer.name)
        return placeholder(shape, dtype, name=layer.name)

    outputs = map_structure(make, specs) if isinstance(specs, dict) else (
        [make(s) for s in specs] if isinstance(specs, list) else make(specs))
    index = len(layer._inbound)
    layer._inbound.append(CallRecord(inputs, outputs, {}, ()))
    for i, out in enumerate(flatten(outputs)):
        HISTORY[out] = (layer, index, i)
        HOST_OUTPUTS[out] = True
    layer.built = True
    return outputs


__all__ = ["HostTensor", "HOST_OUTPUTS", "has_host_tensor", "host_call", "is_string_dtype",
           "refuse_host_input"]
