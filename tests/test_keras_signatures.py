"""Every public callable that kiln shares with Keras 3.15 takes Keras' arguments: the same
names, order, kinds and defaults (kiln may add keyword-only extras after them).

The oracle is the checked-in table tests/fixtures/keras_api_3_15.json, written from Keras by
``scripts/keras_api_table.py --write``; keras is not needed here.
"""

from __future__ import annotations

import importlib.util
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
