"""Argument normalization and input checks shared by the layer zoo."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln.config
import kiln.ops as K
from kiln.core import Node, format_shape
from kiln.layers.base import Layer
from kiln.layers.context import current


def random_stream(seed: int | None, draws: bool) -> int | None:
    """A random layer's stream (the salt of its random numbers): its ``seed`` (mod 2^32), or,
    without one, a stream drawn from kiln's seeded generator when the layer draws random
    numbers at all (:func:`kiln.random_state.layer_stream`; its config stores it as the
    ``seed``, so a saved and loaded model draws the same numbers); None when it draws none."""
    from kiln.random_state import layer_stream

    if seed is not None:
        return int(seed) % (2**32)
    return layer_stream() if draws else None


def positive_int(who: str, name: str, value: Any) -> int:
    """``value`` as an int, or ValueError naming the layer class and the argument (bools and
    floats are refused, as Keras refuses them)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{who}: {name} must be a positive int, received {name}={value!r}")
    return int(value)


def normalize_tuple(layer_or_name: Any, value: Any, n: int, arg: str,
                    allow_zero: bool = False) -> tuple[int, ...]:
    """An int or a sequence of ``n`` ints as a tuple of ``n`` ints (positive, or >= 0)."""
    who = layer_or_name if isinstance(layer_or_name, str) else type(layer_or_name).__name__
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        out = (int(value),) * n
    else:
        try:
            out = tuple(int(v) for v in value)
        except TypeError:
            raise TypeError(f"{who}: `{arg}` must be an int or a tuple of {n} ints, received "
                            f"{arg}={value!r}") from None
    low = 0 if allow_zero else 1
    if len(out) != n or any(v < low for v in out):
        what = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{who}: `{arg}` must be a {what} int or a tuple of {n} {what} ints, "
                         f"received {arg}={value!r}")
    return out


def normalize_data_format(cls_name: str, data_format: Any, channels_first: bool = False
                          ) -> str:
    """``data_format`` checked: ``None`` is :func:`kiln.config.image_data_format`;
    ``"channels_first"`` only where the layer runs it (``channels_first=True``: the spatial
    layers, kiln/layers/channels_first.py), a clear error elsewhere."""
    if data_format is None:
        data_format = kiln.config.image_data_format()
    value = str(data_format).lower()
    if value == "channels_last" or (value == "channels_first" and channels_first):
        return value
    if value == "channels_first":
        raise ValueError(f"{cls_name}: data_format='channels_first' is not supported by this "
                         "layer; it computes channels_last (batch, ..., channels). Transpose "
                         "the data (e.g. with a Permute layer) or use "
                         "data_format='channels_last'")
    raise ValueError(f"{cls_name}: data_format must be 'channels_last' or 'channels_first', "
                     f"received {data_format!r}")


def normalize_padding(cls_name: str, padding: Any, allowed: tuple[str, ...] = ("valid", "same")
                      ) -> str:
    value = padding.lower() if isinstance(padding, str) else padding
    if value not in allowed:
        raise ValueError(f"{cls_name}: padding must be one of {', '.join(map(repr, allowed))}, "
                         f"received padding={padding!r}")
    return value


def no_constraint(cls_name: str, **constraints: Any) -> None:
    """Refuses weight constraints (for a layer whose weights cannot take one)."""
    for key, value in constraints.items():
        if value is not None:
            raise ValueError(f"{cls_name}: weight constraints are not supported by this layer; "
                             f"received {key}={value!r} (use None)")


def set_constraints(layer: Any, **constraints: Any) -> None:
    """Resolves and stores ``kernel_constraint=`` ... on the layer (``constraints.get``: a
    name, config, Constraint or callable; a bad one raises here, in ``__init__``).
    ``Layer.add_weight(name)`` then attaches ``<name>_constraint`` to the weight, and the
    optimizer applies it after each update (docs/features.md, "Constraints")."""
    from kiln import constraints as constraints_module

    resolved = {}
    for key, value in constraints.items():
        try:
            resolved[key] = constraints_module.get(value)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{type(layer).__name__}: invalid {key}: {exc}") from exc
    for key, value in resolved.items():
        setattr(layer, key, value)


def constraint_config(layer: Any, *keys: str) -> dict[str, Any]:
    """The serialized constraints of ``layer`` for ``get_config`` (None when absent; a plain
    function cannot be stored and raises TypeError naming the layer)."""
    from kiln import constraints as constraints_module

    out = {}
    for key in keys:
        value = getattr(layer, key, None)
        try:
            out[key] = constraints_module.serialize(value)
        except TypeError as exc:
            raise TypeError(f"{layer.name}: {key}: {exc}") from exc
    return out


