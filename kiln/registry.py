"""kiln's one class registry: the tables every part of kiln consults to turn a class name in
a saved config into a class (docs/architecture.md, "The layers of the house").

It sits at the bottom of the package order (it imports nothing from kiln), so losses, metrics,
optimizers, saving and models all consult the same tables:

* user classes, registered with ``@kiln.saving.register_serializable`` (``"package>name"``);
* ``custom_objects`` and :func:`custom_object_scope` blocks;
* kiln's own classes that packages declare with :func:`register_builtin` (``Sequential``,
  ``Model`` ...).

:func:`get_registered_object` answers from these tables; ``kiln.saving.resolve_class`` adds
kiln's layers and Layer subclasses defined so far. Nothing named in a file is ever imported.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

# User classes: "Package>Name" -> class, and class -> "Package>Name".
_REGISTRY: dict[str, Any] = {}
_NAMES: dict[Any, str] = {}
# kiln's own classes that kiln.layers does not export (register_builtin): name -> class.
_BUILTINS: dict[str, type] = {}
_scope = threading.local()


def register_serializable(package: str = "Custom", name: str | None = None) -> Any:
    """Class decorator: makes a custom layer, model, loss, metric, optimizer or schedule
    loadable by name (``"package>name"``) without ``custom_objects``.

    Args:
        package: a namespace for the name (default ``"Custom"``).
        name: the name to register (default: the class name).

    Returns:
        The decorator; it returns the class unchanged.

    Example:
        >>> @kiln.saving.register_serializable(package="MyProject")
        ... class Scale(kiln.layers.Layer):
        ...     def __init__(self, factor=2.0, **kwargs):
        ...         super().__init__(**kwargs)
        ...         self.factor = factor
        ...     def get_config(self):
        ...         return {**super().get_config(), "factor": self.factor}
    """
    if not isinstance(package, str) or not package or ">" in package:
        raise ValueError(f"register_serializable: `package` must be a non-empty string "
                         f"without '>', received {package!r}")

    def decorator(obj: Any) -> Any:
        obj_name = name if name is not None else getattr(obj, "__name__", None)
        if not obj_name:
            raise ValueError(f"register_serializable: cannot find a name for {obj!r}; "
                             "pass name=...")
        key = f"{package}>{obj_name}"
        previous = _REGISTRY.get(key)
        if previous is not None and previous is not obj and getattr(
                previous, "__qualname__", None) != getattr(obj, "__qualname__", None):
            raise ValueError(f"register_serializable: {key!r} is already registered to "
                             f"{previous!r}")
        _REGISTRY[key] = obj
        _NAMES[obj] = key
        return obj

    return decorator


def register_builtin(name: str, cls: type) -> None:
    """Makes one of kiln's own classes known to ``kiln.saving.resolve_class`` under ``name``.

    kiln's packages above ``saving`` call it when they are imported (``kiln.models``:
    ``Sequential``, ``Functional``, ``Model``); layers need not, they are found in
    ``kiln.layers``. Unlike :func:`register_serializable` it is not for user classes:
    :func:`registered_objects` does not list these, and saved configs name them without a
    ``registered_name``.

    Args:
        name: the class name as configs write it (``"class_name"``).
        cls: the class.
    """
    if not isinstance(name, str) or not name or not isinstance(cls, type):
        raise TypeError(f"register_builtin: expected a name and a class, received {name!r}, "
                        f"{cls!r}")
    _BUILTINS[name] = cls


def get_builtin(name: str) -> type | None:
    """The class of kiln's registered under ``name`` by :func:`register_builtin`, or None."""
    return _BUILTINS.get(name)


def get_registered_name(obj: Any) -> str | None:
    """``"package>name"`` of a registered class (or of an instance's class), else None."""
    cls = obj if isinstance(obj, type) else type(obj)
    return _NAMES.get(cls) or _NAMES.get(obj)


def get_registered_object(name: str, custom_objects: dict | None = None,
                          module_objects: dict | None = None) -> Any:
    """The class registered (or passed in ``custom_objects``, or in an active
    :func:`custom_object_scope`, or, last, in ``module_objects``) under ``name``; None when
    unknown.

    ``name`` may be ``"package>name"`` or the bare ``name``; a bare name matches a
    registration in any package when exactly one exists.
    """
    for table in (custom_objects or {}), *reversed(getattr(_scope, "stack", [])):
        if name in table:
            return table[name]
        if ">" in name and name.split(">", 1)[1] in table:
            return table[name.split(">", 1)[1]]
    if name in _REGISTRY:
        return _REGISTRY[name]
    if ">" not in name:
        hits = [cls for key, cls in _REGISTRY.items() if key.split(">", 1)[1] == name]
        if len(hits) == 1:
            return hits[0]
    if module_objects and name in module_objects:
        return module_objects[name]
    return None


@contextlib.contextmanager
def custom_object_scope(custom_objects: dict) -> Iterator[None]:
    """Within the ``with`` block, ``custom_objects`` resolve like registered classes."""
    stack = getattr(_scope, "stack", None)
    if stack is None:
        stack = _scope.stack = []
    stack.append(dict(custom_objects))
    try:
        yield
    finally:
        stack.pop()


def registered_objects() -> dict[str, Any]:
    """A copy of the registry (``"package>name"`` -> class)."""
    return dict(_REGISTRY)


def custom_objects_table() -> dict[str, Any]:
    """The live registry table (Keras' ``get_custom_objects``: writes to it register)."""
    return _REGISTRY


def serialize_object(obj: Any, base: type, classes: dict[str, type], kind: str) -> dict | None:
    """Keras' ``{"module", "class_name", "config", "registered_name"}`` of ``obj`` (an
    instance of ``base``; ``classes``: the built-ins by name; ``kind``: "constraint",
    "regularizer" ... for the module name and errors). None for None."""
    if obj is None:
        return None
    if not isinstance(obj, base):
        raise TypeError(f"{kind}s.serialize: expected a {base.__name__}, received {obj!r} "
                        "(plain functions cannot be stored in a config; subclass "
                        f"kiln.{kind}s.{base.__name__})")
    cls = type(obj)
    builtin = classes.get(cls.__name__) is cls
    return {"module": f"keras.{kind}s" if builtin else cls.__module__,
            "class_name": cls.__name__, "config": obj.get_config(),
            "registered_name": None if builtin else cls.__name__}


def deserialize_object(config: Any, strings: dict[str, Any], classes: dict[str, type],
                       kind: str, custom_objects: dict | None = None) -> Any:
    """Inverse of :func:`serialize_object`; also a name from ``strings`` (name -> factory).
    Classes come from ``custom_objects``, the registry or ``classes``, never from a module
    named in the config."""
    def unknown(name: Any) -> ValueError:
        return ValueError(f"Unknown {kind} {name!r}; valid names: {', '.join(sorted(strings))}")

    if config is None:
        return None
    if isinstance(config, str):
        if config not in strings:
            raise unknown(config)
        return strings[config]()
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"{kind}s.deserialize: expected a dict with 'class_name', received "
                        f"{config!r}")
    name = config.get("registered_name") or config["class_name"]
    cls = get_registered_object(name, custom_objects) or classes.get(config["class_name"])
    if cls is None:
        raise unknown(name)
    return cls.from_config(dict(config.get("config") or {}))
