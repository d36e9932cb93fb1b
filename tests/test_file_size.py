"""No source file of the package, the benchmarks, the examples or the scripts is over 600 lines
(docs/architecture.md, "File size"): a module that grows past it is split by what it does, as
the cuda backend's cuBLAS wrapper left ``_lower.py`` for ``_cublas.py`` and the benchmarks'
floors and worker handle left ``bench_cpu.py`` and ``bench_suite.py`` for ``floors.py`` and
``harness.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

import kiln

LIMIT = 600


ROOT = Path(kiln.__file__).parent.parent


@pytest.mark.parametrize("folder", ["kiln", "benchmarks", "examples", "scripts"])
def test_no_file_is_over_the_limit(folder):
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files or folder != "kiln", "the package's sources are not beside it"
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT}
    assert not long, f"files over {LIMIT} lines: {long}"


def test_the_architecture_page_stays_a_map():
    """docs/architecture.md is the map a newcomer reads in an afternoon: at most 500 lines
    (timings live in docs/performance.md, features in docs/features.md)."""
    page = ROOT / "docs" / "architecture.md"
    if not page.exists():
        pytest.skip("docs/ is not beside the package (an installed kiln)")
    n = len(page.read_text(encoding="utf-8").splitlines())
    assert n <= 500, f"docs/architecture.md has {n} lines, over 500"
