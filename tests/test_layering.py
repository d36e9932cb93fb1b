"""The layering of kiln's packages (docs/architecture.md, "The layers of the house"),
checked on the source.

Every module under ``kiln/`` is parsed with ``ast``; every import counts, the ones inside
functions too (``import x``, ``from x import y``, relative imports resolved). The rules:

1. ``kiln.ops`` and the package ``kiln.core`` itself (its ``__init__``) are the only way in
   to the compiler: nothing outside ``kiln/core`` imports ``kiln.core.<module>`` (``kiln/ops.py``,
   the face, is exempt).
2. ``kiln/core`` imports nothing from kiln but ``kiln.config`` and ``kiln.core.*``.
3. ``layers`` never imports ``models`` or ``callbacks``.
4. ``datasets`` imports nothing of kiln but itself and ``kiln.config`` (so never core, ops,
   layers or models).
5. In general an import points down :data:`ORDER` (or stays in its tier); the few exceptions
   are listed in :data:`ALLOWED_UPWARD`, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

KILN = Path(__file__).resolve().parents[1] / "kiln"

#: The packages (top-level modules and folders of kiln/), lowest first. An import may point
#: to its own tier or a lower one. The root package ``kiln`` (kiln/__init__.py: the public
#: face, which loads the rest lazily) sits above everything.
ORDER: list[set[str]] = [
    # "registry" (the one class registry) imports nothing from kiln: every package may use it.
    {"config", "registry"},
    {"core"},
    # "foreign" (kiln values given to JAX and TensorFlow: Variables as pytrees, tf conversion)
    {"ops", "tape", "foreign"},
    # "eager" (the one eager path, compile-and-cache for layers, losses and metrics) is
    # placed with the small helper modules that layers build on.
    {"activations", "initializers", "regularizers", "constraints", "random_state", "eager",
     # "distribution" (kiln.distribution: ranks, the MPI transport) needs only core.
     "distribution"},
    {"layers"},
    {"losses", "metrics", "optimizers",
     # "random" (kiln.random: Keras-style draws, SeedGenerator) reads the trace context
     "random"},
    # callbacks and saving need only a duck-typed model; models (fit builds a CallbackList,
    # save calls saving, export calls kiln.export) sits above them. export writes a graph
    # (kiln.core, kiln.ops) to a file (kiln.saving.atomic).
    {"callbacks", "saving", "export"},
    # "capture" (@kiln.function: traces eager-tape code - models, losses, optimizers,
    # metrics - into one graph) reads the trace context like a custom train_step.
    {"models", "capture"},
    # "preprocessing" (kiln.preprocessing: Keras' aliases of kiln.utils' functions);
    # "backend" (kiln.backend: Keras' keras.backend names, kiln.config's settings and
    # kiln.utils' dtype helpers); "scopes" (Keras' top-level helpers: device, name_scope,
    # remat ..., Operation, which names itself as layers do)
    {"utils", "preprocessing", "backend", "scopes"},
    # "applications" (kiln.applications: Keras' model zoo) builds functional models from
    # layers and loads weights through models/saving
    {"applications"},
]
RANK = {pkg: i for i, tier in enumerate(ORDER) for pkg in tier}

#: (importer module, imported module, reason): the imports that may point up.
ALLOWED_UPWARD: list[tuple[str, str, str]] = [
    # kiln.saving.load_model / deserialize_model rebuild Sequential/Functional/Model, which
    # kiln.models registers (register_builtin) when it is imported. The public names stay in
    # kiln.saving for compatibility, so its module __getattr__ imports kiln.models lazily,
    # only when one of these two names is asked for.
    ("kiln.saving", "kiln.models", "kiln.saving.load_model/deserialize_model: lazy, registers "
     "the model classes"),
    # tf.keras' Layer.add_metric(value, name=...) averages ``value`` in a metrics.Mean, created
    # on the first call (inside the function: importing kiln.layers never loads metrics)
    ("kiln.layers.base", "kiln.metrics", "Layer.add_metric: lazy, the Mean of a named value"),
]


# ---- the checker ---------------------------------------------------------------------------
def module_name(path: Path, root: Path = KILN) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(root: Path = KILN) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def package_of(module: str) -> str:
    """``kiln.layers.base`` -> ``layers``; ``kiln.ops`` -> ``ops``; ``kiln`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _lazy_root_attrs(root: Path = KILN) -> dict[str, str]:
    """``from kiln import Sequential``: kiln/__init__.py's ``_LAZY_ATTRS`` says which module
    such a name comes from."""
    init = root / "__init__.py"
    if not init.exists():
        return {}
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_LAZY_ATTRS" for t in node.targets):
            return {k: v[0] for k, v in ast.literal_eval(node.value).items()}
    return {}


def imports_of(module: str, source: str, modules: set[str], is_package: bool = False,
               root_attrs: dict[str, str] | None = None) -> list[tuple[int, str, str]]:
    """``(line, imported kiln module, import as written)`` for every kiln import in
    ``source`` (function bodies included). ``from a import b`` imports ``a.b`` when that is a
    module, else ``a``."""
    root_attrs = root_attrs or {}
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "kiln" or alias.name.startswith("kiln."):
                    out.append((node.lineno, alias.name, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                if node.level > 1:
                    base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base != "kiln" and not base.startswith("kiln."):
                continue
            names = ", ".join(a.name for a in node.names)
            text = f"from {'.' * node.level}{node.module or ''} import {names}"
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target not in modules:
                    target = root_attrs.get(alias.name, base) if base == "kiln" else base
                if (node.lineno, target, text) not in out:
                    out.append((node.lineno, target, text))
    return out


def violations_of(module: str, imports: list[tuple[int, str, str]], where: str) -> list[str]:
    """The layering rules (module docstring) applied to one module's imports."""
    out = []
    pkg = package_of(module)
    allowed = {(a, b) for a, b, _ in ALLOWED_UPWARD}
    for line, target, text in imports:
        tpkg = package_of(target)
        loc = f"{where}:{line}: {text}"
        if pkg == "" or tpkg == pkg:  # the root face; imports inside one package
            continue
        if pkg == "core":
            if tpkg != "config":
                out.append(f"{loc} -- kiln/core may import only kiln.config and kiln.core.*")
            continue
        if target.startswith("kiln.core.") and module != "kiln.ops":
            out.append(f"{loc} -- {target} is private to kiln/core: use the names of "
                       "`kiln.core` or `kiln.ops`")
            continue
        if pkg == "datasets":
            if tpkg != "config":
                out.append(f"{loc} -- kiln.datasets may import only kiln.config and itself")
            continue
        if tpkg == "":  # `import kiln`, `from kiln import __version__`: the root's own names
            continue
        if pkg == "layers" and tpkg in ("models", "callbacks"):
            out.append(f"{loc} -- layers must not import {tpkg}")
            continue
        if pkg not in RANK or tpkg not in RANK:
            unknown = pkg if pkg not in RANK else tpkg
            out.append(f"{loc} -- package {unknown!r} has no place in ORDER "
                       "(tests/test_layering.py): add it")
            continue
        if RANK[tpkg] > RANK[pkg] and (module, target) not in allowed:
            out.append(f"{loc} -- {pkg} imports {tpkg}, which sits above it")
    return out


def check_source(module: str, source: str, where: str | None = None,
                 modules: set[str] | None = None, is_package: bool = False) -> list[str]:
    """The violations of one module given as source text."""
    if modules is None:
        modules = set(all_modules())
    found = imports_of(module, source, modules, is_package, _lazy_root_attrs())
    return violations_of(module, found, where or module)


def check_tree(root: Path = KILN) -> list[str]:
    mods = all_modules(root)
    names = set(mods)
    root_attrs = _lazy_root_attrs(root)
    out = []
    for mod, path in mods.items():
        found = imports_of(mod, path.read_text(encoding="utf-8"), names,
                           path.name == "__init__.py", root_attrs)
        out += violations_of(mod, found, str(path.relative_to(root.parent)))
    return out


# ---- the tests ---------------------------------------------------------------------------------
def test_every_package_has_a_place():
    packages = {package_of(m) for m in all_modules()} - {""}
    assert packages <= set(RANK) | {"datasets"}, sorted(packages - set(RANK))


def test_allowed_upward_edges_point_up_and_exist():
    mods = set(all_modules())
    for importer, imported, reason in ALLOWED_UPWARD:
        assert importer in mods and reason
        assert RANK[package_of(imported)] > RANK[package_of(importer)], (importer, imported)


def test_kiln_imports_follow_the_layering():
    problems = check_tree()
    assert not problems, "layering violations:\n" + "\n".join(problems)


def test_checker_catches_a_private_core_import_in_a_function():
    src = "def f():\n    from kiln.core.ops._rules import as_node\n    return as_node\n"
    found = check_source("kiln.layers.fake", src)
    assert len(found) == 1 and "kiln.layers.fake:2" in found[0]
    assert "kiln.core.ops._rules" in found[0]


def test_checker_catches_a_submodule_imported_from_the_core_package():
    found = check_source("kiln.metrics", "from kiln.core import executor, Node\n")
    assert len(found) == 1 and "kiln.core.executor" in found[0]
    assert check_source("kiln.metrics", "from kiln.core import Node, convert_to_tensor\n") == []


def test_checker_resolves_relative_imports():
    found = check_source("kiln.layers.fake", "from ..models import model\n")
    assert found and "layers must not import models" in found[0]
    found = check_source("kiln.saving", "from .. import callbacks\n", is_package=True)
    assert found == []  # same tier
    assert check_source("kiln.layers.fake", "from .base import Layer\n") == []


def test_checker_catches_upward_imports_and_core_imports():
    assert check_source("kiln.optimizers.fake", "import kiln.models\n")
    assert check_source("kiln.callbacks.fake", "from kiln.models.model import Model\n")
    assert check_source("kiln.layers.fake", "from kiln import Sequential\n")
    assert check_source("kiln.core.fake", "import kiln.layers\n")
    assert check_source("kiln.core.fake", "import kiln\n")
    assert check_source("kiln.core.fake", "import kiln.config\nfrom kiln.core import ir\n") == []
    assert check_source("kiln.datasets.fake", "from kiln import ops\n")
    assert check_source("kiln.ops", "from kiln.core.ops.linalg import matmul\n") == []
    assert check_source("kiln.models.fake", "from kiln.saving import registration\n") == []
    # the allowed upward edge is allowed from kiln.saving only
    assert check_source("kiln.saving", "import kiln.models\n", is_package=True) == []
    assert check_source("kiln.saving.api", "import kiln.models\n")
