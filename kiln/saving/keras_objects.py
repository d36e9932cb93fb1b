"""Keras' generic object (de)serialization: ``serialize_keras_object`` /
``deserialize_keras_object`` (Keras' dict format ``{"module", "class_name", "config",
"registered_name"}`` for layers, models, losses, metrics, optimizers, schedules, initializers,
regularizers, constraints and functions), ``CustomObjectScope`` and ``KerasFileEditor``.

Deserializing never imports a module named in the config and never runs stored code: classes
come from ``custom_objects``, an active :class:`CustomObjectScope`, the registry
(``@register_keras_serializable``) or kiln's own namespaces (a fixed list); a serialized
Python lambda is refused whatever ``safe_mode`` says.
"""

from __future__ import annotations

import importlib
import inspect
import types
from typing import Any

import numpy as np

from kiln import registry
from kiln.saving.serialization import serialize, serialize_model, to_keras_modules

#: Keras module -> kiln module that holds the same public classes/functions (fixed list).
_NAMESPACES = {
    "keras.layers": "kiln.layers", "keras.losses": "kiln.losses",
    "keras.metrics": "kiln.metrics", "keras.optimizers": "kiln.optimizers",
    "keras.optimizers.schedules": "kiln.optimizers.schedules",
    "keras.initializers": "kiln.initializers", "keras.regularizers": "kiln.regularizers",
    "keras.constraints": "kiln.constraints", "keras.activations": "kiln.activations",
}
#: where a function serialized with module "builtins" is looked for (Keras' BUILTIN_MODULES)
_FUNCTION_MODULES = ("kiln.activations", "kiln.constraints", "kiln.initializers",
                     "kiln.losses", "kiln.metrics", "kiln.optimizers", "kiln.regularizers")
_PLAIN = (str, int, float, bool)


class CustomObjectScope:
    """Within ``with CustomObjectScope({"MyLayer": MyLayer}):``, the names resolve to the
    objects when deserializing (Keras' ``keras.saving.CustomObjectScope``; also
    ``custom_object_scope``). Scopes nest; the innermost wins.

    Example:
        >>> with kiln.utils.custom_object_scope({"MyLayer": MyLayer}):
        ...     layer = kiln.utils.deserialize_keras_object(config)
    """

    def __init__(self, custom_objects: Any):
        if isinstance(custom_objects, list | tuple):  # Keras 2 accepted several dicts
            merged: dict = {}
            for d in custom_objects:
                merged.update(d or {})
            custom_objects = merged
        if not isinstance(custom_objects, dict):
            raise TypeError("CustomObjectScope: expected a dict {name: object}, received "
                            f"{type(custom_objects).__name__} {custom_objects!r}")
        self.custom_objects = dict(custom_objects)
        self._cm: Any = None

    def __enter__(self) -> CustomObjectScope:
        self._cm = registry.custom_object_scope(self.custom_objects)
        self._cm.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        cm, self._cm = self._cm, None
        cm.__exit__(*exc)


custom_object_scope = CustomObjectScope


def _is_kiln(obj: Any) -> bool:
    return (getattr(obj, "__module__", "") or "").split(".")[0] == "kiln"


def _function_entry(fn: Any) -> dict:
    if fn.__name__ == "<lambda>":
        raise ValueError(f"serialize_keras_object: cannot serialize the lambda {fn!r}: kiln "
                         "never stores Python code in a config; use a named function "
                         "registered with @kiln.saving.register_keras_serializable()")
    registered = registry.get_registered_name(fn)
    if registered is not None:
        return {"module": fn.__module__, "class_name": "function", "config": registered,
                "registered_name": registered}
    if _is_kiln(fn):  # kiln's activations/losses/metrics: Keras' built-in functions
        return {"module": "builtins", "class_name": "function", "config": fn.__name__,
                "registered_name": "function"}
    return {"module": fn.__module__, "class_name": "function", "config": fn.__name__,
            "registered_name": "function"}


