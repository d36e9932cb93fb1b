"""Saving and loading kiln models: weights, whole models, training checkpoints, Keras files.

- :func:`save_weights` / :func:`load_weights`: HDF5 weights (kiln's layout; reads Keras 3
  ``.weights.h5``/``.keras`` and legacy Keras ``.h5`` too). Loading is all or nothing.
- :func:`save_model` / :func:`load_model`: architecture + weights + compile config + optimizer
  state; ``.keras`` is Keras 3's zip layout, ``.h5`` kiln's HDF5 layout.
- :func:`save_checkpoint` / :func:`load_checkpoint`: everything training needs to resume.
- :func:`register_serializable`: makes custom classes loadable by name;
  :func:`resolve_class` is kiln's one lookup from a class name to a class.
- :func:`atomic_write`: the one way kiln writes files.

The file layouts are documented in ``docs/formats.md``.
"""

from typing import Any

from kiln.saving.api import (
    FORMAT_VERSION,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    save_model,
    save_weights,
)
from kiln.saving.atomic import atomic_path, atomic_write
from kiln.saving.h5util import FileFormatError
from kiln.saving.keras_objects import CustomObjectScope, KerasFileEditor, serialize_keras_object
from kiln.saving.registration import (
    custom_object_scope,
    get_custom_objects,
    get_registered_name,
    get_registered_object,
    register_keras_serializable,
    register_serializable,
    resolve_class,
)
from kiln.saving.serialization import serialize, serialize_model


def __getattr__(name: str) -> Any:
    # load_model / deserialize_model rebuild models, whose classes (Sequential, Functional,
    # Model) kiln.models registers with register_builtin when it is imported. saving sits
    # below models, so it imports them only here, lazily, when these two are asked for (the
    # one upward edge of saving allowed by tests/test_layering.py).
    if name in ("load_model", "deserialize_model"):
        import kiln.models  # noqa: F401
        from kiln.saving import api

        return getattr(api, name)
    if name == "deserialize_keras_object":  # may rebuild models too
        import kiln.models  # noqa: F401, F811
        from kiln.saving import keras_objects

        return keras_objects.deserialize_keras_object
    raise AttributeError(f"module 'kiln.saving' has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION", "FileFormatError",
    "save_weights", "load_weights", "save_model", "load_model",
    "save_checkpoint", "load_checkpoint",
    "atomic_write", "atomic_path",
    "register_serializable", "get_registered_name", "get_registered_object",
    "resolve_class", "custom_object_scope", "register_keras_serializable", "get_custom_objects",
    "serialize", "serialize_model", "deserialize_model",
    "CustomObjectScope", "KerasFileEditor", "serialize_keras_object", "deserialize_keras_object",
]
