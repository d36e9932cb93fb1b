"""get_file: offline-first cache, sha256/md5 checks, safe extraction; downloads only from an
HTTP server on 127.0.0.1."""

from __future__ import annotations

import functools
import hashlib
import io
import tarfile
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from kiln.utils import get_file


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        self.server.requests.append(self.path)


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=root))
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield SimpleNamespace(root=root, url=f"http://127.0.0.1:{httpd.server_port}/",
                              requests=httpd.requests)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_offline(monkeypatch):
    monkeypatch.delenv("KILN_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("KERAS_HOME", raising=False)


def test_download_cache_and_hashes(tmp_path, server):
    payload = b"hello kiln\n" * 100
    (server.root / "data.txt").write_bytes(payload)
    sha = hashlib.sha256(payload).hexdigest()
    md5 = hashlib.md5(payload).hexdigest()
    cache = tmp_path / "cache"
    path = get_file(origin=server.url + "data.txt", file_hash=sha, cache_dir=cache)
    assert path == str(cache / "datasets" / "data.txt")
    assert Path(path).read_bytes() == payload
    assert sorted(p.name for p in (cache / "datasets").iterdir()) == ["data.txt"]  # no temp
    # cached: no second request, with an md5 as with a sha256
    assert get_file("data.txt", server.url + "data.txt", md5_hash=md5, cache_dir=cache) == path
    assert get_file("data.txt", server.url + "data.txt", file_hash=md5, cache_dir=cache,
                    cache_subdir="datasets") == path
    assert server.requests == ["/data.txt"]
    # a damaged cached copy is fetched again
    Path(path).write_bytes(b"damaged")
    get_file("data.txt", server.url + "data.txt", file_hash=sha, cache_dir=cache)
    assert Path(path).read_bytes() == payload and len(server.requests) == 2


def test_checksum_mismatch_keeps_nothing(tmp_path, server):
    (server.root / "f.bin").write_bytes(b"abc")
    cache = tmp_path / "c"
    with pytest.raises(ValueError, match=r"checksum mismatch for f.bin .*expected sha256 "
                                         + "0" * 64 + ", got " +
                                         hashlib.sha256(b"abc").hexdigest()):
        get_file("f.bin", server.url + "f.bin", file_hash="0" * 64, cache_dir=cache)
    assert list((cache / "datasets").iterdir()) == []


def test_offline_and_unreachable(tmp_path, monkeypatch, server):
    monkeypatch.setenv("KILN_DATASETS_OFFLINE", "1")
    with pytest.raises(OSError, match="downloads are disabled by KILN_DATASETS_OFFLINE"):
        get_file("x.txt", server.url + "x.txt", cache_dir=tmp_path)
    cached = tmp_path / "datasets" / "x.txt"
    cached.parent.mkdir(parents=True)
    cached.write_text("here")
    assert get_file("x.txt", server.url + "x.txt", cache_dir=tmp_path) == str(cached)
    monkeypatch.delenv("KILN_DATASETS_OFFLINE")
    with pytest.raises(OSError, match="could not download"):
        get_file("missing.txt", server.url + "missing.txt", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="neither a sha256 .* nor an md5"):
        get_file("x.txt", server.url + "x.txt", file_hash="abc", cache_dir=tmp_path)


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, raw in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def test_extract_tar_and_zip_and_untar(tmp_path, server):
    (server.root / "photos.tar.gz").write_bytes(_tar({"photos/a/1.txt": b"one",
                                                      "photos/b/2.txt": b"two"}))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("words/x.txt", "ex")
    (server.root / "words.zip").write_bytes(buf.getvalue())
    out = get_file(origin=server.url + "photos.tar.gz", extract=True, cache_dir=tmp_path)
    assert out == str(tmp_path / "datasets" / "photos_extracted")
    assert (Path(out) / "photos" / "b" / "2.txt").read_bytes() == b"two"
    out = get_file("words.zip", server.url + "words.zip", extract=True, cache_dir=tmp_path)
    assert (Path(out) / "words" / "x.txt").read_text() == "ex"
    out = get_file("photos", server.url + "photos.tar.gz", untar=True, cache_dir=tmp_path,
                   cache_subdir="u")
    assert out == str(tmp_path / "u" / "photos")
    assert (Path(out) / "a" / "1.txt").read_bytes() == b"one"


def test_unsafe_archives_are_refused(tmp_path, server):
    # an absolute member name is made relative (tar's data filter): it stays inside
    (server.root / "abs.tar.gz").write_bytes(_tar({str(tmp_path / "evil-abs.txt"): b"x"}))
    out = get_file(origin=server.url + "abs.tar.gz", extract=True, cache_dir=tmp_path / "a")
    assert not (tmp_path / "evil-abs.txt").exists()
    assert (Path(out) / str(tmp_path / "evil-abs.txt").lstrip("/")).read_bytes() == b"x"
    (server.root / "bad.tar.gz").write_bytes(_tar({"../evil.txt": b"x"}))
    with pytest.raises(ValueError, match="refused to extract bad.tar.gz"):
        get_file(origin=server.url + "bad.tar.gz", extract=True, cache_dir=tmp_path / "c")
    assert not (tmp_path / "c" / "evil.txt").exists() and not (tmp_path / "evil.txt").exists()
    assert not (tmp_path / "c" / "datasets" / "bad_extracted").exists()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("../../evil.txt", "x")
    (server.root / "bad.zip").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="would be written outside"):
        get_file(origin=server.url + "bad.zip", extract=True, cache_dir=tmp_path / "z")
    assert not (tmp_path / "evil.txt").exists()
