"""``kiln.layers.serialize`` / ``deserialize``: a layer (or model) as Keras' dict
``{"module", "class_name", "config", "registered_name", "build_config"}`` and back.

Classes are found in the one class registry (``kiln/registry.py``): kiln's built-ins (models
register theirs when ``kiln.models`` is imported) and classes registered with
``register_keras_serializable`` or passed in ``custom_objects``. Nothing named in a config is
ever imported.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from kiln.registry import get_builtin, get_registered_name, get_registered_object


def serialize(layer: Any) -> dict:
    """Keras' serialized form of ``layer`` (its class, config and build config)."""
    import kiln.layers

    cls = type(layer)
    builtin = getattr(kiln.layers, cls.__name__, None) is cls or cls.__module__.startswith(
        "kiln.")
    is_model = any(c.__name__ == "Model" and c.__module__.startswith("kiln.")
                   for c in cls.__mro__)
    out = {"module": "kiln.layers" if builtin and not is_model else cls.__module__,
           "class_name": cls.__name__, "config": layer.get_config(),
           "registered_name": None if builtin else (get_registered_name(cls) or cls.__name__)}
    build = layer.get_build_config() if hasattr(layer, "get_build_config") else None
    if build is not None:
        out["build_config"] = jsonable(build)
    return out


def deserialize(config: dict, custom_objects: dict | None = None) -> Any:
    """The layer (or model) described by :func:`serialize`'s dict."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError("layers.deserialize: expected a dict with 'class_name' and 'config', "
                        f"received {config!r}")
    name = config.get("registered_name") or config["class_name"]
    cls = get_registered_object(name, custom_objects) or get_builtin(config["class_name"])
    if cls is None:
        import kiln.layers
        cls = getattr(kiln.layers, config["class_name"], None)
    if not isinstance(cls, type) or not hasattr(cls, "from_config"):
        raise ValueError(f"layers.deserialize: unknown layer class {name!r} (register it with "
                         "kiln.saving.register_keras_serializable or pass custom_objects)")
    inner = dict(config.get("config", {}))
    if "custom_objects" in inspect.signature(cls.from_config).parameters:
        return cls.from_config(inner, custom_objects=custom_objects)
    return cls.from_config(inner)


def jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
