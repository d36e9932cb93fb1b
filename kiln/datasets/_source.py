"""Find a dataset's files on disk, download them when absent, and load them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kiln import config
from kiln.datasets import _fetch, _idx

DATA_DIR_ENV = "KILN_DATA_DIR"
MIRROR_ENV = "KILN_DATASETS_MIRROR"
OFFLINE_ENV = "KILN_DATASETS_OFFLINE"

FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

Found = Path | dict[str, Path]


class DatasetNotFoundError(FileNotFoundError):
    """No copy of a dataset was found on disk and none could be downloaded."""


@dataclass(frozen=True)
class Dataset:
    """What the loader needs to know about one MNIST-style dataset."""

    name: str  # folder name under the data home, e.g. "mnist"
    title: str  # for messages, e.g. "MNIST"
    npz_name: str  # e.g. "mnist.npz"
    base_url: str  # mirror holding the four .gz files
    sha256: Mapping[str, str]  # "<file>.gz" -> sha256 of the gz file
    raw_sha256: Mapping[str, str]  # "<file>" -> sha256 of the decompressed idx file
    system_dirs: tuple[Path, ...] = ()
    how_to_get: tuple[str, ...] = ()


def spellings(stem: str) -> tuple[str, ...]:
    """File names accepted for ``stem``: ``train-images-idx3-ubyte[.gz]`` and the
    ``train-images.idx3-ubyte[.gz]`` spelling."""
    dotted = stem.replace("-idx", ".idx", 1)
    return (f"{stem}.gz", stem, f"{dotted}.gz", dotted)


def data_home() -> Path:
    """``$KILN_DATA_DIR`` if set, else ``~/.kiln/datasets``."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".kiln" / "datasets"


def default_dir(ds: Dataset) -> Path:
    """Folder that downloads and installs of ``ds`` go to."""
    return data_home() / ds.name


def mirror_url(ds: Dataset) -> str:
    """Base URL to download from: ``$KILN_DATASETS_MIRROR/<name>/`` or ``ds.base_url``."""
    env = config.env_url(MIRROR_ENV)
    base = f"{env.rstrip('/')}/{ds.name}" if env else ds.base_url
    return base.rstrip("/") + "/"


def places(ds: Dataset, path: str | os.PathLike[str] | None) -> list[tuple[str, Path]]:
    """The places searched, in order, as ``(label, path)`` pairs."""
    out: list[tuple[str, Path]] = []
    if path is not None:
        out.append(("path argument", Path(path).expanduser()))
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        root = Path(env).expanduser()
        out += [(f"${DATA_DIR_ENV}/{ds.name}", root / ds.name), (f"${DATA_DIR_ENV}", root)]
    out.append((f"~/.kiln/datasets/{ds.name}", Path.home() / ".kiln" / "datasets" / ds.name))
    out += [("system folder", folder) for folder in ds.system_dirs]
    unique: dict[Path, str] = {}
    for label, place in out:
        unique.setdefault(place, label)
    return [(label, place) for place, label in unique.items()]


def find_idx(folder: Path) -> tuple[dict[str, Path], list[str]]:
    """Return the idx files present in ``folder`` (by stem) and the stems missing."""
    found: dict[str, Path] = {}
    for stem in FILES:
        hit = next((folder / n for n in spellings(stem) if (folder / n).is_file()), None)
        if hit is not None:
            found[stem] = hit
    return found, [stem for stem in FILES if stem not in found]


def probe(ds: Dataset, place: Path) -> tuple[Found | None, str]:
    """Look at one place; return what was found there (or None) and a note for messages."""
    if place.is_file():
        return place, "found"
    if place.suffix == ".npz":
        return None, "no such file"
    if not place.is_dir():
        return None, "no such folder"
    found, missing = find_idx(place)
    if not missing:
        return found, "found"
    if (place / ds.npz_name).is_file():
        return place / ds.npz_name, "found"
    if found:
        have = ", ".join(p.name for p in found.values())
        return None, f"incomplete: has {have}, lacks {', '.join(missing)}"
    return None, f"no {ds.title} files"


def read(source: Found) -> _idx.Splits:
    """Load a found npz file or set of four idx files."""
    if isinstance(source, Path):
        return _idx.check_splits(_idx.read_npz(source), str(source))
    x_train, y_train, x_test, y_test = (_idx.read_idx(source[stem]) for stem in FILES)
    where = str(source[FILES[0]].parent)
    return _idx.check_splits(((x_train, y_train), (x_test, y_test)), where)


def fetch(ds: Dataset, target: Path | None = None) -> Path:
    """Download the gz files missing from ``target`` (default: :func:`default_dir`).

    Raises:
        DownloadError: A file could not be fetched.
        ValueError: A checksum did not match (the bad file is not kept).
    """
    target = default_dir(ds) if target is None else target
    created = [d for d in (target, *target.parents) if not d.exists()]  # deepest first
    missing = find_idx(target)[1] if target.is_dir() else list(FILES)
    base = mirror_url(ds)
    try:
        for stem in missing:
            name = f"{stem}.gz"
            _fetch.download(base + name, target / name, ds.sha256[name], ds.raw_sha256.get(stem))
    except BaseException:
        for folder in created:  # leave no empty folders behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    return target


def load(ds: Dataset, path: str | os.PathLike[str] | None = None) -> _idx.Splits:
    """Search the places in order, else download into :func:`default_dir`, then load.

    Raises:
        DatasetNotFoundError: Nothing found and the download failed or is disabled.
        ValueError: Bad files, or a downloaded file failed its checksum.
    """
    looked = []
    for label, place in places(ds, path):
        source, note = probe(ds, place)
        if source is not None:
            return read(source)
        looked.append(f"  - {place} ({label}): {note}")
    target = default_dir(ds)
    if config.env_flag(OFFLINE_ENV):
        problem = f"downloads are disabled by {OFFLINE_ENV}"
    else:
        try:
            fetch(ds, target)
        except _fetch.DownloadError as exc:
            problem = f"download from {mirror_url(ds)} into {target} failed: {exc}"
        else:
            found, _ = find_idx(target)
            return read(found)
    raise DatasetNotFoundError(_not_found_message(ds, looked, problem))


def _not_found_message(ds: Dataset, looked: list[str], problem: str) -> str:
    names = ", ".join(f"{stem}.gz" for stem in FILES)
    lines = [
        f"{ds.title} was not found and could not be downloaded. Looked in:",
        *looked,
        f"Then {problem}.",
        f"Expected in one folder: {names} (gzipped or not; the 'train-images.idx3-ubyte' "
        f"spelling works too), or a Keras-style {ds.npz_name}.",
        "To get the files:",
        *(f"  - {hint}" for hint in ds.how_to_get),
        f"  - or put them in a folder and set {DATA_DIR_ENV} to it "
        f"(searched as ${DATA_DIR_ENV}/{ds.name} and ${DATA_DIR_ENV}), or pass path=...",
        f"  - or set {MIRROR_ENV} to a mirror serving <mirror>/{ds.name}/<file>.gz",
    ]
    return "\n".join(lines)
