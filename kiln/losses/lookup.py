"""Finding losses by name: :func:`get`, :func:`serialize`, :func:`deserialize`, and the
questions the trainer asks about a loss (``is_sparse_categorical`` ...)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from kiln.losses import (
    focal,
    generalized,
    hinges,
    metric_learning,
    overlap,
    probabilistic,
    regression,
    sequence,
)
from kiln.losses.base import Loss, LossFunctionWrapper
from kiln.registry import get_registered_object


def defined_in(modules: tuple, keep: Callable[[Any], bool], own: bool = True) -> dict[str, Any]:
    """The public objects of the family ``modules`` that ``keep`` accepts, by name: the
    built-in tables below, with no second list of names to maintain. With ``own``, only what a
    module defines itself (not what it imports, like the helper ``eager``)."""
    return {name: obj for m in modules for name, obj in vars(m).items()
            if not name.startswith("_") and keep(obj)
            and (not own or getattr(obj, "__module__", None) == m.__name__)}


FAMILIES = (regression, probabilistic, hinges, focal, overlap, generalized, sequence,
            metric_learning)
_FUNCTIONS: dict[str, Callable] = defined_in(FAMILIES, inspect.isfunction)
_ALIASES: dict[str, Callable] = {alias: _FUNCTIONS[name] for alias, name in {
    "mse": "mean_squared_error", "MSE": "mean_squared_error",
    "mae": "mean_absolute_error", "MAE": "mean_absolute_error",
    "mape": "mean_absolute_percentage_error", "MAPE": "mean_absolute_percentage_error",
    "msle": "mean_squared_logarithmic_error", "MSLE": "mean_squared_logarithmic_error",
    "kld": "kl_divergence", "KLD": "kl_divergence", "kullback_leibler_divergence": "kl_divergence",
    "logcosh": "log_cosh", "huber_loss": "huber"}.items()}
_CLASSES: dict[str, type[Loss]] = {
    **defined_in(FAMILIES, lambda o: isinstance(o, type) and issubclass(o, Loss)
                 and o is not Loss, own=False),
    "LossFunctionWrapper": LossFunctionWrapper}


def _valid_names() -> list[str]:
    return sorted(_FUNCTIONS) + sorted(_ALIASES) + sorted(_CLASSES)


def serialize(loss: Any) -> Any:
    """A JSON-able form: a name for built-in functions, ``{"class_name", "config"}`` for loss
    objects."""
    if loss is None:
        return None
    if isinstance(loss, str):
        return loss
    if isinstance(loss, Loss):
        return {"module": "kiln.losses" if type(loss).__name__ in _CLASSES else
                type(loss).__module__, "class_name": type(loss).__name__,
                "config": loss.get_config(), "registered_name": None}
    name = getattr(loss, "__name__", None)
    if name in _FUNCTIONS and _FUNCTIONS[name] is loss:
        return name
    return name or repr(loss)


def find_class(name: str, classes: dict[str, type], base: type,
               custom_objects: dict | None, what: str) -> type:
    """The class a config names: ``custom_objects`` and registered classes (the one registry,
    :mod:`kiln.registry`: ``register_serializable``, ``custom_object_scope``), then kiln's own
    ``classes``, then any subclass of ``base`` defined so far (the last definition wins)."""
    candidates = [name] + ([name.split(">")[-1]] if ">" in name else [])
    for key in candidates:
        registered = get_registered_object(key, custom_objects)
        if registered is not None:
            return registered
        if key in classes:
            return classes[key]
    stack, found = [base], []
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__name__ in candidates:
                found.append(sub)
    if found:
        return found[-1]
    raise ValueError(f"Unknown {what} class {name!r}. Pass it in custom_objects="
                     f"{{'{candidates[-1]}': {candidates[-1]}}}, or import the module that "
                     "defines it before loading")


def deserialize(name: Any, custom_objects: dict | None = None) -> Any:
    """Inverse of :func:`serialize` (``name``: a name or a serialized config dict)."""
    config = name
    if isinstance(config, str):
        if custom_objects and config in custom_objects:
            return custom_objects[config]
        return get(config)
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError(f"losses.deserialize: could not interpret {config!r}")
    cls = find_class(config.get("registered_name") or config["class_name"], _CLASSES, Loss,
                     custom_objects, "loss")
    return cls.from_config(dict(config.get("config", {})))


def get(identifier: Any) -> Any:
    """Resolves a loss.

    Args:
        identifier: None, a name (``"mse"``, ``"categorical_crossentropy"``,
            ``"MeanSquaredError"`` ...), a config dict, a :class:`Loss` or any callable
            ``fn(y_true, y_pred)`` built with ``kiln.ops``.

    Returns:
        A function, a Loss object, or None.

    Raises:
        ValueError: for an unknown name (listing the valid ones); TypeError for other types.
    """
    if identifier is None:
        return None
    if isinstance(identifier, str):
        if identifier in _FUNCTIONS:
            return _FUNCTIONS[identifier]
        if identifier in _ALIASES:
            return _ALIASES[identifier]
        if identifier in _CLASSES and identifier != "LossFunctionWrapper":
            return _CLASSES[identifier]()
        raise ValueError(f"Unknown loss {identifier!r}. Valid names: "
                         f"{', '.join(n for n in _valid_names() if n != 'LossFunctionWrapper')}")
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, Loss) or callable(identifier):
        return identifier
    raise TypeError(f"Could not interpret loss identifier {identifier!r} "
                    f"({type(identifier).__name__}); pass a name, a Loss or a callable "
                    "fn(y_true, y_pred)")


def as_loss_object(identifier: Any) -> Loss | None:
    """Like :func:`get`, but functions are wrapped into a :class:`LossFunctionWrapper` (so they
    apply sample weights and the default reduction)."""
    obj = get(identifier)
    if obj is None or isinstance(obj, Loss):
        return obj
    if isinstance(obj, type) and issubclass(obj, Loss):
        return obj()
    return LossFunctionWrapper(obj, name=identifier if isinstance(identifier, str) else None)


def is_sparse_categorical(loss: Any) -> bool:
    """Whether ``loss`` (a function or a Loss object) takes integer class labels."""
    fn = getattr(loss, "fn", loss)
    return fn is probabilistic.sparse_categorical_crossentropy or \
        fn is generalized.categorical_generalized_cross_entropy


def target_rule(loss: Any) -> str | None:
    """What a loss expects of its targets, for the trainer's shape check: ``"sparse"``
    (integer class labels: the prediction's shape without its last axis, or with a last axis
    of 1), ``"same"`` (the prediction's shape; a trailing axis of 1 may be added or dropped),
    or None for a loss kiln does not define (a custom loss may read targets of any shape)."""
    fn = getattr(loss, "fn", loss)
    if is_sparse_categorical(fn) or fn is metric_learning.circle:  # labels of the embeddings
        return "sparse"
    if fn is sequence.ctc:  # label sequences (batch, max_length) of (batch, time, classes)
        return None
    builtin = any(fn is f for f in _FUNCTIONS.values())
    return "same" if builtin else None


def is_binary_crossentropy(loss: Any) -> bool:
    return getattr(loss, "fn", loss) is probabilistic.binary_crossentropy


def is_categorical_crossentropy(loss: Any) -> bool:
    return getattr(loss, "fn", loss) is probabilistic.categorical_crossentropy
