"""The atomic writer: a crash while writing leaves the previous file intact and readable
(oracle: the arrays of the previous save)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
from saving_helpers import Stack, randomize, values

import kiln.saving.atomic as atomic
from kiln.saving import atomic_write, load_weights, save_checkpoint, save_weights

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def _model(seed):
    m = Stack((8, 8, 8, 8), names=["a", "b", "c"])
    randomize(m, seed)
    return m


def test_exception_mid_write_keeps_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "w.h5"
    first = _model(0)
    save_weights(first, path)
    original = path.read_bytes()

    calls = {"n": 0}
    real = h5py.Group.create_dataset

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # after two datasets are in the temporary file
            raise OSError("disk full (simulated)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", failing)
    with pytest.raises(OSError, match="simulated"):
        save_weights(_model(1), path)
    monkeypatch.undo()
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["w.h5"]  # the temporary file is gone
    again = _model(2)
    load_weights(again, path)
    for a, b in zip(values(first), values(again)):
        np.testing.assert_array_equal(a, b)


def test_fsync_and_replace(tmp_path, monkeypatch):
    synced, replaced = [], []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append((a, b)),
                                                     real_replace(a, b))[1])
    target = tmp_path / "x.bin"

    def write(p):
        with open(p, "wb") as f:
            f.write(b"abc")

    atomic_write(target, write)
    assert target.read_bytes() == b"abc"
    assert len(replaced) == 1 and replaced[0][1] == str(target)
    tmp = replaced[0][0]
    assert os.path.dirname(tmp) == str(tmp_path) and tmp.endswith(atomic.TMP_SUFFIX)
    assert len(synced) == 2  # the file, then the folder


def test_writer_that_writes_nothing_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="no file"):
        atomic_write(tmp_path / "x", lambda p: None)
    assert os.listdir(tmp_path) == []


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_weights(_model(0), tmp_path / "nope" / "w.h5")


_KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import h5py
    from saving_helpers import Stack, randomize
    from kiln.saving import {fn}
    path, kind = sys.argv[1], sys.argv[2]
    m = Stack((8, 8, 8, 8), names=["a", "b", "c"])
    randomize(m, 0)
    save = {fn}
    save(m, path)
    print("ready", flush=True)
    real = h5py.Group.create_dataset
    n = [0]
    def slow(self, *a, **k):
        n[0] += 1
        out = real(self, *a, **k)
        if n[0] == 4:
            print("midwrite", flush=True)
            time.sleep(60)
        return out
    h5py.Group.create_dataset = slow
    randomize(m, 1)
    save(m, path)
    print("finished", flush=True)
""")


@pytest.mark.parametrize("fn", ["save_weights", "save_checkpoint"])
def test_sigkill_mid_write_keeps_previous_file(tmp_path, fn):
    path = str(tmp_path / "ckpt.h5")
    script = tmp_path / "writer.py"
    script.write_text(_KILLED_WRITER.format(fn=fn))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, ROOT, os.environ.get(
        "PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, str(script), path, fn], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if line.strip() == "midwrite":
                break
        assert lines[-1:] == ["midwrite"], (lines, proc.stderr.read())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(atomic.TMP_SUFFIX)]
    assert len(leftovers) == 1  # the killed writer's partial temporary file, harmless
    m = _model(5)
    load_weights(m, path)  # the previous complete file
    expected = _model(0)
    for a, b in zip(values(expected), values(m)):
        np.testing.assert_array_equal(a, b)
    if fn == "save_checkpoint":
        save_checkpoint(_model(3), path)
    else:
        save_weights(_model(3), path)
    # The next write removes the dead writer's temporary file.
    assert sorted(os.listdir(tmp_path)) == ["ckpt.h5", "writer.py"]
