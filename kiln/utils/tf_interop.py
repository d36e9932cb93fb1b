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
from typing import Any

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


def _tf_dtype(tf: Any, a: Any) -> Any:
    import numpy as np
    a = np.asarray(a)
    if a.dtype == object or a.dtype.kind in "US":
        return tf.string
    return tf.as_dtype(a.dtype)


def to_tf_dataset(ds: Any, batched: bool = True, **attributes: Any) -> Any:
    """A ``tf.data.Dataset`` of the elements of kiln's re-iterable dataset ``ds`` (read again
    at every iteration, so a shuffling source reshuffles every epoch), with the cardinality
    ``len(ds)`` and the given attributes (Keras sets ``class_names`` and ``file_paths``).

    Args:
        ds: kiln's dataset (iterable again, with ``len``).
        batched: Whether the elements are batches (their first axis becomes None in the
            element spec).
        **attributes: Set on the returned dataset.
    """
    import tensorflow as tf

    from kiln.utils.dataset_ops import _map_structure

    first = next(iter(ds))

    def spec(a: Any) -> Any:
        import numpy as np
        shape = np.shape(a)
        if batched and shape:
            shape = (None,) + tuple(shape[1:])
        return tf.TensorSpec(shape=shape, dtype=_tf_dtype(tf, a))

    signature = _map_structure(spec, first)
    if isinstance(signature, list):
        signature = tuple(signature)
    out = tf.data.Dataset.from_generator(lambda: iter(ds), output_signature=signature)
    out = out.apply(tf.data.experimental.assert_cardinality(len(ds)))
    for name, value in attributes.items():
        setattr(out, name, value)
    return out


__all__ = ["set_dataset_format", "dataset_format", "tf_available", "is_tf_tensor",
           "to_tf_dataset"]