def drop_keras_extras(cls_name: str, kwargs: dict) -> None:
    """Removes the LoRA / quantization keys newer Keras configs carry (unused by kiln); a
    non-default value is refused rather than silently ignored."""
    for key in ("lora_rank", "lora_alpha", "quantization_config",
                "gptq_unpacked_column_size"):
        value = kwargs.pop(key, None)
        if value is not None:
            raise ValueError(f"{cls_name}: {key} is not supported by kiln, received "
                             f"{key}={value!r}")


def check_min_rank(layer: Layer, x: Node, min_rank: int) -> None:
    """Raises ValueError naming the layer when ``x`` has rank below ``min_rank``."""
    if x.ndim < min_rank:
        raise ValueError(f"Input 0 of layer '{layer.name}' is incompatible with the layer: "
                         f"expected min_ndim={min_rank}, found ndim={x.ndim}. Full shape "
                         f"received: {format_shape(x.shape)}")


def check_static(layer: Layer, x: Node, axes: Any, what: str) -> None:
    """Raises ValueError naming the layer when a needed dimension of ``x`` is unknown."""
    for a in axes:
        if x.shape[a] is None:
            raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}) needs a known "
                             f"{what} (axis {a % x.ndim}), received input of shape "
                             f"{format_shape(x.shape)}")


def add_activity_loss(layer: Layer, regularizer: Any, outputs: Node) -> None:
    """Adds ``regularizer(outputs) / batch_size`` to the trace's losses (as Keras does)."""
    if regularizer is None or current() is None:
        return
    penalty = regularizer(outputs)
    batch = K.size_of(outputs, axis=0) if outputs.ndim else None
    if batch is not None:
        penalty = penalty / K.cast(batch, penalty.dtype)
    layer.add_loss(penalty)


def check_mask(layer: Layer, x: Node, mask: Any, steps_axis: int = 1) -> None:
    """Raises ValueError naming the layer when ``mask`` is not a ``(batch, steps)`` tensor
    matching ``x``'s first two dims."""
    if not isinstance(mask, Node):
        raise TypeError(f"Layer '{layer.name}' ({type(layer).__name__}): mask must be a tensor, "
                        f"received {type(mask).__name__}")
    want = x.shape[:steps_axis + 1]
    ok = mask.ndim == len(want) and all(a is None or b is None or a == b
                                        for a, b in zip(mask.shape, want))
    if not ok:
        raise ValueError(f"Layer '{layer.name}' ({type(layer).__name__}): the mask has shape "
                         f"{format_shape(mask.shape)}, expected {format_shape(want)} for inputs "
                         f"of shape {format_shape(x.shape)}")


def serialize_layer(layer: Layer) -> dict:
    """A nested layer's config as Keras writes it (an RNN's cell, a wrapper's layer)."""
    from kiln.registry import get_registered_name

    return {"module": "keras.layers", "class_name": type(layer).__name__,
            "config": layer.get_config(), "registered_name": get_registered_name(layer)}


def deserialize_layer(config: Any, custom_objects: dict | None = None) -> Layer:
    """Rebuilds a nested layer from :func:`serialize_layer`'s dict (or returns a layer
    given as is). Classes are looked up, never imported from a name in the file."""
    if isinstance(config, Layer):
        return config
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"expected a layer config dict with 'class_name', received {config!r}")
    import kiln.layers
    from kiln.registry import get_registered_object

    name = config.get("registered_name") or config["class_name"]
    cls = get_registered_object(name, custom_objects) or get_registered_object(
        config["class_name"], custom_objects) or getattr(kiln.layers, config["class_name"], None)
    if cls is None:
        stack, found = [Layer], None
        while stack:
            for sub in stack.pop().__subclasses__():
                if sub.__name__ == config["class_name"]:
                    found = sub
                stack.append(sub)
        cls = found
    if cls is None:
        raise ValueError(f"unknown layer class {config['class_name']!r}: pass it in "
                         "custom_objects or register it with kiln.saving.register_serializable")
    return cls.from_config(dict(config.get("config", {})))


def keras_args(local: dict, own: tuple[str, ...] = ()) -> dict:
    """A subclass's ``locals()`` as keyword arguments for its parent (``**kwargs`` merged in,
    ``self``, ``__class__`` and the subclass's ``own`` arguments left out)."""
    out = {k: v for k, v in local.items() if k not in ("self", "__class__", "kwargs", *own)}
    out.update(local.get("kwargs", {}))
    return out
