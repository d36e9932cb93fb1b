"""Models: ``Model`` (functional or subclassed), ``Sequential``, and their training API.

Example:
    >>> model = kiln.Sequential([kiln.Input((4,)), kiln.layers.Dense(3, "softmax")])
    >>> model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    >>> history = model.fit(x, y, epochs=5, validation_split=0.2)
"""

from __future__ import annotations

import json
from typing import Any

from kiln import saving
from kiln.models.custom_steps import GradientTape, StepTraceError, unpack_x_y_sample_weight
from kiln.models.functional import Functional
from kiln.models.model import Model, deserialize_layer
from kiln.models.sequential import Sequential


def load_model(filepath: Any, custom_objects: dict | None = None, compile: bool = True,
               safe_mode: bool = True) -> Model:
    """Loads a model saved by ``model.save`` (or by Keras); see ``kiln.saving``."""
    return saving.load_model(filepath, custom_objects=custom_objects, compile=compile,
                             safe_mode=safe_mode)


def save_model(model: Model, filepath: Any, overwrite: bool = True, zipped: bool | None = None,
               **kwargs: Any) -> None:
    """Saves ``model`` (Keras' ``keras.models.save_model``, which is ``model.save``): a
    ``.keras`` zip or kiln's ``.h5``; see ``kiln.saving.save_model``."""
    save = getattr(model, "save", None)
    if not callable(save):
        raise TypeError(f"save_model: expected a kiln model, received {type(model).__name__}")
    save(filepath, overwrite, zipped, **kwargs)


def model_from_config(config: dict, custom_objects: dict | None = None) -> Model:
    """Rebuilds a model from ``{"class_name", "config"}`` (Keras' layout)."""
    return deserialize_layer(config, custom_objects)


def model_from_json(json_string: str, custom_objects: dict | None = None) -> Model:
    """Rebuilds a model from :meth:`Model.to_json` (fresh weights)."""
    return model_from_config(json.loads(json_string), custom_objects)


def clone_model(model: Model, input_tensors: Any = None, clone_function: Any = None,
                call_function: Any = None, recursive: bool = False, *,
                custom_objects: dict | None = None, **kwargs: Any) -> Model:
    """A model of the same architecture with freshly initialized weights (Keras'
    ``clone_model`` without ``clone_function``/``input_tensors``/``call_function``, which
    raise NotImplementedError when given)."""
    given = {"input_tensors": input_tensors, "clone_function": clone_function,
             "call_function": call_function}
    for key, value in given.items():
        if value is not None:
            raise NotImplementedError(f"clone_model: {key} is not supported by kiln")
    if kwargs:
        raise TypeError(f"clone_model: unexpected keyword argument(s) {sorted(kwargs)}")
    return model_from_config(json.loads(model.to_json()), custom_objects)


__all__ = ["Model", "Sequential", "Functional", "load_model", "save_model", "model_from_config",
           "model_from_json", "clone_model",
           "GradientTape", "StepTraceError", "unpack_x_y_sample_weight"]
