"""Model configs as JSON, in Keras 3's schema: serializing, checking and rebuilding.

A serialized object is ``{"module", "class_name", "config", "registered_name"}`` (plus
``"build_config"`` / ``"compile_config"`` for models), as Keras' ``serialize_keras_object``
writes it. Loading resolves class names only through
:func:`kiln.saving.registration.resolve_class` (kiln's classes, ``@register_serializable``
classes and ``custom_objects``); nothing named in a file is imported, evaluated or unpickled.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from typing import Any

import kiln.config
from kiln.saving import keras_ops
from kiln.saving.registration import (
    custom_object_scope,
    get_registered_name,
    resolve_class,
)

# Keras module names for kiln's own packages (what Keras writes in "module").
_KERAS_MODULES = {  # most specific prefix first
    "kiln.optimizers.schedules": "keras.optimizers.schedules",
    "kiln.layers": "keras.layers",
    "kiln.models": "keras.models",
    "kiln.optimizers": "keras.optimizers",
    "kiln.losses": "keras.losses",
    "kiln.metrics": "keras.metrics",
    "kiln.initializers": "keras.initializers",
    "kiln.regularizers": "keras.regularizers",
    "kiln.activations": "keras.activations",
}
_SPECIAL = {"__keras_tensor__", "__numpy__", "__tensor__", "__bytes__", "__slice__",
            "__ellipsis__", "__typespec__", "__unserializable_function__"}


def module_of(obj: Any) -> str:
    cls = obj if isinstance(obj, type) else type(obj)
    mod = cls.__module__ or ""
    if get_registered_name(cls) is None:
        for prefix, keras_mod in _KERAS_MODULES.items():
            if mod == prefix or mod.startswith(prefix + "."):
                if prefix == "kiln.models":
                    return "keras.src.models.functional" if cls.__name__ == "Functional" \
                        else "keras"
                return keras_mod
    return mod


def serialize(obj: Any) -> Any:
    """``{"module", "class_name", "config", "registered_name"}`` for an object with
    ``get_config`` (strings, numbers and None pass through)."""
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    get_config = getattr(obj, "get_config", None)
    if not callable(get_config):
        raise TypeError(f"cannot serialize {type(obj).__name__} {obj!r}: it has no get_config()")
    cls = type(obj)
    registered = get_registered_name(cls)
    out: dict[str, Any] = {"module": module_of(obj), "class_name": cls.__name__,
                           "config": get_config(), "registered_name": registered}
    if registered is None and cls.__module__.startswith("kiln."):
        out["registered_name"] = None
    return out


def serialize_model(model: Any, include_compile: bool = True) -> dict:
    """The model's ``config.json`` content (Keras 3 schema, Keras module names)."""
    out = serialize(model)
    if getattr(model, "serializable", True) is False:
        raise ValueError(f"{getattr(model, 'name', model)!r} cannot be serialized")
    build = getattr(model, "get_build_config", None)
    out["build_config"] = build() if callable(build) else None
    out["compile_config"] = get_compile_config(model) if include_compile else None
    out = _map_entries(out, _operation_to_keras)
    lambdas = [path for path, entry in _walk_layers(out) if entry.get("class_name") == "Lambda"]
    if lambdas:
        warnings.warn(f"saving {getattr(model, 'name', 'model')!r}: Lambda layer(s) {lambdas} "
                      "store no code, so load_model will refuse this file; use "
                      "load_weights on a model built in code, or replace them by Layer "
                      "subclasses registered with @kiln.saving.register_serializable()",
                      stacklevel=3)
    return to_keras_modules(_plain(out))


def _plain(x: Any) -> Any:
    """Tuples -> lists, NumPy scalars -> Python (what JSON would make of them)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if hasattr(x, "item") and getattr(x, "ndim", None) == 0:
        return x.item()
    return x


def to_keras_modules(config: Any) -> Any:
    """Rewrites ``"module": "kiln.layers"`` (and optimizers, losses ...) of kiln's own,
    unregistered classes to Keras' module names, so Keras finds its equivalents."""
    if isinstance(config, list):
        return [to_keras_modules(v) for v in config]
    if not isinstance(config, dict):
        return config
    out = {k: to_keras_modules(v) for k, v in config.items()}
    mod = out.get("module")
    if isinstance(mod, str) and "class_name" in out and not out.get("registered_name"):
        for prefix, keras_mod in _KERAS_MODULES.items():
            if mod == prefix or mod.startswith(prefix + "."):
                if prefix == "kiln.models":
                    keras_mod = "keras.src.models.functional" if out["class_name"] == \
                        "Functional" else "keras"
                out["module"] = keras_mod
                break
    return out


def get_compile_config(model: Any) -> dict | None:
    fn = getattr(model, "get_compile_config", None)
    if callable(fn):
        return fn()
    return None


