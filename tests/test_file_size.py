"""No source file of the package is over 600 lines (docs/architecture.md, "File size"): a
module that grows past it is split by what it does, as the cuda backend's cuBLAS wrapper
left ``_lower.py`` for ``_cublas.py``."""

from __future__ import annotations

from pathlib import Path

import kiln

LIMIT = 600


def test_no_package_file_is_over_the_limit():
    root = Path(kiln.__file__).parent
    long = {str(p.relative_to(root.parent)): n for p in sorted(root.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT}
    assert not long, f"files over {LIMIT} lines: {long}"
