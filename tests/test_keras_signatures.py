"""Every public callable that kiln shares with Keras 3.15 takes Keras' arguments: the same
names, order, kinds and defaults (kiln may add keyword-only extras after them).

The oracle is the checked-in table tests/fixtures/keras_api_3_15.json, written from Keras by
``scripts/keras_api_table.py --write``; keras is not needed here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load_table_module():
    spec = importlib.util.spec_from_file_location("keras_api_table",
                                                  ROOT / "scripts" / "keras_api_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLE = load_table_module()


def test_every_shared_callable_has_keras_parameters():
    table = TABLE.load_table()
    assert table["keras_version"] == "3.15.1"
    _, mismatches = TABLE.compare(table)
    assert not mismatches, (f"{len(mismatches)} kiln callables differ from Keras "
                            f"{table['keras_version']}:\n" + "\n".join(mismatches))


def test_the_table_covers_the_namespaces_and_model_methods():
    table = TABLE.load_table()
    layers = table["namespaces"]["layers"]
    assert "Dense" in layers["members"] and "LSTM" in layers["members"]
    # Keras' documented signature: Dense(units, activation=None, use_bias=True, ...)
    assert layers["signatures"]["Dense"][:3] == [
        ["units", "positional"], ["activation", "positional", None],
        ["use_bias", "positional", True]]
    assert table["namespaces"]["ops"]["signatures"]["add"] == [
        ["x1", "positional"], ["x2", "positional"]]
    assert {"Model.fit", "Model.save_weights", "Layer.add_weight"} <= set(table["methods"])


@pytest.mark.parametrize("keras_params, kiln_params, expected", [
    ([["x1", "positional"]], [["x", "positional"]], "parameter 1 is x, Keras has x1"),
    ([["a", "positional", 1]], [["a", "positional", 2]], "a=2, Keras: a=1"),
    ([["a", "positional", 1]], [["a", "keyword-only", 1]], "`a` is keyword-only"),
    ([["a", "positional"], ["b", "positional", None]], [["a", "positional"]],
     "missing b=null"),
    ([["a", "positional"]], [["a", "positional"], ["b", "positional", 0]],
     "extra parameters not keyword-only: b=0"),
    ([["a", "positional"], ["kw", "**kwargs"]], [["a", "positional"]], "missing **kw"),
    ([["a", "positional", [1, 1]]], [["a", "positional", 1]], "a=1, Keras: a=[1, 1]"),
])
def test_the_rule_names_what_differs(keras_params, kiln_params, expected):
    problem = TABLE.param_mismatch(keras_params, kiln_params)
    assert problem is not None and expected in problem


def test_the_rule_accepts_keras_parameters_with_keyword_only_extras():
    keras = [["a", "positional"], ["b", "positional", 0.0], ["kwargs", "**kwargs"]]
    kiln = [["a", "positional"], ["b", "positional", 0], ["extra", "keyword-only", None],
            ["kwargs", "**kwargs"]]
    assert TABLE.param_mismatch(keras, kiln) is None


def test_the_table_is_what_keras_gives():
    """Where Keras is installed: the checked-in table is what --write makes from it (in a
    fresh process on the numpy backend, as the table was written: the backend decides a few
    signatures, e.g. ``keras.name_scope``)."""
    keras = pytest.importorskip("keras")
    for needed in ("scipy", "jax"):  # Keras' NumPy backend (the table's) imports both
        pytest.importorskip(needed, reason="Keras' NumPy backend imports scipy and jax")
    table = TABLE.load_table()
    if keras.__version__ != table["keras_version"]:
        pytest.skip(f"Keras {keras.__version__} installed, the table is of "
                    f"{table['keras_version']}")
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import keras_api_table as t; "
            "print(json.dumps(t.build_table()))")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "scripts")],
                          env={**os.environ, "KERAS_BACKEND": "numpy"}, capture_output=True,
                          text=True, timeout=600, check=True)
    fresh = json.loads(done.stdout.strip().splitlines()[-1])
    stale = sorted(f"{ns}.{name}" for ns, entry in fresh["namespaces"].items()
                   for name in set(entry["signatures"]) | set(entry["members"])
                   if entry["signatures"].get(name) != table["namespaces"].get(ns, {}).get(
                       "signatures", {}).get(name)
                   or name not in table["namespaces"].get(ns, {}).get("members", []))
    assert fresh == table, f"the table is stale: run scripts/keras_api_table.py --write ({stale})"