# ---- checks before building anything ----------------------------------------------------------
def _resolve(name: str, custom_objects: dict | None) -> Any:
    """The class for ``name`` (None if unknown) through kiln's one lookup function."""
    try:
        return resolve_class(name, custom_objects)
    except (ValueError, KeyError, TypeError):
        return None


def _walk_layers(config: Any, path: str = "") -> list[tuple[str, dict]]:
    """Every layer entry (``{"class_name", "config"}``) of a model config, nested models
    included, with a readable path."""
    out: list[tuple[str, dict]] = []
    if not isinstance(config, dict):
        return out
    inner = config.get("config", {})
    layers = inner.get("layers") if isinstance(inner, dict) else None
    if isinstance(layers, list):
        for entry in layers:
            if isinstance(entry, dict) and "class_name" in entry:
                name = (entry.get("config") or {}).get("name", entry.get("name", "?"))
                sub = f"{path}/{name}" if path else str(name)
                out.append((sub, entry))
                out += _walk_layers(entry, sub)
    # Wrappers (Bidirectional, TimeDistributed) keep their inner layer under "layer".
    for key in ("layer", "backward_layer"):
        entry = inner.get(key) if isinstance(inner, dict) else None
        if isinstance(entry, dict) and "class_name" in entry:
            name = (entry.get("config") or {}).get("name", "?")
            out.append((f"{path}/{name}", entry))
            out += _walk_layers(entry, f"{path}/{name}")
    return out


