"""Keras' ``keras.utils.Progbar``: a text progress bar for custom loops.

``update(current, values)`` moves the bar to step ``current``; each ``(name, value)`` is
averaged over the steps since the start (weighted by the steps each update covers) unless
``name`` is in ``stateful_metrics`` (shown as given). ``add(n, values)`` advances by ``n``.
Verbose 1 redraws one line (or prints a line per update where stdout is not a terminal),
verbose 2 prints one line when the bar finishes, 0 prints nothing. Output goes through
:func:`kiln.utils.keras_utils.print_msg`, so :func:`~kiln.utils.disable_interactive_logging`
sends it to the ``"kiln"`` logger.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

from kiln.utils.keras_utils import print_msg


class Progbar:
    """A progress bar (Keras' ``Progbar``).

    Args:
        target: the number of steps expected; None if unknown.
        width: the bar's width in characters.
        verbose: 0 (silent), 1 (a live bar), 2 (one line at the end).
        interval: the least time (seconds) between two redraws with ``verbose=1``.
        stateful_metrics: names whose values are shown as given (not averaged).
        stateless_metrics: names that are averaged; all others are shown as given. At most
            one of ``stateful_metrics`` and ``stateless_metrics``.
        unit_name: the unit of the time per step (``"step"``, ``"sample"``).

    Example:
        >>> bar = kiln.utils.Progbar(10)
        >>> for i in range(10):
        ...     bar.update(i + 1, values=[("loss", 1.0 / (i + 1))])
    """

    def __init__(self, target: int | None, width: int = 20, verbose: int = 1,
                 interval: float = 0.05, stateful_metrics: Any = None,
                 stateless_metrics: Any = None, unit_name: str = "step"):
        if stateful_metrics is not None and stateless_metrics is not None:
            raise ValueError("Progbar: give only one of stateful_metrics (the names not "
                             "averaged) and stateless_metrics (the names averaged), "
                             f"received both: {stateful_metrics!r} and {stateless_metrics!r}")
        if verbose not in (0, 1, 2):
            raise ValueError(f"Progbar: verbose must be 0, 1 or 2, received {verbose!r}")
        if target is not None and target < 0:
            raise ValueError(f"Progbar: target must be None or >= 0, received {target!r}")
        self.target = target
        self.width = width
        self.verbose = verbose
        self.interval = interval
        self.unit_name = unit_name
        # stateful_metrics: averaged unless named; stateless_metrics: averaged only if named
        self.stateful_metrics: set | None = None if stateless_metrics is not None else \
            set(stateful_metrics or ())
        self.stateless_metrics = None if stateless_metrics is None else set(stateless_metrics)
        self._dynamic_display = ((hasattr(sys.stdout, "isatty") and sys.stdout.isatty())
                                 or "ipykernel" in sys.modules
                                 or "PYCHARM_HOSTED" in os.environ)
        self._seen_so_far = 0
        self._values: dict[str, list] = {}
        self._values_order: list[str] = []
        self._start = time.time()
        self._last_update = 0.0
        self._time_after_first_step: float | None = None
        self._prev_width = 0

    def _averaged(self, name: str) -> bool:
        if self.stateful_metrics is not None:
            return name not in self.stateful_metrics
        return name in (self.stateless_metrics or set())

    def value(self, name: str) -> float:
        """The value the bar shows for ``name`` (its average, or the last value given)."""
        total, count = self._values[name]
        return float(np.mean(total)) / max(1, count)

    def update(self, current: int, values: Any = None, finalize: bool | None = None) -> None:
        """Moves the bar to step ``current``.

        Args:
            current: the index of the current step.
            values: ``[(name, value_for_last_step), ...]``.
            finalize: whether this is the last update; default ``current >= target``.
        """
        if finalize is None:
            finalize = self.target is not None and current >= self.target
        for name, v in values or []:
            if name not in self._values_order:
                self._values_order.append(name)
            if self._averaged(name) and not finalize:
                steps = max(current - self._seen_so_far, 1)
                total, count = self._values.get(name, [0.0, 0])
                self._values[name] = [total + np.asarray(v) * steps, count + steps]
            else:  # shown as given (a finalized value is already the epoch's average)
                self._values[name] = [np.asarray(v), 1]
        self._seen_so_far = current
        now = time.time()
        per_unit = self._step_duration(current, now)
        if self.verbose == 1:
            if now - self._last_update < self.interval and not finalize:
                return
            line = self._bar(current) + self._info(current, now, per_unit, finalize)
            pad = " " * max(self._prev_width - len(line), 0)
            prefix = "\r" if self._dynamic_display else ("\n" if self._last_update else "")
            print_msg(prefix + line + pad + ("\n" if finalize else ""), line_break=False)
            self._prev_width = len(line)
        elif self.verbose == 2 and finalize and self.target:
            digits = len(str(self.target))
            line = (f"{current:{digits}d}/{self.target} - {now - self._start:.0f}s -"
                    f"{self._format_time(per_unit)}" + self._metrics_text())
            print_msg(line)
        self._last_update = now

    def add(self, n: int, values: Any = None) -> None:
        """Advances the bar by ``n`` steps (see :meth:`update`)."""
        self.update(self._seen_so_far + n, values)

    # ---- text ---------------------------------------------------------------------------------
    def _bar(self, current: int) -> str:
        if not self.target:
            return f"{current:7d}/Unknown"
        digits = len(str(self.target))
        done = int(self.width * min(current / self.target, 1.0))
        head = ">" if done < self.width else ""
        filled = "=" * max(done - len(head), 0) + head if done else ""
        return (f"{current:{digits}d}/{self.target} "
                f"[{filled}{'.' * (self.width - len(filled))}]")

    def _info(self, current: int, now: float, per_unit: float, finalize: bool) -> str:
        if self.target and not finalize:
            eta = per_unit * (self.target - current)
            if eta > 3600:
                text = f"{int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}"
            elif eta > 60:
                text = f"{int(eta // 60)}:{int(eta % 60):02d}"
            else:
                text = f"{int(eta)}s"
            info = f" - ETA: {text}"
        else:
            info = f" - {now - self._start:.0f}s"
        return info + self._format_time(per_unit) + self._metrics_text()

    def _metrics_text(self) -> str:
        out = ""
        for name in self._values_order:
            avg = self.value(name)
            out += f" - {name}: " + (f"{avg:.4f}" if abs(avg) > 1e-3 else f"{avg:.4e}")
        return out

    def _format_time(self, per_unit: float) -> str:
        if per_unit >= 1 or per_unit == 0:
            return f" {per_unit:.0f}s/{self.unit_name}"
        if per_unit >= 1e-3:
            return f" {per_unit * 1e3:.0f}ms/{self.unit_name}"
        return f" {per_unit * 1e6:.0f}us/{self.unit_name}"

    def _step_duration(self, current: int, now: float) -> float:
        """Seconds per step; the first step (compilation, warm-up) is left out once there
        are more."""
        if not current:
            return 0.0
        if self._time_after_first_step is not None and current > 1:
            per_unit = (now - self._time_after_first_step) / (current - 1)
        else:
            per_unit = (now - self._start) / current
        if current == 1:
            self._time_after_first_step = now
        return per_unit
