"""Saving and loading kiln models: weights, whole models, training checkpoints, Keras files.

- :func:`save_weights` / :func:`load_weights`: HDF5 weights (kiln's layout; reads Keras 3
  ``.weights.h5``/``.keras`` and legacy Keras ``.h5`` too). Loading is all or nothing.
- :func:`save_model` / :func:`load_model`: architecture + weights + compile config + optimizer
  state; ``.keras`` is Keras 3's zip layout, ``.h5`` kiln's HDF5 layout.
- :func:`save_checkpoint` / :func:`load_checkpoint`: everything training needs to resume.
- :func:`register_serializable`: makes custom classes loadable by name.
- :func:`atomic_write`: the one way kiln writes files.

The file layouts are documented in ``docs/formats.md``.
"""

from kiln.saving.api import (
    FORMAT_VERSION,
    load_checkpoint,
    load_model,
    load_weights,
    save_checkpoint,
    save_model,
    save_weights,
)
from kiln.saving.atomic import atomic_path, atomic_write
from kiln.saving.h5util import FileFormatError
from kiln.saving.registration import (
    custom_object_scope,
    get_registered_name,
    get_registered_object,
    register_serializable,
)
from kiln.saving.serialization import deserialize_model, serialize, serialize_model

__all__ = [
    "FORMAT_VERSION", "FileFormatError",
    "save_weights", "load_weights", "save_model", "load_model",
    "save_checkpoint", "load_checkpoint",
    "atomic_write", "atomic_path",
    "register_serializable", "get_registered_name", "get_registered_object",
    "custom_object_scope",
    "serialize", "serialize_model", "deserialize_model",
]
