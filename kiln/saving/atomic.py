"""The one way kiln writes a file: temp file in the same folder, fsync, rename over the target.

Every file kiln writes (weights, models, checkpoints, backups) goes through
:func:`atomic_write`. A reader therefore sees either the previous complete file or the new
complete file, never a half-written one, even if the writing process is killed (SIGKILL, power
loss after the rename is on disk).

A writer killed before the rename leaves a temporary file ``.NAME.<pid>.<random>.kiln-tmp``
next to the target. It is harmless (nothing reads it) and the next write to the same target
removes those whose process is gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

TMP_SUFFIX = ".kiln-tmp"


def _tmp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}."


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def stale_temp_files(path: str | os.PathLike) -> list[str]:
    """Temporary files left next to ``path`` by writers that are no longer running."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    prefix = _tmp_prefix(path)
    out = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if not (name.startswith(prefix) and name.endswith(TMP_SUFFIX)):
            continue
        middle = name[len(prefix):-len(TMP_SUFFIX)].split(".")
        try:
            pid = int(middle[0])
        except (ValueError, IndexError):
            continue
        if not _pid_alive(pid):
            out.append(os.path.join(folder, name))
    return out


def _fsync_path(path: str, directory: bool = False) -> None:
    flags = os.O_RDONLY
    if directory and hasattr(os, "O_DIRECTORY"):
        flags |= os.O_DIRECTORY
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:  # some platforms (Windows) cannot open folders; nothing to sync there
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems do not support fsync on folders (EINVAL); the rename is done.
        if not (directory and exc.errno in (errno.EINVAL, errno.EBADF, errno.ENOTSUP)):
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Context manager: yields a temporary path to write; on success it replaces ``path``.

    On an exception the temporary file is removed, ``path`` is untouched and the exception
    propagates.

    Example:
        >>> with atomic_path("model.h5") as tmp:
        ...     with h5py.File(tmp, "w") as f:
        ...         f["x"] = np.zeros(3)
    """
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {os.fspath(path)!r}: folder {folder!r} does "
                                "not exist")
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot write {os.fspath(path)!r}: it is a folder")
    for stale in stale_temp_files(target):
        with contextlib.suppress(OSError):
            os.remove(stale)
    tmp = os.path.join(folder, f"{_tmp_prefix(target)}{os.getpid()}.{uuid.uuid4().hex[:8]}"
                               f"{TMP_SUFFIX}")
    try:
        yield tmp
        if not os.path.exists(tmp):
            raise RuntimeError(f"atomic write of {target!r}: the writer produced no file")
        _fsync_path(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_path(folder, directory=True)


def atomic_write(path: str | os.PathLike, write: Callable[[str], Any]) -> None:
    """Writes ``path`` atomically: ``write(tmp_path)`` fills a temporary file in the same
    folder, which is fsynced and renamed over ``path`` (then the folder is fsynced).

    Args:
        path: the target file.
        write: a function that creates the file at the path it is given (and closes it).

    Example:
        >>> atomic_write("a.json", lambda p: open(p, "w").write("{}"))
    """
    with atomic_path(path) as tmp:
        write(tmp)
