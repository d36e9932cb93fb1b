"""Checksummed downloads: fetch to a temp file beside the target, verify, then rename."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from pathlib import Path

_CHUNK = 1 << 20
# Largest decompressed size hashed when checking a gz file by its payload (MNIST: 47 MB).
_MAX_RAW_BYTES = 256 << 20


class DownloadError(OSError):
    """A file could not be fetched (network error, HTTP error, refused connection)."""


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_gunzipped(path: str | os.PathLike[str]) -> str | None:
    """Return the hex sha256 of a gz file's decompressed payload, or None if not gzip."""
    digest = hashlib.sha256()
    total = 0
    try:
        with gzip.open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                total += len(chunk)
                if total > _MAX_RAW_BYTES:
                    return None
                digest.update(chunk)
    except (OSError, EOFError, zlib.error):
        return None
    return digest.hexdigest()


def verify(path: Path, name: str, sha256: str, raw_sha256: str | None = None) -> None:
    """Check a downloaded file against its published sha256.

    A gz file whose own hash differs is still accepted when its decompressed payload
    matches ``raw_sha256`` (mirrors and distributions sometimes recompress the files).

    Raises:
        ValueError: Naming the file, the expected and the actual sha256.
    """
    actual = sha256_file(path)
    if actual == sha256:
        return
    raw_actual = sha256_gunzipped(path) if raw_sha256 else None
    if raw_actual is not None and raw_actual == raw_sha256:
        return
    raise ValueError(
        f"checksum mismatch for {name}: expected sha256 {sha256}, got {actual}"
        + (f" (decompressed: expected {raw_sha256}, got {raw_actual})" if raw_sha256 else "")
        + "; the download was discarded"
    )


def download(
    url: str,
    dest: Path,
    sha256: str,
    raw_sha256: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` after verifying its sha256.

    The bytes go to a hidden temp file in ``dest``'s folder, which is renamed over
    ``dest`` only once verified and removed on any failure.

    Args:
        url: Where to fetch from (http, https or file).
        dest: Final file path; its folder is created if needed.
        sha256: Expected hex sha256 of the downloaded bytes.
        raw_sha256: Optional expected sha256 of the decompressed payload of a gz file.
        timeout: Socket timeout in seconds.

    Returns:
        ``dest``.

    Raises:
        DownloadError: The file could not be fetched.
        ValueError: The checksum did not match; nothing is left in the folder.

    Example:
        >>> download(BASE + "t10k-labels-idx1-ubyte.gz", Path("data/t10k-labels-idx1-ubyte.gz"),
        ...          "f7ae60f9...")  # doctest: +SKIP
    """
    import http.client  # here: importing them (ssl, email ...) costs ~15 ms of every start
    import urllib.request

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    shutil.copyfileobj(response, out, _CHUNK)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                raise DownloadError(f"could not download {url}: {exc}") from exc
        verify(tmp, dest.name, sha256, raw_sha256)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def download_md5(url: str, dest: Path, md5: str, timeout: float = 60.0) -> Path:
    """Like :func:`download` for a file whose only published hash is an md5 (Keras'
    word index): a temp file beside ``dest``, renamed over it once the md5 matches."""
    import http.client
    import urllib.request

    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.md5(usedforsecurity=False)
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    shutil.copyfileobj(response, out, 1 << 20)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                raise DownloadError(f"could not download {url}: {exc}") from exc
        with open(tmp, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != md5:
            raise ValueError(
                f"checksum mismatch for {dest.name}: expected md5 {md5}, got "
                f"{digest.hexdigest()}; the download was discarded"
            )
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return dest


def try_download(url: str, target: Path, digest: str) -> tuple[Path | None, str]:
    """``(path, "")`` once ``url`` is downloaded into ``target`` and checked against ``digest``
    (sha256 when it has 64 hex digits, else md5), or ``(None, why not)``; folders created for
    the file and left empty are removed. A checksum mismatch raises (ValueError)."""
    created = [d for d in (target.parent, *target.parent.parents) if not d.exists()]
    try:
        if len(digest) == 64:
            return download(url, target, digest), ""
        return download_md5(url, target, digest), ""
    except DownloadError as exc:
        return None, f"download from {url} into {target} failed: {exc}"
    finally:
        for folder in created:  # leave no empty folders behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
