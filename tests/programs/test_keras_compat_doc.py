"""docs/keras-compatibility.md is what scripts/gen_keras_compat.py writes from today's code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_keras_compat",
                                                  ROOT / "scripts" / "gen_keras_compat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_doc_is_up_to_date(tmp_path):
    gen = load_generator()
    out = tmp_path / "keras-compatibility.md"
    assert gen.main(["--out", str(out)]) == 0
    assert out.read_text() == (ROOT / "docs" / "keras-compatibility.md").read_text(), (
        "docs/keras-compatibility.md is out of date: run python scripts/gen_keras_compat.py")


def test_the_tables_say_what_kiln_has(monkeypatch):
    gen = load_generator()
    import kiln.layers

    # kiln has every Keras 3.15 layer: take one away to see it listed as missing
    monkeypatch.delattr(kiln.layers, "HashedCrossing")
    section = "\n".join(gen.family_section("layers"))
    present = section.split("**Present")[1].split("\n")[0]
    missing = section.split("**Missing")[1].split("\n")[0]
    # Dense exists in kiln; a name kiln lacks must be listed as missing, never as present
    assert "`Dense`" in present and "`Dense`" not in missing
    absent = [n for n in gen.KERAS_NAMES["layers"] if not hasattr(kiln.layers, n)]
    assert absent == ["HashedCrossing"]
    assert "`HashedCrossing`" in missing and "`HashedCrossing`" not in present


def test_check_mode_reports_a_stale_file(tmp_path):
    gen = load_generator()
    stale = tmp_path / "doc.md"
    stale.write_text("old\n")
    assert gen.main(["--check", "--out", str(stale)]) == 1
    assert gen.main(["--out", str(stale)]) == 0
    assert gen.main(["--check", "--out", str(stale)]) == 0
