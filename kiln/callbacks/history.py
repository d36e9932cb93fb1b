"""History: the per-epoch logs of ``fit``."""

from __future__ import annotations

from typing import Any

from kiln.callbacks.callback import Callback, float_from_json, float_to_json


class History(Callback):
    """Records the logs of every epoch: ``history.history`` maps each metric name to a list
    (one value per epoch) and ``history.epoch`` lists the epochs. ``fit`` returns it.

    Example:
        >>> history = model.fit(x, y, epochs=3)
        >>> history.history["loss"]
        [0.52, 0.31, 0.24]
    """

    def __init__(self) -> None:
        super().__init__()
        self.history: dict[str, list[Any]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.epoch = []

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)
        if self.model is not None:
            try:
                self.model.history = self
            except AttributeError:  # pragma: no cover - a model that forbids the attribute
                pass

    def get_state(self) -> dict[str, Any]:
        return {"history": {k: [float_to_json(x) for x in v] for k, v in self.history.items()},
                "epoch": [int(e) for e in self.epoch]}

    def set_state(self, state: dict[str, Any]) -> None:
        self.history = {k: [float_from_json(x) for x in v]
                        for k, v in state.get("history", {}).items()}
        self.epoch = [int(e) for e in state.get("epoch", [])]
