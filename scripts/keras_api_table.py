"""The table of Keras 3's public callables and their parameters, and kiln's agreement with it.

Three modes::

    KERAS_BACKEND=numpy python scripts/keras_api_table.py --write
        # needs keras: rewrites tests/fixtures/keras_api_3_15.json (every public name of the
        # namespaces in NAMESPACES, and for each callable its parameters: name, kind, default)
    python scripts/keras_api_table.py
        # offline: reads the JSON and kiln, prints the coverage per namespace (kiln has X of
        # Y names) and every callable whose parameters differ from Keras'
    python scripts/keras_api_table.py --mismatches
        # the same, only the mismatch list (exit 1 if there is any)

``tests/test_keras_signatures.py`` runs ``compare()`` on the checked-in JSON (no keras
needed) and ``scripts/gen_keras_compat.py`` puts the coverage into docs/keras-compatibility.md.

The rule (``param_mismatch``): kiln's parameters must start with Keras' parameters - same
names, order, kinds and defaults - except that Keras' ``**kwargs`` stays last; kiln may add
keyword-only parameters after Keras' own ones. A default Keras gives as an object (a function,
a class instance) is compared by its type name only.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "tests" / "fixtures" / "keras_api_3_15.json"

# Keras namespaces in the table ("" is the top level, `keras.Input` ...).
NAMESPACES = (
    "", "layers", "ops", "ops.nn", "ops.numpy", "ops.image", "ops.linalg", "ops.core",
    "ops.math", "losses", "metrics", "optimizers", "optimizers.schedules", "callbacks",
    "initializers", "regularizers", "constraints", "activations", "random", "utils",
    "models", "saving", "config", "backend",
)
# The methods users call on a Model or a Layer (table entries "Model.fit" ...).
METHODS = {
    "Model": ("__init__", "fit", "evaluate", "predict", "compile", "save", "save_weights",
              "load_weights", "train_on_batch", "test_on_batch", "predict_on_batch", "summary",
              "get_config", "from_config", "to_json", "get_layer", "export"),
    "Layer": ("__init__", "add_weight", "get_config", "from_config", "call", "build",
              "get_weights", "set_weights", "compute_output_shape"),
}
# Keras namespace -> the kiln modules that hold its names, first match wins.
KILN_MODULES = {
    "": ("kiln",), "ops.core": ("kiln.ops",), "ops.math": ("kiln.ops",),
    "ops.linalg": ("kiln.ops",), "backend": ("kiln.backend",),
}
# kiln objects that share a Keras name but are another thing, and why (not compared):
NOT_COMPARED = {
    "Function": "kiln.Function is the compiled graph function of kiln's core (inputs, "
                "outputs, updates), not Keras' functional-graph Operation",
    "KerasTensor": "kiln.KerasTensor is kiln's symbolic graph node, built by ops, not by users",
    "Variable": "kiln.Variable(value, ...) is the core's variable: it takes an initial value "
                "(Keras' first argument, `initializer`, also accepts an array)",
}
KINDS = {"POSITIONAL_ONLY": "positional-only", "POSITIONAL_OR_KEYWORD": "positional",
         "VAR_POSITIONAL": "*args", "KEYWORD_ONLY": "keyword-only", "VAR_KEYWORD": "**kwargs"}


# ---------------------------------------------------------------- describing a signature
def default_repr(value):
    """A JSON value for a default: the value itself where simple, else {"type": name}."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if not (isinstance(value, float) and value != value) else {"type": "nan"}
    if isinstance(value, (tuple, list)) and all(
            v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return {"type": type(value).__name__}


def describe(fn, drop_self: bool = False) -> list | None:
    """[[name, kind, default?], ...] of a callable, or None where it has no signature."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if drop_self and params:
        params = params[1:]
    out = []
    for p in params:
        row = [p.name, KINDS[p.kind.name]]
        if p.default is not inspect.Parameter.empty:
            row.append(default_repr(p.default))
        out.append(row)
    return out


def describe_object(obj) -> list | None:
    if inspect.isclass(obj):
        return describe(obj.__init__, drop_self=True)
    if callable(obj):
        return describe(obj)
    return None


def resolve(root, dotted: str):
    obj = root
    for part in [p for p in dotted.split(".") if p]:
        obj = getattr(obj, part)
    return obj


# ---------------------------------------------------------------- writing the table (keras)
def build_table() -> dict:
    import keras

    table = {"keras_version": keras.__version__, "namespaces": {}, "methods": {}}
    for ns in NAMESPACES:
        try:
            module = resolve(keras, ns)
        except AttributeError:
            continue
        members, sigs = [], {}
        for name in sorted(dir(module)):
            if name.startswith("_"):
                continue
            obj = getattr(module, name)
            if inspect.ismodule(obj):
                continue
            members.append(name)
            params = describe_object(obj)
            if params is not None:
                sigs[name] = params
        table["namespaces"][ns] = {"members": members, "signatures": sigs}
    for cls_name, methods in METHODS.items():
        cls = getattr(keras, cls_name)
        for m in methods:
            fn = getattr(cls, m)
            params = describe(fn, drop_self=not isinstance(
                inspect.getattr_static(cls, m), (classmethod, staticmethod)))
            table["methods"][f"{cls_name}.{m}"] = params
    return table


def write_table(path: Path = TABLE) -> None:
    table = build_table()
    path.parent.mkdir(parents=True, exist_ok=True)
    # one entry per line: small, and diffs stay readable
    lines = ["{", f'"keras_version": {json.dumps(table["keras_version"])},', '"namespaces": {']
    ns_items = list(table["namespaces"].items())
    for i, (ns, entry) in enumerate(ns_items):
        lines.append(f'{json.dumps(ns)}: {{"members": {json.dumps(entry["members"])},')
        lines.append('"signatures": {')
        sig_items = list(entry["signatures"].items())
        for j, (name, params) in enumerate(sig_items):
            comma = "," if j < len(sig_items) - 1 else ""
            lines.append(f"{json.dumps(name)}: {json.dumps(params)}{comma}")
        lines.append("}}" + ("," if i < len(ns_items) - 1 else ""))
    lines.append("},")
    lines.append('"methods": {')
    m_items = list(table["methods"].items())
    for j, (name, params) in enumerate(m_items):
        comma = "," if j < len(m_items) - 1 else ""
        lines.append(f"{json.dumps(name)}: {json.dumps(params)}{comma}")
    lines.append("}}")
    path.write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------- comparing kiln (offline)
def load_table(path: Path = TABLE) -> dict:
    return json.loads(path.read_text())


def kiln_lookup(ns: str, name: str):
    """kiln's object for keras.<ns>.<name>, or None."""
    for module_name in KILN_MODULES.get(ns, (f"kiln.{ns}",)):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, name):
            return getattr(module, name)
    return None


