"""Fixtures for kiln.datasets tests: an isolated environment, small idx datasets and a
local HTTP mirror on 127.0.0.1. No test reaches the internet."""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kiln.datasets import _idx, fashion_mnist, mnist

REAL_HOME = Path.home()
FASHION_SYSTEM_DIRS = fashion_mnist.SYSTEM_DIRS  # before the autouse fixture blanks it
STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def closed_port() -> int:
    """A localhost port that nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Fresh HOME, no KILN_* variables, no system folders, mirrors on a closed port."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("KILN_DATA_DIR", "KILN_DATASETS_MIRROR", "KILN_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    dead = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setattr(mnist, "BASE_URL", f"{dead}/mnist/")
    monkeypatch.setattr(fashion_mnist, "BASE_URL", f"{dead}/fashion/")
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", ())
    return home


def make_splits(n_train: int = 6, n_test: int = 4, seed: int = 0) -> _idx.Splits:
    rng = np.random.default_rng(seed)
    x_train = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    x_test = rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)
    y_train = (np.arange(n_train) % 10).astype(np.uint8)
    y_test = (np.arange(n_test)[::-1] % 10).astype(np.uint8)
    return (x_train, y_train), (x_test, y_test)


def file_name(stem: str, gz: bool = True, dotted: bool = False) -> str:
    name = stem.replace("-idx", ".idx", 1) if dotted else stem
    return name + ".gz" if gz else name


def write_idx_set(
    folder: Path, gz: bool = True, dotted: bool = False, seed: int = 0
) -> _idx.Splits:
    """Write a small four-file idx dataset into ``folder``; return its arrays."""
    folder.mkdir(parents=True, exist_ok=True)
    splits = make_splits(seed=seed)
    arrays = (splits[0][0], splits[0][1], splits[1][0], splits[1][1])
    for stem, array in zip(STEMS, arrays):
        _idx.write_idx(folder / file_name(stem, gz, dotted), array)
    return splits


def write_npz(path: Path, seed: int = 0) -> _idx.Splits:
    path.parent.mkdir(parents=True, exist_ok=True)
    (x_train, y_train), (x_test, y_test) = splits = make_splits(seed=seed)
    np.savez_compressed(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return splits


def assert_same(got: _idx.Splits, want: _idx.Splits) -> None:
    for got_part, want_part in zip(got, want):
        for got_array, want_array in zip(got_part, want_part):
            assert got_array.dtype == np.uint8
            np.testing.assert_array_equal(got_array, want_array)


@pytest.fixture
def helpers() -> SimpleNamespace:
    """The helper functions above, for the test modules."""
    return SimpleNamespace(
        STEMS=STEMS,
        REAL_HOME=REAL_HOME,
        FASHION_SYSTEM_DIRS=FASHION_SYSTEM_DIRS,
        make_splits=make_splits,
        file_name=file_name,
        write_idx_set=write_idx_set,
        write_npz=write_npz,
        assert_same=assert_same,
        closed_port=closed_port,
    )


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # keep test output quiet
        self.server.requests.append(self.path)  # type: ignore[attr-defined]


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[SimpleNamespace]:
    """An HTTP server on 127.0.0.1 serving ``root``; ``requests`` records request paths."""
    root = tmp_path / "mirror"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=root))
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(
            root=root, url=f"http://127.0.0.1:{server.server_port}/", requests=server.requests
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