def serialize_keras_object(obj: Any) -> Any:
    """``obj`` as Keras' JSON-ready config: ``{"module", "class_name", "config",
    "registered_name"}`` for objects with ``get_config`` (layers, models, losses, metrics,
    optimizers, initializers, regularizers, constraints ...), ``{"class_name": "function",
    ...}`` for functions, ``"__numpy__"``/``"__bytes__"``/``"__slice__"`` entries as Keras
    writes them; lists, dicts and plain values are serialized item by item.

    Raises:
        TypeError: for an object kiln cannot describe (no ``get_config``).
        ValueError: for a lambda (kiln never stores code).

    Example:
        >>> kiln.utils.serialize_keras_object(kiln.regularizers.L2(0.1))
        {'module': 'keras.regularizers', 'class_name': 'L2', 'config': {'l2': 0.1},
         'registered_name': None}
    """
    if obj is None or isinstance(obj, _PLAIN):
        return obj
    if isinstance(obj, bytes):
        return {"class_name": "__bytes__", "config": {"value": obj.decode("utf-8")}}
    if obj is Ellipsis:
        return {"class_name": "__ellipsis__", "config": {}}
    if isinstance(obj, slice):
        return {"class_name": "__slice__",
                "config": {"start": serialize_keras_object(obj.start),
                           "stop": serialize_keras_object(obj.stop),
                           "step": serialize_keras_object(obj.step)}}
    if isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            return obj.item()
        return {"class_name": "__numpy__", "config": {"value": obj.tolist(),
                                                     "dtype": str(obj.dtype)}}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, list | tuple):
        return [serialize_keras_object(v) for v in obj]
    if isinstance(obj, dict):
        return {k: serialize_keras_object(v) for k, v in obj.items()}
    if isinstance(obj, types.FunctionType | types.BuiltinFunctionType):
        return _function_entry(obj)
    if inspect.isclass(obj):
        raise TypeError(f"serialize_keras_object: cannot serialize the class {obj!r}; "
                        "serialize an instance of it")
    if callable(getattr(obj, "get_compile_config", None)) and hasattr(obj, "layers"):
        return serialize_model(obj)
    if not callable(getattr(obj, "get_config", None)):
        raise TypeError(f"serialize_keras_object: cannot serialize {type(obj).__name__} "
                        f"{obj!r}: it has no get_config()")
    out = serialize(obj)
    if out.get("module") == "kiln.constraints" and not out.get("registered_name"):
        out["module"] = "keras.constraints"
    if out.get("module", "").startswith("kiln.optimizers.schedules"):
        out["module"] = "keras.optimizers.schedules"
    out["config"] = _plain(out["config"])
    get_build = getattr(obj, "get_build_config", None)
    if callable(get_build) and getattr(obj, "built", False):
        build = get_build()
        if build is not None:
            out["build_config"] = _plain(build)
    return to_keras_modules(out)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray | np.generic):
        return serialize_keras_object(x)
    return x


def _kiln_namespace(module: str | None) -> Any:
    """kiln's module for a Keras (or kiln) module name in a config, or None; only the fixed
    list in :data:`_NAMESPACES` is ever imported."""
    if not module:
        return None
    name = _NAMESPACES.get(module)
    if name is None and module.startswith("kiln."):
        for kiln_mod in sorted(set(_NAMESPACES.values()), key=len, reverse=True):
            if module == kiln_mod or module.startswith(kiln_mod + "."):
                name = kiln_mod
                break
    if name is None and module.startswith("keras.src."):  # keras.src.losses.losses ...
        part = module.split(".")[2]
        name = _NAMESPACES.get(f"keras.{part}")
    return importlib.import_module(name) if name else None


def _find_function(name: str, registered: Any, module: Any, custom_objects: dict) -> Any:
    found = registry.get_registered_object(name, custom_objects)
    if found is None and isinstance(registered, str) and registered != "function":
        found = registry.get_registered_object(registered, custom_objects)
    if found is not None:
        return found
    spaces = [_kiln_namespace(module)] if module not in (None, "builtins") else []
    if module == "builtins" or not spaces or spaces[0] is None:
        spaces = [importlib.import_module(m) for m in _FUNCTION_MODULES]
    for space in spaces:
        fn = getattr(space, name, None) if space is not None else None
        if callable(fn) and not inspect.isclass(fn):
            return fn
    raise ValueError(f"deserialize_keras_object: unknown function {name!r} (module "
                     f"{module!r}); pass it in custom_objects={{'{name}': {name}}} or register "
                     "it with @kiln.saving.register_keras_serializable()")


def _find_class(class_name: str, registered: Any, module: Any, custom_objects: dict) -> Any:
    for key in (registered, class_name):
        if isinstance(key, str):
            found = registry.get_registered_object(key, custom_objects)
            if found is not None:
                return found
    space = _kiln_namespace(module)
    if space is not None:
        found = getattr(space, class_name, None)
        if inspect.isclass(found):
            return found
    builtin = registry.get_builtin(class_name)  # Model, Sequential, Functional, layers ...
    if builtin is not None:
        return builtin
    if module in ("keras", "keras.models") or str(module).startswith("keras.src.models"):
        from kiln.saving.registration import resolve_class

        return resolve_class(class_name, custom_objects)
    raise ValueError(f"deserialize_keras_object: unknown class {class_name!r} (module "
                     f"{module!r}, registered name {registered!r}); pass it in "
                     f"custom_objects={{'{class_name}': {class_name}}} or register it with "
                     "@kiln.saving.register_keras_serializable()")


