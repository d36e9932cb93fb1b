"""TensorFlow interop, all lazy: kiln imports TensorFlow only when it is handed a TF tensor
or asked for a ``tf.data.Dataset``.

* :func:`set_dataset_format` / ``KILN_DATASET`` choose what the dataset utilities
  (``image_dataset_from_directory``, ``text_dataset_from_directory``,
  ``timeseries_dataset_from_array``) return: ``"auto"`` (the default) a ``tf.data.Dataset``
  when TensorFlow is installed, as Keras 3 does, else kiln's :class:`~kiln.utils.Dataset`;
  ``"kiln"`` always kiln's; ``"tf"`` always TensorFlow's (an error without it).
* :func:`is_tf_tensor` says whether a value is a TensorFlow tensor (eager, or symbolic inside
  ``tf.function`` / ``tf.data.Dataset.map``) without importing TensorFlow.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from kiln.layers.preprocessing.tf_data import is_tf_tensor

_FORMATS = ("auto", "kiln", "tf")
_format: list[str | None] = [None]


def set_dataset_format(fmt: str) -> None:
    """What the dataset utilities return: ``"auto"``, ``"kiln"`` or ``"tf"`` (see the module
    docstring). Overrides the ``KILN_DATASET`` environment variable.

    Example:
        >>> kiln.utils.set_dataset_format("kiln")  # kiln's datasets even with TensorFlow
    """
    if fmt not in _FORMATS:
        raise ValueError(f"set_dataset_format: format must be one of {_FORMATS}, received "
                         f"{fmt!r}")
    _format[0] = fmt


def dataset_format() -> str:
    """``"kiln"`` or ``"tf"``: what the dataset utilities return now."""
    fmt = _format[0] or os.environ.get("KILN_DATASET", "auto").strip().lower() or "auto"
    if fmt not in _FORMATS:
        raise ValueError(f"KILN_DATASET must be one of {_FORMATS}, received {fmt!r}")
    if fmt == "auto":
        return "tf" if tf_available() else "kiln"
    if fmt == "tf" and not tf_available():
        raise ImportError("kiln: a tf.data.Dataset was asked for (KILN_DATASET='tf' or "
                          "set_dataset_format('tf')) but TensorFlow is not installed")
    return fmt


def tf_available() -> bool:
    """Whether TensorFlow can be imported (checked without importing it)."""
    if "tensorflow" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


__all__ = ["set_dataset_format", "dataset_format", "tf_available", "is_tf_tensor"]
