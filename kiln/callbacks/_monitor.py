"""Shared by the callbacks that watch a metric: whether smaller or larger is better."""

from __future__ import annotations

import warnings
from typing import Any

# Names (without "val_") whose direction is known without asking the model. Keras 3 asks the
# model's metric objects for their direction; kiln does that too (``_direction`` or
# ``direction`` on ``model.metrics``) and falls back to these names.
_MAX_NAMES = ("acc", "accuracy", "auc", "precision", "recall", "f1", "fbeta", "iou", "r2")
_MIN_NAMES = ("loss", "mse", "mae", "mape", "msle", "error", "crossentropy", "hinge",
              "kl_divergence", "kld", "logcosh", "poisson", "huber", "rmse")


def _metric_direction(model: Any, name: str) -> str | None:
    try:
        metrics = list(getattr(model, "metrics", None) or [])
    except Exception:  # pragma: no cover - a model whose metrics property is not ready
        return None
    stack = metrics
    while stack:
        m = stack.pop()
        inner = getattr(m, "metrics", None)
        if isinstance(inner, list | tuple):
            stack.extend(inner)
        if getattr(m, "name", None) == name:
            d = getattr(m, "_direction", None) or getattr(m, "direction", None)
            if d in ("up", "max"):
                return "max"
            if d in ("down", "min"):
                return "min"
    return None


def infer_mode(owner: str, monitor: str, mode: str, model: Any) -> str:
    """``"min"`` or ``"max"`` for ``monitor`` given ``mode`` ("auto", "min" or "max")."""
    if mode in ("min", "max"):
        return mode
    name = monitor.removeprefix("val_")
    if name == "loss" or name.endswith("_loss"):
        return "min"
    found = _metric_direction(model, name)
    if found is not None:
        return found
    lowered = name.lower()
    if lowered in _MAX_NAMES or "acc" in lowered or lowered.startswith(_MAX_NAMES):
        return "max"
    if lowered in _MIN_NAMES or any(lowered.endswith(n) for n in _MIN_NAMES):
        return "min"
    raise ValueError(
        f"{owner} callback received monitor={monitor!r}, but kiln isn't able to automatically "
        "determine whether that metric should be maximized or minimized. Pass mode='max' in "
        "order to monitor based on the highest metric value, or mode='min' in order to use the "
        "lowest value.")


def check_mode(owner: str, mode: str) -> str:
    if mode not in ("auto", "min", "max"):
        warnings.warn(f"{owner} mode {mode!r} is unknown, fallback to auto mode.", stacklevel=3)
        return "auto"
    return mode