def deserialize_keras_object(config: Any, custom_objects: Any = None, safe_mode: bool = True,
                             **kwargs: Any) -> Any:
    """The object a :func:`serialize_keras_object` config (kiln's or Keras') describes.

    Args:
        config: the dict (or list, or plain value) to rebuild.
        custom_objects: ``{name: class_or_function}`` for user objects.
        safe_mode: kept for Keras compatibility; kiln refuses stored code (lambdas) always.
        **kwargs: ``module_objects`` (``{name: object}``, looked up by class name).

    Raises:
        ValueError: an unknown class or function (with the fix), or a serialized lambda.
    """
    module_objects = kwargs.pop("module_objects", None)
    if kwargs:
        raise TypeError(f"deserialize_keras_object: unexpected arguments {sorted(kwargs)}")
    custom = dict(custom_objects or {})
    if module_objects:
        custom = {**module_objects, **custom}

    def again(x: Any) -> Any:
        return deserialize_keras_object(x, custom, safe_mode)

    if config is None:
        return None
    if isinstance(config, str) and custom.get(config) is not None:
        return custom[config]
    if isinstance(config, list | tuple):
        return [again(x) for x in config]
    if isinstance(config, _PLAIN):
        return config
    if not isinstance(config, dict):
        raise TypeError(f"deserialize_keras_object: could not parse config {config!r}")
    if "class_name" not in config or "config" not in config:
        return {k: again(v) for k, v in config.items()}
    class_name = config["class_name"]
    inner = config["config"] if config["config"] is not None else {}
    if class_name in ("__numpy__", "__tensor__"):
        return np.array(inner["value"], dtype=inner["dtype"])
    if class_name == "__bytes__":
        return inner["value"].encode("utf-8")
    if class_name == "__ellipsis__":
        return Ellipsis
    if class_name == "__slice__":
        return slice(again(inner["start"]), again(inner["stop"]), again(inner["step"]))
    if class_name in ("__lambda__", "__unserializable_function__"):
        raise ValueError("deserialize_keras_object: the config holds a serialized Python "
                         "function; kiln never executes stored code (safe_mode="
                         f"{safe_mode}). Pass the function in custom_objects instead")
    if class_name in ("__keras_tensor__", "__typespec__"):
        raise ValueError(f"deserialize_keras_object: a {class_name!r} entry only has a meaning "
                         "inside a functional model's config; deserialize the whole model")
    module = config.get("module")
    registered = config.get("registered_name", class_name)
    if class_name == "function":
        if not isinstance(inner, str):
            raise TypeError("deserialize_keras_object: a function entry needs its name as "
                            f"'config', received {inner!r}")
        return _find_function(inner, registered, module, custom)
    if not isinstance(inner, dict):
        raise TypeError(f"deserialize_keras_object: expected a dict as the config of "
                        f"{class_name!r}, received {type(inner).__name__} {inner!r}")
    if isinstance(inner.get("layers"), list) and (
            "compile_config" in config or "build_config" in config):  # a whole model
        from kiln.saving.serialization import deserialize_model

        return deserialize_model(config, custom or None, compile=True, safe_mode=safe_mode)
    if class_name == "DTypePolicy" and module == "keras":  # kiln keeps policies as names
        return inner.get("name")
    cls = _find_class(class_name, registered, module, custom)
    if isinstance(cls, types.FunctionType):
        return cls
    if not hasattr(cls, "from_config"):
        raise TypeError(f"deserialize_keras_object: {cls!r} has no from_config()")
    with registry.custom_object_scope(custom):
        params = inspect.signature(cls.from_config).parameters
        obj = (cls.from_config(inner, custom_objects=custom or None)
               if "custom_objects" in params else cls.from_config(inner))
        build = config.get("build_config")
        if build and not getattr(obj, "built", True) and callable(
                getattr(obj, "build_from_config", None)):
            obj.build_from_config(build)
    return obj


class KerasFileEditor:
    """Keras' ``KerasFileEditor`` (inspecting and editing the weights of a ``.keras`` file
    without its model) is not available in kiln: constructing it raises."""

    def __init__(self, filepath: Any):
        raise NotImplementedError(
            f"KerasFileEditor({filepath!r}): kiln has no weights editor for .keras files. "
            "Load the model (kiln.saving.load_model), edit its weights with get_weights/"
            "set_weights or layer.assign, and save it again")
