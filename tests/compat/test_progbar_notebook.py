"""The progress output in notebooks and odd terminals: ``verbose=1`` uses ``tqdm.auto`` (the
live widget in Jupyter), and on a terminal that reports zero columns the epoch summary line is
printed (no bar that could vanish)."""

from __future__ import annotations

import io
import os
import shutil
import sys
import types

import numpy as np
import pytest
import tqdm.auto
import tqdm.std

import kiln
from kiln.callbacks import progbar_logger as PL
from kiln.callbacks.progbar_logger import ProgbarLogger, format_value


class TTY(io.StringIO):
    def isatty(self):
        return True


def _fit(callbacks, epochs=2):
    kiln.utils.set_random_seed(0)
    i = kiln.Input((3,))
    m = kiln.Model(i, kiln.layers.Dense(1)(i))
    m.compile(kiln.optimizers.SGD(0.1), "mse")
    x = np.linspace(0, 1, 24, dtype="float32").reshape(8, 3)
    return m.fit(x, x[:, :1], epochs=epochs, batch_size=4, verbose=1, callbacks=callbacks)


def test_zero_column_terminal_prints_the_epoch_summary(monkeypatch):
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: os.terminal_size((0, 24)))
    stream = TTY()
    hist = _fit([ProgbarLogger(file=stream)])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    for epoch, line in enumerate(lines):
        assert line.startswith(f"Epoch {epoch + 1}/2 - 2/2 - ")
        assert line.endswith(f"loss: {format_value(hist.history['loss'][epoch])}")


def test_a_terminal_with_columns_gets_the_bar(monkeypatch):
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: os.terminal_size((80, 24)))
    stream = TTY()
    hist = _fit([ProgbarLogger(file=stream)], epochs=1)
    out = stream.getvalue()
    assert "\r" in out and "|####################|" in out
    assert f"loss: {format_value(hist.history['loss'][0])}" in out.splitlines()[-1]


def test_notebook_uses_tqdm_auto(monkeypatch, capsys):
    made = []

    class Recorder(tqdm.std.tqdm):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("desc"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(PL, "in_notebook", lambda: True)
    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    hist = _fit([ProgbarLogger()])  # a notebook's stdout is no TTY: the bar is still shown
    assert made == ["Epoch 1/2", "Epoch 2/2"]
    assert f"loss: {format_value(hist.history['loss'][1])}" in capsys.readouterr().out


@pytest.mark.parametrize("shell, expected", [("ZMQInteractiveShell", True),
                                             ("TerminalInteractiveShell", False)])
def test_in_notebook_detects_a_jupyter_kernel(monkeypatch, shell, expected):
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: type(shell, (), {})()
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert PL.in_notebook() is expected
    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    assert PL.in_notebook() is False
