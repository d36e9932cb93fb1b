"""Optimizers (Keras 3 names, arguments and update rules) whose updates are graph nodes.

``get(identifier)`` resolves a name (``"adam"``), a config dict or an instance;
``serialize`` / ``deserialize`` convert to and from JSON-able dicts. Learning-rate schedules
live in :mod:`kiln.optimizers.schedules`.

Example:
    >>> opt = kiln.optimizers.get("adam")
    >>> opt = kiln.optimizers.SGD(0.1, momentum=0.9, clipnorm=1.0)
"""

from __future__ import annotations

from typing import Any

from kiln.optimizers import schedules
from kiln.optimizers.adadelta import Adadelta
from kiln.optimizers.adafactor import Adafactor
from kiln.optimizers.adagrad import Adagrad
from kiln.optimizers.adam import Adam, AdamW
from kiln.optimizers.adamax import Adamax
from kiln.optimizers.base import Optimizer
from kiln.optimizers.clipping import clip_by_global_norm, global_norm
from kiln.optimizers.ftrl import Ftrl
from kiln.optimizers.lamb import Lamb
from kiln.optimizers.lion import Lion
from kiln.optimizers.loss_scale_optimizer import LossScaleOptimizer
from kiln.optimizers.multi_optimizer import MultiOptimizer, OptimizerMap
from kiln.optimizers.muon import Muon
from kiln.optimizers.nadam import Nadam
from kiln.optimizers.rmsprop import RMSprop
from kiln.optimizers.schedule_free_adamw import ScheduleFreeAdamW
from kiln.optimizers.schedules import LearningRateSchedule
from kiln.optimizers.sgd import SGD

_BUILTINS: dict[str, type[Optimizer]] = {
    c.__name__.lower(): c for c in (SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax,
                                    Nadam, Lion, Adafactor, Ftrl, Lamb, Muon,
                                    ScheduleFreeAdamW, LossScaleOptimizer, MultiOptimizer)}


def serialize(optimizer: Optimizer) -> dict[str, Any]:
    """A JSON-able dict ``{"module", "class_name", "config", "registered_name"}`` (Keras's
    layout).

    Example:
        >>> serialize(Adam())["class_name"]
        'Adam'
    """
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"optimizers.serialize: expected an Optimizer, received "
                        f"{type(optimizer).__name__}")
    cls = type(optimizer)
    builtin = _BUILTINS.get(cls.__name__.lower()) is cls
    return {"module": "kiln.optimizers" if builtin else cls.__module__,
            "class_name": cls.__name__, "config": optimizer.get_config(),
            "registered_name": None if builtin else cls.__name__}


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None
                ) -> Optimizer:
    """Rebuilds an optimizer from :func:`serialize`'s output (Keras configs work too).

    Args:
        config: ``{"class_name": ..., "config": {...}}``.
        custom_objects: optional ``{name: class}`` for user-defined optimizers.
    """
    if not isinstance(config, dict) or "class_name" not in config:
        raise TypeError("optimizers.deserialize: expected a dict with 'class_name' and "
                        f"'config', received {config!r}")
    name = config["class_name"]
    custom = custom_objects or {}
    cls = custom.get(name) or custom.get(config.get("registered_name") or "")
    if cls is None:
        cls = _BUILTINS.get(str(name).lower())
    if cls is None:
        raise ValueError(f"optimizers.deserialize: unknown optimizer {name!r}; valid names: "
                         f"{', '.join(sorted(_BUILTINS))}")
    return cls.from_config(dict(config.get("config", {})), custom_objects)


def get(identifier: Any) -> Optimizer:
    """Resolves an optimizer.

    Args:
        identifier: a name (``"sgd"``, ``"adam"``, ``"adamw"``, ``"rmsprop"``,
            ``"adagrad"``, ``"adadelta"``, ``"adamax"``, ``"nadam"``, ``"lion"``,
            ``"adafactor"``, ``"ftrl"``, ``"lamb"``, ``"muon"``, ``"schedulefreeadamw"``;
            case-insensitive) giving the optimizer with default arguments, a config dict
            ``{"class_name": ..., "config": ...}``, or an Optimizer (returned as is).

    Returns:
        An Optimizer.

    Raises:
        ValueError: for an unknown name (the message lists the valid ones).
        TypeError: for any other kind of identifier.

    Example:
        >>> kiln.optimizers.get("Adam").learning_rate
        0.0010000000474974513
    """
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        cls = _BUILTINS.get(identifier.lower())
        if cls in (LossScaleOptimizer, MultiOptimizer):
            raise ValueError(f"optimizers.get: {identifier!r} wraps other optimizers and "
                             "cannot be made from its name alone; construct it")
        if cls is None:
            raise ValueError(f"optimizers.get: unknown optimizer {identifier!r}; valid names: "
                             f"{', '.join(sorted(_BUILTINS))}")
        return cls()
    raise TypeError(f"optimizers.get: could not interpret optimizer identifier {identifier!r} "
                    f"({type(identifier).__name__}); pass a name, a config dict or an "
                    "Optimizer")


__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "Nadam", "Lion", "Adafactor", "Ftrl", "Lamb", "Muon", "ScheduleFreeAdamW",
           "LossScaleOptimizer", "MultiOptimizer", "OptimizerMap", "LearningRateSchedule",
           "schedules", "get", "serialize", "deserialize", "global_norm", "clip_by_global_norm"]