def kiln_method(qualname: str):
    cls_name, method = qualname.split(".")
    import kiln

    cls = getattr(kiln, cls_name)
    static = inspect.getattr_static(cls, method, None)
    if static is None:
        return None, False
    return getattr(cls, method), not isinstance(static, (classmethod, staticmethod))


def _fmt(row) -> str:
    name, kind = row[0], row[1]
    text = {"*args": f"*{name}", "**kwargs": f"**{name}"}.get(kind, name)
    if kind == "keyword-only":
        text = f"*, {text}"
    if len(row) > 2:
        text += f"={json.dumps(row[2])}"
    return text


def _same_default(k, o) -> bool:
    if len(k) != len(o):
        return False
    if len(k) == 2:
        return True
    a, b = k[2], o[2]
    if isinstance(a, dict) or isinstance(b, dict):
        return (a.get("type") if isinstance(a, dict) else type(a).__name__) == (
            b.get("type") if isinstance(b, dict) else type(b).__name__)
    if type(a) is not type(b) and not {type(a), type(b)} <= {int, float}:
        return False
    return a == b


def param_mismatch(keras_params: list, kiln_params: list) -> str | None:
    """None when kiln's parameters agree with Keras' (module docstring), else what differs."""
    if keras_params and all(p[1] in ("*args", "**kwargs") for p in keras_params):
        return None  # Keras' generic pass-through (Model.__init__(*args, **kwargs), Layer.call)
    k_var = [p for p in keras_params if p[1] == "**kwargs"]
    k_main = [p for p in keras_params if p[1] != "**kwargs"]
    o_var = [p for p in kiln_params if p[1] == "**kwargs"]
    o_main = [p for p in kiln_params if p[1] != "**kwargs"]
    problems = []
    for i, k in enumerate(k_main):
        if i >= len(o_main):
            problems.append(f"missing {', '.join(_fmt(p) for p in k_main[i:])}")
            break
        o = o_main[i]
        if k[0] != o[0]:
            problems.append(f"parameter {i + 1} is {_fmt(o)}, Keras has {_fmt(k)}")
            break
        if k[1] != o[1]:
            problems.append(f"`{k[0]}` is {o[1]}, Keras: {k[1]}")
        elif not _same_default(k, o):
            problems.append(f"{_fmt(o)}, Keras: {_fmt(k)}")
    else:
        extra = [p for p in o_main[len(k_main):] if p[1] != "keyword-only"]
        if extra:
            problems.append(f"extra parameters not keyword-only: "
                            f"{', '.join(_fmt(p) for p in extra)}")
    if k_var and not o_var:
        problems.append(f"missing **{k_var[0][0]}")
    return "; ".join(problems) if problems else None


