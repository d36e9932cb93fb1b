"""CallbackList: calls every hook of a list of callbacks, like Keras 3's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from kiln import distribution
from kiln.callbacks.callback import Callback
from kiln.callbacks.history import History
from kiln.callbacks.progbar_logger import ProgbarLogger


def _flatten(callbacks: Any) -> list[Callback]:
    out: list[Callback] = []
    for cb in callbacks:
        if isinstance(cb, list | tuple):
            out.extend(_flatten(cb))
        elif isinstance(cb, Callback):
            out.append(cb)
        else:
            raise TypeError(f"CallbackList: expected Callback instances, received "
                            f"{type(cb).__name__}")
    return out


def pythonify_logs(logs: dict | None) -> dict[str, Any]:
    """Logs with scalar arrays/NumPy numbers turned into Python floats (order kept; nested
    dicts are merged in)."""
    result: dict[str, Any] = {}
    for key, value in (logs or {}).items():
        if isinstance(value, dict):
            result.update(pythonify_logs(value))
            continue
        if isinstance(value, np.ndarray | np.generic) and np.ndim(value) == 0:
            value = float(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        result[key] = value
    return result


class CallbackList(Callback):
    """A list of callbacks called as one.

    Args:
        callbacks: Callback instances (nested lists are flattened).
        add_history: append a :class:`History` unless one is in the list.
        add_progbar: append a :class:`ProgbarLogger` unless one is in the list.
        model: the model, passed to every callback (and ``model.history`` is set to the
            History).
        **params: the loop's parameters (``verbose``, ``epochs``, ``steps`` ...), passed to
            every callback's ``set_params``.

    Example:
        >>> cbs = CallbackList([EarlyStopping(patience=2)], add_history=True, model=model,
        ...                    verbose=1, epochs=10, steps=100)
        >>> cbs.on_train_begin()
    """

    def __init__(self, callbacks: Iterable[Callback] | None = None, add_history: bool = False,
                 add_progbar: bool = False, model: Any = None, **params: Any):
        super().__init__()
        self.callbacks: list[Callback] = _flatten(callbacks) if callbacks else []
        if not distribution.is_chief():  # several ranks: only rank 0 prints and logs
            self.callbacks = [cb for cb in self.callbacks if not getattr(cb, "chief_only", False)]
        self._history: History | None = None
        self._progbar: ProgbarLogger | None = None
        for cb in self.callbacks:
            if isinstance(cb, ProgbarLogger):
                self._progbar = cb
            elif isinstance(cb, History):
                self._history = cb
        if self._history is None and add_history:
            self._history = History()
            self.callbacks.append(self._history)
        if self._progbar is None and add_progbar:
            self._progbar = ProgbarLogger()
            self.callbacks.append(self._progbar)
        self.set_model(model)
        self.set_params(params)

    @property
    def history(self) -> History | None:
        return self._history

    def append(self, callback: Callback) -> None:
        if self.model is not None:
            callback.set_model(self.model)
        if self.params:
            callback.set_params(self.params)
        self.callbacks.append(callback)

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params
        if params:
            for cb in self.callbacks:
                cb.set_params(params)

    def set_model(self, model: Any) -> None:
        if model is None:
            return
        super().set_model(model)
        if self._history is not None:
            try:
                model.history = self._history
            except AttributeError:  # pragma: no cover
                pass
        for cb in self.callbacks:
            cb.set_model(model)

    def __iter__(self):
        return iter(self.callbacks)

    def __len__(self) -> int:
        return len(self.callbacks)

    # ---- dispatch ---------------------------------------------------------------------------
    def _call(self, hook: str, *args: Any, logs: dict | None = None) -> None:
        logs = pythonify_logs(logs)
        for cb in self.callbacks:
            getattr(cb, hook)(*args, logs)

    def on_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_batch_begin", batch, logs=logs)

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_batch_end", batch, logs=logs)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._call("on_epoch_begin", epoch, logs=logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        # One dict shared by all callbacks, so that a callback may add entries
        # (ReduceLROnPlateau adds "learning_rate") that the next ones and History see.
        shared = logs if logs is not None else {}
        shared.update(pythonify_logs(shared))
        for cb in self.callbacks:
            cb.on_epoch_end(epoch, shared)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_train_batch_begin", batch, logs=logs)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_train_batch_end", batch, logs=logs)

    def on_test_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_test_batch_begin", batch, logs=logs)

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_test_batch_end", batch, logs=logs)

    def on_predict_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._call("on_predict_batch_begin", batch, logs=logs)

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # predict logs hold the batch outputs (arrays): passed through untouched
        for cb in self.callbacks:
            cb.on_predict_batch_end(batch, logs or {})

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._call("on_train_begin", logs=logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self._call("on_train_end", logs=logs)

    def on_test_begin(self, logs: dict | None = None) -> None:
        self._call("on_test_begin", logs=logs)

    def on_test_end(self, logs: dict | None = None) -> None:
        self._call("on_test_end", logs=logs)

    def on_predict_begin(self, logs: dict | None = None) -> None:
        self._call("on_predict_begin", logs=logs)

    def on_predict_end(self, logs: dict | None = None) -> None:
        self._call("on_predict_end", logs=logs)

    # ---- state ------------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """``{"<index>:<ClassName>": state}`` for every callback with a non-empty state."""
        out = {}
        for i, cb in enumerate(self.callbacks):
            state = cb.get_state()
            if state:
                out[f"{i}:{type(cb).__name__}"] = state
        return out

    def set_state(self, state: dict[str, Any]) -> None:
        for i, cb in enumerate(self.callbacks):
            key = f"{i}:{type(cb).__name__}"
            if key in state:
                cb.set_state(state[key])
