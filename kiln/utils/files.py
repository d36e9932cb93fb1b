"""``get_file`` (``keras.utils.get_file``): a file from a URL, cached, verified and
optionally extracted; offline first.

A file already in the cache is used as it is (after its hash check, when a hash is given),
so nothing is fetched on a machine without internet once the file is there. A download goes
to a temp file beside its target and is renamed into place only once its hash matches.
Archives are extracted safely: members with absolute paths, ``..`` or links pointing out of
the target folder, and device files, are refused (tar's ``"data"`` filter; the same checks
for zip).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

from kiln import config

_CHUNK = 1 << 20
OFFLINE_ENV = "KILN_DATASETS_OFFLINE"


def hash_file(path: str | os.PathLike[str], algorithm: str = "sha256") -> str:
    """The hex digest of a file (``"sha256"`` or ``"md5"``)."""
    digest = hashlib.new(algorithm, usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _algorithm(file_hash: str, hash_algorithm: str) -> str:
    if hash_algorithm not in ("auto", "sha256", "md5"):
        raise ValueError(f"get_file: hash_algorithm must be 'auto', 'sha256' or 'md5', "
                         f"received {hash_algorithm!r}")
    if hash_algorithm != "auto":
        return hash_algorithm
    if len(file_hash) == 64:
        return "sha256"
    if len(file_hash) == 32:
        return "md5"
    raise ValueError(f"get_file: file_hash {file_hash!r} is neither a sha256 (64 hex digits) "
                     "nor an md5 (32); pass hash_algorithm")


def _download(origin: str, dest: Path, file_hash: str | None, algorithm: str) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(origin, timeout=60.0) as response:
                    shutil.copyfileobj(response, out, _CHUNK)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                raise OSError(f"get_file: could not download {origin}: {exc}") from exc
        if file_hash is not None:
            actual = hash_file(tmp, algorithm)
            if actual != file_hash.lower():
                raise ValueError(f"get_file: checksum mismatch for {dest.name} from {origin}: "
                                 f"expected {algorithm} {file_hash}, got {actual}; the "
                                 "download was discarded")
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _archive_kind(path: Path, archive_format: str | list | tuple | None) -> str | None:
    kinds = ["tar", "zip"] if archive_format in ("auto", None) else (
        [archive_format] if isinstance(archive_format, str) else list(archive_format))
    for kind in kinds:
        if kind == "tar" and tarfile.is_tarfile(path):
            return "tar"
        if kind == "zip" and zipfile.is_zipfile(path):
            return "zip"
        if kind not in ("tar", "zip"):
            raise ValueError(f"get_file: archive_format must be 'auto', 'tar' or 'zip', "
                             f"received {kind!r}")
    return None


def _check_tar_members(tar: tarfile.TarFile, root: Path, name: str) -> None:
    """Refuse absolute paths, ``..``, links and special files (what the data filter does)."""
    base = root.resolve()
    for m in tar.getmembers():
        dest = (root / m.name).resolve()
        if (Path(m.name).is_absolute() or (dest != base and base not in dest.parents)
                or not (m.isfile() or m.isdir())):
            raise ValueError(f"get_file: refused to extract {name}: member {m.name!r} is a "
                             "link, a special file or would be written outside the target")


def extract_archive(path: str | os.PathLike[str], target: str | os.PathLike[str],
                    archive_format: str | list | tuple | None = "auto") -> bool:
    """Extracts a tar (any compression) or zip archive into ``target``, refusing members
    that would land outside it.

    Returns:
        True when ``path`` was an archive of an allowed format and was extracted.

    Raises:
        ValueError: A member with an absolute path, ``..``, a link out of ``target`` or a
            device file (nothing of the archive is kept then).
    """
    path, target = Path(path), Path(target)
    kind = _archive_kind(path, archive_format)
    if kind is None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part"))
    try:
        if kind == "tar":
            with tarfile.open(path) as tar:
                if hasattr(tarfile, "data_filter"):
                    try:
                        tar.extractall(tmp, filter="data")
                    except tarfile.FilterError as exc:
                        raise ValueError(f"get_file: refused to extract {path.name}: "
                                         f"{exc}") from exc
                else:  # Python < 3.10.12 / 3.11.4: the same checks by hand
                    _check_tar_members(tar, tmp, path.name)
                    tar.extractall(tmp)
        else:
            with zipfile.ZipFile(path) as z:
                root = tmp.resolve()
                for name in z.namelist():
                    dest = (tmp / name).resolve()
                    if Path(name).is_absolute() or (dest != root and root not in dest.parents):
                        raise ValueError(f"get_file: refused to extract {path.name}: member "
                                         f"{name!r} would be written outside {target}")
                z.extractall(tmp)
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def get_file(fname: str | None = None, origin: str | None = None, untar: bool = False,
             md5_hash: str | None = None, file_hash: str | None = None,
             cache_subdir: str = "datasets", hash_algorithm: str = "auto",
             extract: bool = False, archive_format: str | list | tuple | None = "auto",
             cache_dir: str | os.PathLike[str] | None = None,
             force_download: bool = False) -> str:
    """Returns the local path of a file, downloading it from ``origin`` only when it is not
    already in the cache, like ``keras.utils.get_file``.

    The file is ``cache_dir/cache_subdir/fname``. A cached file whose hash does not match
    ``file_hash`` is downloaded again; a download whose hash does not match is discarded.

    Args:
        fname: File name in the cache; None takes the last part of ``origin``'s path. An
            absolute path is used as it is (``cache_dir`` is ignored).
        origin: URL (http, https or file) to download from when the file is not cached.
        untar: Keras' older form of ``extract`` for a ``.tar.gz``: the archive is
            ``fname + ".tar.gz"``, extracted into the cache folder; returns
            ``cache_subdir/fname``.
        md5_hash: Deprecated spelling of ``file_hash`` with an md5.
        file_hash: Expected sha256 or md5 (hex) of the file.
        cache_subdir: Sub-folder of ``cache_dir``.
        hash_algorithm: ``"auto"`` (by the hash's length), ``"sha256"`` or ``"md5"``.
        extract: Extract the archive (tar, tar.gz/bz2/xz or zip) into
            ``<cache>/<name without its archive suffix>_extracted`` and return that folder.
        archive_format: ``"auto"``, ``"tar"``, ``"zip"`` or a list of them.
        cache_dir: Cache root; default ``$KERAS_HOME`` or ``~/.keras`` (so files Keras
            already fetched are found).
        force_download: Download even when the file is cached.

    Returns:
        The path of the file (or of the extracted folder), as a string.

    Raises:
        ValueError: Bad arguments, a checksum mismatch, or an unsafe archive.
        OSError: The file is not cached and could not be downloaded (or downloads are
            disabled by ``KILN_DATASETS_OFFLINE=1``); the message says where it looked.

    Example:
        >>> path = kiln.utils.get_file(
        ...     "flower_photos", origin="https://example.com/flower_photos.tgz",
        ...     extract=True)  # doctest: +SKIP
    """
    if origin is None and fname is None:
        raise ValueError("get_file: pass fname or origin (received neither)")
    if md5_hash is not None and file_hash is None:
        file_hash, hash_algorithm = md5_hash, "md5"
    algorithm = _algorithm(file_hash, hash_algorithm) if file_hash else "sha256"
    if fname is None:
        fname = os.path.basename(urllib.parse.urlsplit(origin).path)
        if not fname:
            raise ValueError(f"get_file: cannot take a file name from origin {origin!r}; "
                             "pass fname")
    if cache_dir is None:
        cache_dir = os.environ.get("KERAS_HOME") or os.path.join("~", ".keras")
    datadir = Path(cache_dir).expanduser() / cache_subdir
    if untar:
        stem = fname[:-len(".tar.gz")] if fname.endswith(".tar.gz") else fname
        fpath = datadir / (stem + ".tar.gz")
    else:
        fpath = datadir / fname
    if not fpath.is_absolute():
        fpath = fpath.resolve()

    need = force_download or not fpath.is_file()
    if not need and file_hash is not None and hash_file(fpath, algorithm) != file_hash.lower():
        need = True  # a stale or damaged copy: fetch it again (Keras does the same)
    if need:
        if origin is None:
            raise OSError(f"get_file: {fpath} is not cached (or fails its hash) and no origin "
                          "was given to download it from")
        if config.env_flag(OFFLINE_ENV):
            raise OSError(f"get_file: {fpath} is not cached (or fails its hash) and downloads "
                          f"are disabled by {OFFLINE_ENV}; copy the file from {origin} there")
        _download(origin, fpath, file_hash, algorithm)

    if untar:
        target = datadir / stem
        if need or not target.exists():
            if not extract_archive(fpath, target, "tar"):
                raise ValueError(f"get_file: {fpath} is not a tar archive")
            _flatten_single(target, stem)
        return str(target)
    if extract:
        base = fpath.name
        for suffix in (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".tar", ".zip"):
            if base.endswith(suffix):
                base = base[:-len(suffix)]
                break
        target = fpath.parent / f"{base}_extracted"
        if need or not target.exists():
            if not extract_archive(fpath, target, archive_format):
                raise ValueError(f"get_file: {fpath} is not an archive of format "
                                 f"{archive_format!r}; cannot extract it")
        return str(target)
    return str(fpath)


def _flatten_single(target: Path, stem: str) -> None:
    """``untar``: Keras extracts into the cache folder, so an archive holding ``stem/``
    gives ``cache/stem``; here it was extracted into ``cache/stem``, so lift that level."""
    inner = target / stem
    if inner.is_dir() and [p.name for p in target.iterdir()] == [stem]:
        tmp = target.with_name(f".{stem}.lift")
        os.replace(inner, tmp)
        target.rmdir()
        os.replace(tmp, target)