def count_shared(table: dict) -> int:
    """How many distinct kiln callables the comparison checks (aliases counted once)."""
    seen = set()
    for ns, entry in table["namespaces"].items():
        for name in entry["signatures"]:
            obj = kiln_lookup(ns, name)
            if obj is not None and callable(obj) and not (not ns and name in NOT_COMPARED):
                seen.add(id(obj))
    return len(seen) + len(table["methods"])


def compare(table: dict) -> tuple[dict, list[str]]:
    """(coverage {ns: (kiln has, keras has)}, mismatch lines) for the table against kiln."""
    coverage, mismatches = {}, []
    seen = set()
    for ns, entry in table["namespaces"].items():
        present = 0
        for name in entry["members"]:
            obj = kiln_lookup(ns, name)
            if obj is None:
                continue
            present += 1
            keras_params = entry["signatures"].get(name)
            if keras_params is None or not callable(obj):
                continue
            kiln_params = describe_object(obj)
            label = f"keras.{ns}.{name}" if ns else f"keras.{name}"
            if not ns and name in NOT_COMPARED:
                continue
            if kiln_params is None:
                mismatches.append(f"{label}: kiln's object has no signature")
                continue
            problem = param_mismatch(keras_params, kiln_params)
            key = (id(obj), problem)
            if problem and key not in seen:
                seen.add(key)
                mismatches.append(f"{label}: {problem}")
        coverage[ns] = (present, len(entry["members"]))
    for qualname, keras_params in table["methods"].items():
        fn, bound = kiln_method(qualname)
        if fn is None:
            mismatches.append(f"keras.{qualname}: missing in kiln")
            continue
        problem = param_mismatch(keras_params, describe(fn, drop_self=bound))
        if problem:
            mismatches.append(f"keras.{qualname}: {problem}")
    return coverage, mismatches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the JSON (needs keras)")
    parser.add_argument("--mismatches", action="store_true", help="only the mismatch list")
    args = parser.parse_args(argv)
    if args.write:
        os.environ.setdefault("KERAS_BACKEND", "numpy")
        write_table()
        print(f"wrote {TABLE} ({TABLE.stat().st_size // 1024} KB)")
        return 0
    coverage, mismatches = compare(load_table())
    if not args.mismatches:
        for ns, (have, total) in coverage.items():
            print(f"keras.{ns or '(top level)'}: kiln has {have} of {total}")
    print(f"{len(mismatches)} of {count_shared(load_table())} shared callables differ")
    for line in mismatches:
        print("  " + line)
    return 1 if (args.mismatches and mismatches) else 0


if __name__ == "__main__":
    sys.exit(main())