def _find_lambdas(obj: Any) -> bool:
    if isinstance(obj, dict):
        if obj.get("class_name") == "__lambda__":
            return True
        return any(_find_lambdas(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_find_lambdas(v) for v in obj)
    return False


def check_config(config: dict, custom_objects: dict | None = None, safe_mode: bool = True,
                 source: str = "the config") -> None:
    """Refuses a config before anything is built: unknown classes (named, with the fix),
    Lambda layers and serialized Python code under ``safe_mode``."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise ValueError(f"{source}: expected a model config with a 'class_name', received "
                         f"{str(config)[:200]}")
    if kiln.config.in_safe_mode() is False:  # kiln.config.enable_unsafe_deserialization()
        safe_mode = False
    entries = [("(the model)", config)] + _walk_layers(config)
    for path, entry in entries:
        cls_name = entry.get("class_name")
        registered = entry.get("registered_name")
        if cls_name == "Lambda" or (registered or "").endswith(">Lambda"):
            if safe_mode:
                raise ValueError(
                    f"{source}: layer {path!r} is a Lambda layer. Loading it would require "
                    "running Python code stored in the file, which safe_mode=True refuses. "
                    "If you trust the file, pass safe_mode=False and the function in "
                    "custom_objects; better, replace the Lambda by a Layer subclass "
                    "registered with @kiln.saving.register_serializable()")
            fn = (entry.get("config") or {}).get("function")
            if isinstance(fn, dict) and fn.get("class_name") in ("__lambda__",
                                                                 "__unserializable_function__"):
                raise ValueError(
                    f"{source}: Lambda layer {path!r} stores its function as Python bytecode "
                    "(or not at all); kiln never executes stored code, even with "
                    "safe_mode=False. Recreate the layer in code, or replace it by a Layer "
                    "subclass")
            continue
        if cls_name in _SPECIAL:
            continue
        found = None
        for name in (registered, cls_name):
            if name:
                found = _resolve(name, custom_objects)
                if found is not None:
                    break
        if found is None:
            raise ValueError(
                f"{source}: unknown class {cls_name!r} (layer {path!r}"
                + (f", registered name {registered!r}" if registered else "")
                + "). Pass it in custom_objects={'" + str(cls_name) + "': ...} or decorate "
                "the class with @kiln.saving.register_serializable()")
    if safe_mode and _find_lambdas(config):
        raise ValueError(f"{source}: the config contains a serialized Python lambda; "
                         "safe_mode=True refuses to load it")


# ---- Keras 2 (tf.keras) configs -> Keras 3 schema ----------------------------------------------
def _legacy_node(node: Any) -> dict:
    """``[[name, node_index, tensor_index, kwargs], ...]`` -> ``{"args": [...], "kwargs"}``."""
    tensors = []
    kwargs: dict = {}
    for item in node:
        name, node_index, tensor_index = item[0], item[1], item[2]
        if len(item) > 3 and isinstance(item[3], dict):
            kwargs.update(item[3])
        tensors.append({"class_name": "__keras_tensor__",
                        "config": {"keras_history": [name, node_index, tensor_index]}})
    return {"args": [tensors[0] if len(tensors) == 1 else tensors], "kwargs": kwargs}


def upgrade_legacy_config(config: Any) -> Any:
    """Rewrites a Keras 2 model config (``inbound_nodes`` as nested lists, ``batch_input_shape``
    in layer configs) into the Keras 3 schema; Keras 3 configs are returned unchanged."""
    config = copy.deepcopy(config)

    def fix(entry: Any) -> None:
        if not isinstance(entry, dict):
            return
        inner = entry.get("config")
        if isinstance(inner, dict):
            nodes = entry.get("inbound_nodes")
            if isinstance(nodes, list) and nodes and isinstance(nodes[0], list):
                entry["inbound_nodes"] = [_legacy_node(n) for n in nodes]
            if entry.get("class_name") == "InputLayer" and "batch_input_shape" in inner:
                inner.setdefault("batch_shape", inner.pop("batch_input_shape"))
            for sub in inner.get("layers", []) if isinstance(inner.get("layers"), list) else []:
                fix(sub)
            for key in ("layer", "backward_layer"):
                fix(inner.get(key))

    fix(config)
    return config


# ---- Keras operation nodes (kiln/saving/keras_ops.py) -------------------------------------------
def _map_entries(config: Any, fn: Any) -> Any:
    """``config`` with every layer entry of its (nested) functional configs replaced by
    ``fn(entry)``; the input is not modified."""
    if not isinstance(config, dict):
        return config
    inner = config.get("config")
    if not isinstance(inner, dict) or not isinstance(inner.get("layers"), list):
        return config
    entries = [_map_entries(fn(e), fn) if isinstance(e, dict) else e for e in inner["layers"]]
    return {**config, "config": {**inner, "layers": entries}}


def _operation_to_keras(entry: dict) -> dict:
    if entry.get("class_name") == "KerasOperation" and not entry.get("registered_name") and \
            "operation" in (entry.get("config") or {}):
        return keras_ops.to_keras_entry(entry)
    return entry


def operations_to_kiln(config: dict, source: str = "the config",
                       custom_objects: dict | None = None) -> tuple[dict, bool]:
    """Rewrites the Keras operation nodes of a functional config (``NotEqual`` ...) as
    ``KerasOperation`` layers; refuses operations kiln does not map. Returns the config and
    whether it had any."""
    found = False

    def known(name: str) -> bool:
        return _resolve(name, custom_objects) is not None

    def rewrite(entry: dict) -> dict:
        nonlocal found
        if not keras_ops.is_operation_entry(entry, known):
            return entry
        keras_ops.check_operation_entry(entry, source)
        found = True
        return keras_ops.to_kiln_entry(entry)

    return _map_entries(config, rewrite), found


# ---- rebuilding ---------------------------------------------------------------------------------
def _call_from_config(cls: Any, config: dict, custom_objects: dict | None) -> Any:
    from_config = cls.from_config
    try:
        params = inspect.signature(from_config).parameters
    except (TypeError, ValueError):
        params = {}
    if "custom_objects" in params:
        return from_config(config, custom_objects=custom_objects)
    return from_config(config)


def deserialize_model(config: dict, custom_objects: dict | None = None, compile: bool = True,
                      safe_mode: bool = True, source: str = "the config") -> Any:
    """Rebuilds (and, with ``compile``, compiles) a model from its serialized config."""
    config = upgrade_legacy_config(config)
    config, has_operations = operations_to_kiln(config, source, custom_objects)
    if has_operations:  # kiln's class for Keras' operation nodes, ahead of any same-named one
        custom_objects = {**(custom_objects or {}), "KerasOperation": keras_ops.KerasOperation}
    check_config(config, custom_objects, safe_mode, source)
    cls = None
    for name in (config.get("registered_name"), config.get("class_name")):
        if name:
            cls = _resolve(name, custom_objects)
            if cls is not None:
                break
    with custom_object_scope(custom_objects or {}):
        model = _call_from_config(cls, config.get("config") or {}, custom_objects)
        build_config = config.get("build_config")
        if build_config and not getattr(model, "built", False):
            builder = getattr(model, "build_from_config", None)
            if callable(builder):
                builder(build_config)
        compile_config = config.get("compile_config")
        if compile and compile_config:
            compile_model(model, compile_config, custom_objects)
    return model


def compile_model(model: Any, compile_config: dict, custom_objects: dict | None = None) -> None:
    """Compiles ``model`` from a compile config (Keras 3's, or Keras 2's training_config)."""
    cfg = dict(compile_config)
    if "optimizer_config" in cfg and "optimizer" not in cfg:  # Keras 2 / legacy h5
        cfg["optimizer"] = cfg.pop("optimizer_config")
    cfg.pop("optimizer_config", None)
    fn = getattr(model, "compile_from_config", None)
    if callable(fn):
        fn(cfg)
        return
    import kiln.optimizers

    opt = cfg.get("optimizer")
    if isinstance(opt, dict):
        cfg["optimizer"] = kiln.optimizers.get(opt)
    keep = {k: v for k, v in cfg.items() if k in ("optimizer", "loss", "metrics",
                                                  "loss_weights", "weighted_metrics")}
    model.compile(**keep)
