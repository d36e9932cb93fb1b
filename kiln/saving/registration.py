"""Class resolution for loading: :func:`resolve_class`, kiln's one lookup of a class named in a
saved config, on top of the one registry (:mod:`kiln.registry`, re-exported here under the
Keras names: ``register_serializable``, ``custom_object_scope`` ...). Nothing named in a file
is ever imported.
"""

from __future__ import annotations

from typing import Any

from kiln.registry import (
    custom_object_scope,
    get_builtin,
    get_registered_name,
    get_registered_object,
    register_builtin,
    register_serializable,
    registered_objects,
)

__all__ = ["custom_object_scope", "get_registered_name", "get_registered_object",
           "register_builtin", "register_serializable", "registered_objects", "resolve_class",
           "register_keras_serializable", "get_custom_objects"]

#: Keras' name of :func:`register_serializable` (``@register_keras_serializable(package=...)``)
register_keras_serializable = register_serializable


def get_custom_objects() -> dict[str, Any]:
    """Keras' ``get_custom_objects()``: the live global table of registered objects (keys
    ``"package>name"``). An entry added to it (``get_custom_objects()["MyLayer"] = MyLayer``)
    is found by that name when loading, as in Keras.

    Returns:
        The registry's own dict (not a copy).
    """
    from kiln import registry

    return registry.custom_objects_table()


def _all_subclasses(base: type) -> list[type]:
    out, stack = [], [base]
    while stack:
        c = stack.pop()
        for sub in c.__subclasses__():
            out.append(sub)
            stack.append(sub)
    return out


def resolve_class(name: str, custom_objects: dict[str, Any] | None = None) -> type:
    """The class a config names: kiln's one class lookup (model configs, layers inside them,
    ``from_config`` of containers).

    Looks, in order, in ``custom_objects``, the active :func:`custom_object_scope` blocks,
    the classes registered with :func:`register_serializable` (``"package>name"``, or a
    bare name registered in exactly one package), kiln's built-in classes (``kiln.layers``
    and :func:`register_builtin`), and last any subclass of ``Layer`` defined so far, by
    class name (so a user layer reloads without registration once its module is imported;
    when several share the name, the last definition wins).

    Args:
        name: ``"ClassName"`` or ``"package>ClassName"``.
        custom_objects: ``{"ClassName": cls}`` passed by the caller (``load_model``).

    Returns:
        The class.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: naming the unknown class and how to make it known.

    Example:
        >>> resolve_class("Dense")
        <class 'kiln.layers.core.Dense'>
    """
    if not isinstance(name, str):
        raise TypeError(f"resolve_class: expected a class name, received {name!r}")
    candidates = [name] + ([name.split(">")[-1]] if ">" in name else [])
    for key in candidates:  # "package>Name" registered elsewhere: its bare name
        found = get_registered_object(key, custom_objects)
        if found is not None:
            return found
    import kiln.layers

    for key in candidates:
        builtin = get_builtin(key)
        if builtin is not None:
            return builtin
        obj = getattr(kiln.layers, key, None)
        if isinstance(obj, type) and issubclass(obj, kiln.layers.Layer):
            return obj
    defined = [c for c in _all_subclasses(kiln.layers.Layer) if c.__name__ in candidates]
    if defined:
        return defined[-1]
    raise ValueError(f"Unknown layer or model class {name!r}. Pass it in "
                     f"custom_objects={{'{candidates[-1]}': {candidates[-1]}}}, register it "
                     "with kiln.saving.register_serializable(), or import the module that "
                     "defines it before loading")
