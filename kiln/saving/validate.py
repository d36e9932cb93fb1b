"""Checks of a checkpoint's training state (docs/formats.md §3) before any of it is applied.

Restoring a checkpoint is all or nothing: :func:`kiln.saving.load_checkpoint` (and
``BackupAndRestore``) run every check here first (the position, the learning rate, the RNG
streams, the callbacks' and metrics' states), so a refused file leaves the model, its
optimizer, its random streams and the callbacks as they were. Every error is a
:class:`~kiln.saving.FileFormatError` naming the file and the field.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.saving.h5util import FileFormatError
from kiln.saving.state import (
    _short,
    callback_keys,
    check_generator_state,
    check_int,
    check_rng_state,
)

_FLOAT_WORDS = ("inf", "-inf", "nan")  # how Callback.float_to_json writes non-finite floats
_NUMERIC_DTYPES = frozenset({"bool", "float16", "float32", "float64", "int8", "int16", "int32",
                             "int64", "uint8", "uint16", "uint32", "uint64"})


def check_training(training: Any, source: str) -> dict:
    """Checks a checkpoint's ``training_state`` and returns the position it restores:
    ``{"epoch", "step", "learning_rate", "callbacks", "extra"}``.

    Raises:
        FileFormatError: naming ``source`` and the first invalid field.
    """
    if not isinstance(training, dict):
        raise FileFormatError(f"{source}: training_state should be a dict, received "
                              f"{_short(training)}")
    epoch, step = training.get("epoch", 0), training.get("step", 0)
    check_int(epoch, source, "training_state.epoch")
    check_int(step, source, "training_state.step")
    lr = training.get("learning_rate")
    if lr is not None and not (_is_number(lr) and math.isfinite(lr) and lr >= 0):
        raise FileFormatError(f"{source}: training_state.learning_rate should be a finite, "
                              f"non-negative number or null, received {_short(lr)}")
    states = training.get("callbacks") or {}
    if not isinstance(states, dict) or not all(isinstance(v, dict) for v in states.values()):
        raise FileFormatError(f"{source}: training_state.callbacks should map callback names "
                              f"to dicts, received {_short(states)}")
    extra = training.get("extra") or {}
    if not isinstance(extra, dict):
        raise FileFormatError(f"{source}: training_state.extra should be a dict, received "
                              f"{_short(extra)}")
    if "rng" in training:
        check_rng_state(training["rng"], source)
    return {"epoch": int(epoch), "step": int(step), "learning_rate": lr, "callbacks": states,
            "extra": extra}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ---- callbacks -------------------------------------------------------------------------------
def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _index(value: Any) -> bool:  # a batch index; -1 before the first batch
    return isinstance(value, int) and not isinstance(value, bool) and -1 <= value < 2**63


def _float(value: Any) -> bool:
    return value is None or _is_number(value) or value in _FLOAT_WORDS


def _history(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, list) and all(_float(x) for x in v)
        for k, v in value.items())


def _epochs(value: Any) -> bool:
    return isinstance(value, list) and all(_count(e) for e in value)


def _fields(**checks: Callable[[Any], bool]) -> dict[str, Callable[[Any], bool]]:
    return checks


def _known_schemas() -> list[tuple[type, dict[str, Any]]]:
    """The fields of kiln's stateful callbacks (their ``get_state``) and what each accepts;
    ``"weights"`` is checked against the model."""
    from kiln import callbacks as cbs

    return [
        (cbs.EarlyStopping, _fields(wait=_count, stopped_epoch=_count, best=_float,
                                    best_epoch=_count, best_weights="weights")),
        (cbs.ReduceLROnPlateau, _fields(wait=_count, cooldown_counter=_count, best=_float)),
        (cbs.History, _fields(history=_history, epoch=_epochs)),
        (cbs.ModelCheckpoint, _fields(best=_float, batches_seen_since_last_saving=_count,
                                      last_batch_seen=_index, current_epoch=_count)),
    ]


def check_callback_states(model: Any, callbacks: list[Any], states: dict, source: str) -> None:
    """Checks the saved state of each callback that has one (matched by
    :func:`~kiln.saving.state.callback_keys`): kiln's callbacks field by field, and every
    callback by restoring the state into a copy of it (so a ``set_state`` that would raise
    raises here, before anything is applied)."""
    schemas = _known_schemas()
    for key, cb in zip(callback_keys(callbacks), callbacks):
        if key not in states or not callable(getattr(cb, "set_state", None)):
            continue
        state, field = states[key], f"training_state.callbacks.{key}"
        if not isinstance(state, dict):
            raise FileFormatError(f"{source}: {field} should be a dict, received "
                                  f"{_short(state)}")
        for cls, fields in schemas:
            if isinstance(cb, cls):
                for name, check in fields.items():
                    if name not in state:
                        continue
                    if check == "weights":
                        _check_weights(model, state[name], source, f"{field}.{name}")
                    elif not check(state[name]):
                        raise FileFormatError(f"{source}: {field}.{name} has an invalid value "
                                              f"{_short(state[name])}")
                break
        _trial(cb, state, model, source, field)


def _trial(cb: Any, state: dict, model: Any, source: str, field: str) -> None:
    """Restores ``state`` into a copy of ``cb`` (the model is shared, not copied); a callback
    that cannot be copied is checked by its fields only."""
    try:
        twin = copy.deepcopy(cb, {id(model): model})
    except Exception:  # noqa: BLE001 - a callback holding a file or a lock cannot be copied
        return
    try:
        twin.set_state(copy.deepcopy(state))
    except Exception as exc:  # noqa: BLE001 - any failure of set_state refuses the file
        raise FileFormatError(f"{source}: {field} is not a state {type(cb).__name__} accepts "
                              f"({type(exc).__name__}: {exc})") from exc


def _check_weights(model: Any, value: Any, source: str, field: str) -> None:
    """A list of ``{"dtype", "shape", "data"}`` (Callback.arrays_to_json) with the model's
    weight count and shapes, or null."""
    if value is None:
        return
    shapes = [tuple(int(d) for d in w.shape) for w in getattr(model, "weights", [])]
    if not isinstance(value, list) or len(value) != len(shapes):
        n = len(value) if isinstance(value, list) else _short(value)
        raise FileFormatError(f"{source}: {field} should hold the model's {len(shapes)} "
                              f"weights, received {n}")
    for i, (entry, shape) in enumerate(zip(value, shapes)):
        where = f"{field}[{i}]"
        if not isinstance(entry, dict) or entry.get("dtype") not in _NUMERIC_DTYPES:
            raise FileFormatError(f"{source}: {where} should be {{'dtype', 'shape', 'data'}} "
                                  f"with a numeric dtype, received {_short(entry)}")
        saved = entry.get("shape")
        if not isinstance(saved, list) or not all(_count(d) for d in saved) or \
                tuple(saved) != shape:
            raise FileFormatError(f"{source}: {where}: the model's weight {i} has shape "
                                  f"{shape}, the file has {_short(saved)}")
        _check_numbers(entry.get("data"), int(np.prod(shape, dtype=np.int64)), source,
                       f"{where}.data")


def _check_numbers(data: Any, size: int, source: str, field: str,
                   shape: tuple | None = None) -> None:
    try:
        arr = np.asarray(data) if isinstance(data, list) else None
    except (ValueError, TypeError):  # ragged lists
        arr = None
    if arr is None or (arr.size and arr.dtype.kind not in "biuf"):
        raise FileFormatError(f"{source}: {field} should be a list of numbers, received "
                              f"{_short(data)}")
    if shape is not None and arr.shape != shape or shape is None and arr.shape != (size,):
        expected = shape if shape is not None else (size,)
        raise FileFormatError(f"{source}: {field} should have shape {expected}, received "
                              f"{arr.shape}")


# ---- what BackupAndRestore keeps in "extra" ---------------------------------------------------
def check_metric_states(model: Any, states: Any, source: str, field: str) -> None:
    """Checks ``{metric name: Metric.get_state()}`` against the model's metrics: each saved
    state has as many values, of the same shapes, as the metric's own state."""
    if states is None:
        return
    if not isinstance(states, dict):
        raise FileFormatError(f"{source}: {field} should be a dict, received {_short(states)}")
    for metric in getattr(model, "metrics", []):
        if metric.name not in states:
            continue
        saved, own = states[metric.name], metric.get_state()
        where = f"{field}.{metric.name}"
        if not isinstance(saved, list) or len(saved) != len(own):
            raise FileFormatError(f"{source}: {where} should be a list of {len(own)} values "
                                  f"(the metric's state), received {_short(saved)}")
        for i, (value, mine) in enumerate(zip(saved, own)):
            shape = np.shape(mine)
            if not shape and _is_number(value):
                continue
            _check_numbers(value if isinstance(value, list) else [value], 0, source,
                           f"{where}[{i}]", shape if shape else (1,))


def check_backup_extra(model: Any, info: dict, callbacks: list[Any], source: str) -> None:
    """Everything ``BackupAndRestore`` restores beyond :func:`load_checkpoint`: the generator
    state at the interrupted epoch's start, the metrics accumulated in it, and the other
    callbacks' states."""
    extra = info.get("extra") or {}
    if info.get("step", 0) > 0:
        if extra.get("epoch_start_rng") is not None:
            check_generator_state(extra["epoch_start_rng"], source,
                                  "training_state.extra.epoch_start_rng")
        check_metric_states(model, extra.get("metric_states"), source,
                            "training_state.extra.metric_states")
    check_callback_states(model, callbacks, info.get("callbacks") or {}, source)
