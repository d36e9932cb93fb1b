"""Find one of Keras' dataset files on disk, or download it (checked) into kiln's data home.

Shared by the loaders whose data is one Keras file (``boston_housing.npz``, ``reuters.npz``,
the CIFAR archives ...). Searched in order: the ``path`` argument when absolute,
``$KILN_DATA_DIR/<name>``, ``$KILN_DATA_DIR``, ``~/.kiln/datasets/<name>`` and
``~/.keras/datasets`` (Keras' cache). Otherwise the file is downloaded from
``$KILN_DATASETS_MIRROR/<name>/`` or the loader's ``BASE_URL`` into ``$KILN_DATA_DIR/<name>``
(else ``~/.kiln/datasets/<name>``), checked against the hash Keras publishes (sha256, or md5
when that is all Keras gives) and renamed into place only once verified.
"""

from __future__ import annotations

import os
from pathlib import Path

from kiln import config
from kiln.datasets import _fetch, _source


def places(name: str) -> list[tuple[str, Path]]:
    """``(label, folder)`` pairs searched for a dataset called ``name``."""
    ds = _source.Dataset(name=name, title=name, npz_name="", base_url="", sha256={},
                         raw_sha256={})
    out = _source.places(ds, None)
    keras = Path.home() / ".keras" / "datasets"
    return out + ([("Keras' cache", keras)] if all(p != keras for _, p in out) else [])


def find(name: str, title: str, path: str | os.PathLike[str], default_name: str, digest: str,
         base_url: str, how_to_get: tuple[str, ...] = ()) -> Path:
    """The file ``path`` names, found on disk or downloaded and verified.

    Args:
        name: Folder name of the dataset under the data home (``"reuters"``).
        title: For messages (``"Reuters"``).
        path: A file name searched for in :func:`places`, or an absolute path (a folder
            holding ``default_name`` works too).
        default_name: The file's name on the mirror.
        digest: Its sha256 (64 hex digits) or md5 (32).
        base_url: The mirror used unless ``$KILN_DATASETS_MIRROR`` is set.
        how_to_get: Lines for the not-found message.

    Returns:
        The path of the file.

    Raises:
        DatasetNotFoundError: Not on disk and the download failed or is disabled
            (``KILN_DATASETS_OFFLINE=1``); the message lists the places looked in.
        ValueError: The download failed its checksum (nothing is kept).
    """
    given = Path(path).expanduser()
    if given.is_absolute():
        if given.is_dir():
            given = given / default_name
        if given.is_file():
            return given
        looked, target = [f"  - {given} (path argument): no such file"], given
    else:
        looked = []
        for label, folder in places(name):
            if (folder / given).is_file():
                return folder / given
            looked.append(f"  - {folder / given} ({label}): no such file")
        target = _source.data_home() / name / given
    env = config.env_url(_source.MIRROR_ENV)
    base = f"{env.rstrip('/')}/{name}" if env else base_url
    url = base.rstrip("/") + "/" + default_name
    if config.env_flag(_source.OFFLINE_ENV):
        problem = f"downloads are disabled by {_source.OFFLINE_ENV}"
    else:
        path, problem = _fetch.try_download(url, target, digest)
        if path is not None:
            return path
    lines = [
        f"{title}'s {default_name} was not found and could not be downloaded. Looked in:",
        *looked,
        f"Then {problem}.",
        "To get it:",
        *(f"  - {hint}" for hint in how_to_get),
        f"  - on a machine with internet, download {base_url.rstrip('/')}/{default_name} "
        f"({'sha256' if len(digest) == 64 else 'md5'} {digest}) and copy it into "
        f"$KILN_DATA_DIR/{name} or ~/.kiln/datasets/{name} (a Keras user's ~/.keras/datasets/ "
        "copy is found as it is)",
        f"  - or set {_source.DATA_DIR_ENV} to the folder holding it, or pass an absolute path",
        f"  - or set {_source.MIRROR_ENV} to a mirror serving <mirror>/{name}/{default_name}",
    ]
    raise _source.DatasetNotFoundError("\n".join(lines))


def split_index(n: int, test_split: float, what: str) -> int:
    """Keras' train/test cut ``int(n * (1 - test_split))``, after checking ``test_split``."""
    if isinstance(test_split, bool) or not isinstance(test_split, int | float) or not (
            0.0 <= test_split < 1.0):
        raise ValueError(f"{what}: test_split must be a float in [0, 1), received "
                         f"{test_split!r}")
    return int(n * (1 - test_split))
