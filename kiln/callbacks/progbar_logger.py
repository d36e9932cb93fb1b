"""ProgbarLogger: the progress output of ``fit`` / ``evaluate`` / ``predict``.

* ``verbose=1`` on a terminal or in a Jupyter notebook: a ``tqdm.auto`` bar per epoch (a live
  widget in a notebook; steps done/total, elapsed and ETA, the running loss and metrics in the
  postfix), redrawn at most every ``mininterval`` seconds; when the epoch ends the bar's last
  state (with the ``val_`` metrics) stays on screen.
* ``verbose=1`` when the output is not a terminal (a log file, CI, a captured stream) or is a
  terminal that reports zero columns: no bar, since carriage-return redraws become a flood of
  lines (or vanish); one summary line per epoch.
* ``verbose=2``: exactly one line per epoch, like Keras
  (``Epoch 1/3 - 0.5s - loss: 0.1234 - accuracy: 0.9000 - val_loss: 0.2345``).
* ``verbose=0``: nothing.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from typing import IO, Any

import kiln.config
from kiln.callbacks.callback import Callback


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython ZMQ shell is running); IPython is
    only looked up, never imported."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    shell = get() if get is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` reports it (0 on some IDE and
    container terminals)."""
    try:
        return int(shutil.get_terminal_size().columns)
    except (OSError, ValueError):  # pragma: no cover - no terminal at all
        return 0


def format_value(v: Any) -> str:
    """Keras's number format: 4 decimals, scientific below 1e-3 in magnitude."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int | float) or hasattr(v, "__float__"):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        return f"{f:.4f}" if abs(f) > 1e-3 else f"{f:.4e}"
    return str(v)


def format_logs(logs: dict[str, Any] | None) -> str:
    """``loss: 0.1234 - accuracy: 0.9000 - val_loss: ...`` (training entries first, then the
    ``val_`` ones, each group in the order given)."""
    logs = logs or {}
    keys = [k for k in logs if not k.startswith("val_")] + [k for k in logs
                                                             if k.startswith("val_")]
    return " - ".join(f"{k}: {format_value(logs[k])}" for k in keys)


def format_time(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds:.0f}s"
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h{rest // 60:02d}m"


class ProgbarLogger(Callback):
    """Prints progress: a tqdm bar (``verbose=1``) or one line per epoch (``verbose=2``).

    The verbosity, number of epochs and steps per epoch come from the trainer's params
    (``verbose``, ``epochs``, ``steps``).

    Args:
        file: where to write (default: ``sys.stdout`` at the time of writing).
        mininterval: minimum seconds between two redraws of the bar.

    Example:
        >>> cbs = CallbackList([ProgbarLogger()], verbose=2, epochs=3, steps=100)
    """

    chief_only = True  # with several ranks (kiln.distribution), only rank 0 prints

    def __init__(self, *, file: IO[str] | None = None, mininterval: float = 0.1):
        super().__init__()
        self.file = file
        self.mininterval = mininterval
        self.verbose = 1
        self.epochs = 1
        self.target: int | None = None
        self._bar: Any = None
        self._in_fit = False
        self._epoch = 0
        self._seen = 0
        self._start = 0.0

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        verbose = params.get("verbose", 1)
        self.verbose = 1 if verbose == "auto" else int(verbose or 0)
        self.epochs = params.get("epochs") or 1
        self.target = params.get("steps")

    # ---- output -----------------------------------------------------------------------------
    def _stream(self) -> IO[str]:
        return self.file if self.file is not None else sys.stdout

    def _is_tty(self) -> bool:
        isatty = getattr(self._stream(), "isatty", None)
        try:
            return bool(isatty()) if isatty is not None else False
        except (ValueError, OSError):  # pragma: no cover - closed stream
            return False

    def _bar_wanted(self) -> bool:
        """A bar on a terminal that reports its width, or in a notebook writing to stdout."""
        if self.file is None and not kiln.config.is_interactive_logging_enabled():
            return False
        if self.file is None and in_notebook():
            return True
        return self._is_tty() and terminal_columns() > 0

    def _print(self, line: str) -> None:
        if self.file is None and not kiln.config.is_interactive_logging_enabled():
            # kiln.config.disable_interactive_logging(): to the "kiln" logger, as Keras'
            # io_utils.print_msg sends it to absl logging
            logging.getLogger("kiln").info(line)
            return
        stream = self._stream()
        stream.write(line + "\n")
        stream.flush()

    def _open_bar(self, desc: str, target: int | None) -> None:
        self._close_bar()
        self._seen = 0
        self._start = time.perf_counter()
        if self.verbose == 1 and self._bar_wanted():
            from tqdm.auto import tqdm  # the notebook widget in Jupyter, else the text bar

            self._bar = tqdm(total=target, desc=desc, file=self._stream(), unit="step",
                             mininterval=self.mininterval, leave=True, dynamic_ncols=True,
                             bar_format="{desc} {n_fmt}/{total_fmt} |{bar:20}| "
                                        "[{elapsed}<{remaining}, {rate_fmt}]{postfix}")

    def _advance(self, done: int, logs: dict | None) -> None:
        done = max(done, self._seen)
        if self._bar is not None:
            if logs:
                self._bar.set_postfix_str(format_logs(logs), refresh=False)
            self._bar.update(done - self._seen)
        self._seen = done

    def _close_bar(self, logs: dict | None = None) -> None:
        if self._bar is not None:
            if logs:
                self._bar.set_postfix_str(format_logs(logs), refresh=False)
            self._bar.refresh()
            self._bar.close()
            self._bar = None

    def _finish(self, prefix: str, logs: dict | None) -> None:
        """Ends a bar (verbose=1 on a TTY) or prints the one summary line."""
        elapsed = time.perf_counter() - self._start
        if self._bar is not None:
            self._close_bar(logs)
            return
        if self.verbose == 0:
            return
        parts = [prefix] if prefix else []
        if self.verbose == 1:
            total = self.target if self.target is not None else self._seen
            parts.append(f"{self._seen}/{total}")
        parts.append(format_time(elapsed))
        if logs:
            parts.append(format_logs(logs))
        self._print(" - ".join(parts))

    # ---- fit ---------------------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        self._in_fit = True

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch
        if self.verbose:
            self._open_bar(f"Epoch {epoch + 1}/{self.epochs}", self.target)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.verbose:
            self._advance(batch + 1, logs)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.verbose:
            self._finish(f"Epoch {epoch + 1}/{self.epochs}", logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self._close_bar()
        self._in_fit = False

    # ---- evaluate / predict (validation inside fit is silent) --------------------------------
    def on_test_begin(self, logs: dict | None = None) -> None:
        if not self._in_fit and self.verbose:
            self._open_bar("Evaluate", self.target)

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not self._in_fit and self.verbose:
            self._advance(batch + 1, logs)

    def on_test_end(self, logs: dict | None = None) -> None:
        if not self._in_fit and self.verbose:
            self._finish("Evaluate", logs)

    def on_predict_begin(self, logs: dict | None = None) -> None:
        if self.verbose:
            self._open_bar("Predict", self.target)

    def on_predict_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.verbose:
            self._advance(batch + 1, None)

    def on_predict_end(self, logs: dict | None = None) -> None:
        if self.verbose:
            self._finish("Predict", None)
