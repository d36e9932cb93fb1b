"""The layout of the CPU backend (kiln/core/backends/cpu; docs/architecture.md, "The CPU
backend"), checked on the source with ``ast``.

Every module of the package is parsed; every ``import`` / ``from ... import`` inside it counts,
at module level and inside functions alike (relative imports resolved). An import of a name
that is itself a module (``from kiln.core.backends.cpu.runtime import threads``) is an edge to
that module; an import of a package edges to its ``__init__``. The rules:

1. the import graph of the backend's modules has no cycle (the test names one it finds);
2. at most :data:`MAX_FLAT` modules lie flat in ``cpu/``; the rest live in the subpackages;
3. every subpackage's ``__init__`` has a docstring (what it holds, what it may import);
4. the arrows between the subpackages point down (runtime -> kernels -> gemm -> codegen):
   generated code (``codegen``) knows no hand-written kernel, no product engine and no runtime
   piece; the product engines (``gemm``) know no hand-written kernel; kernels and engines use
   the runtime's worker API (``parts``, ``cpus``), never the pools behind it (``threads``,
   ``spin_pool``) nor the program (``program``, ``feeds``, ``loop``);
5. kernels describe their work in parts; only the runtime splits and runs them: no module of
   ``kernels`` or ``gemm`` names a split step, a pool or the thread count
   (:data:`RUNTIME_ONLY`: ``SplitCall``, ``KernelPool``, ``POOL``, ``kernel_threads``,
   ``chunks``) as an imported name or an attribute.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CPU = Path(__file__).resolve().parents[3] / "kiln" / "core" / "backends" / "cpu"
PACKAGE = "kiln.core.backends.cpu"
MAX_FLAT = 12


def module_name(path: Path) -> str:
    rel = path.relative_to(CPU).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(CPU.rglob("*.py"))}


def _resolve(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The absolute module a ``from`` import in module ``name`` names."""
    if not node.level:
        return node.module or ""
    base = name.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The backend's modules that ``source`` (module ``name``) imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, name, is_package)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        for target in targets:
            # the longest known prefix: ``import a.b.c`` where only ``a.b`` is a module
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: imports_of(path.read_text(), name, path.name == "__init__.py", known)
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the list of its modules (the first repeated at the end), or
    None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        path.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return path[path.index(v):] + [v]
            if v not in state:
                found = visit(v)
                if found:
                    return found
        path.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state:
            found = visit(u)
            if found:
                return found
    return None


def _short(name: str) -> str:
    return name[len(PACKAGE) + 1:] or "cpu"


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_inside_functions_and_relative_imports_count():
    known = {f"{PACKAGE}.x", f"{PACKAGE}.sub", f"{PACKAGE}.sub.y", f"{PACKAGE}.sub.z"}
    source = ("from kiln.core.backends.cpu.sub import y\n"
              "def f():\n    from . import z\n    import kiln.core.backends.cpu.x.attr\n")
    assert imports_of(source, f"{PACKAGE}.sub.w", False, known) == {
        f"{PACKAGE}.sub.y", f"{PACKAGE}.sub.z", f"{PACKAGE}.x"}


def test_the_cpu_backend_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in the CPU backend: " + " -> ".join(map(_short, cycle))


def test_at_most_twelve_modules_lie_flat_in_the_cpu_package():
    flat = sorted(p.name for p in CPU.glob("*.py"))
    assert len(flat) <= MAX_FLAT, (f"{len(flat)} modules flat in kiln/core/backends/cpu "
                                   f"(at most {MAX_FLAT}): {flat}")


def test_every_subpackage_says_what_it_holds():
    for init in sorted(CPU.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc, f"{init.relative_to(CPU)} lacks a docstring that " \
                                         "says what it holds and what it may import"


#: the runtime's upper modules: the program, which builds on everything below it
PROGRAM = ("runtime.program", "runtime.feeds", "runtime.loop")

#: the pools behind the worker API (``runtime.parts``): the runtime's alone
POOLS = ("runtime.threads", "runtime.spin_pool")

#: subpackage -> the modules / subpackages its modules must not import
FORBIDDEN = {
    "codegen": ("kernels", "gemm", "runtime", "registry", "lowering"),
    "gemm": ("kernels", "registry", *PROGRAM, *POOLS),
    "kernels": (*PROGRAM, *POOLS),
    # the worker API: below the kernels and engines that hand it their parts
    **{f"runtime.{m}": ("kernels", "gemm", "registry", "lowering", *PROGRAM)
       for m in ("threads", "spin_pool", "parts")},
    "runtime.cpus": ("runtime", "codegen", "gemm", "kernels"),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_the_arrows_between_subpackages_point_down(package):
    prefix = f"{PACKAGE}.{package}"
    wrong = sorted(
        f"{_short(u)} -> {_short(v)}" for u, targets in import_graph().items()
        if u == prefix or u.startswith(prefix + ".") for v in targets
        if v != u and any(v == f"{PACKAGE}.{f}" or v.startswith(f"{PACKAGE}.{f}.")
                          for f in FORBIDDEN[package]))
    assert not wrong, f"{package} imports above it: {wrong}"


#: names only the runtime uses: a split step, the pools, the thread count, the split itself
RUNTIME_ONLY = frozenset({"SplitCall", "KernelPool", "POOL", "kernel_threads", "chunks"})


def runtime_names(source: str) -> list[str]:
    """The names of :data:`RUNTIME_ONLY` that ``source`` imports or reads as an attribute
    (``threads.chunks(...)``), with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom | ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.rpartition(".")[2] in RUNTIME_ONLY]
        elif isinstance(node, ast.Attribute) and node.attr in RUNTIME_ONLY:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_the_runtime_name_finder_finds_imports_and_attributes():
    source = ("from kiln.core.backends.cpu.runtime.threads import SplitCall\n"
              "def f(t):\n    return t.kernel_threads(), t.POOL, chunks\n")
    assert sorted(runtime_names(source)) == ["1: import SplitCall", "3: .POOL",
                                             "3: .kernel_threads"]


@pytest.mark.parametrize("package", ["kernels", "gemm"])
def test_kernels_describe_parts_and_only_the_runtime_splits_them(package):
    wrong = {str(p.relative_to(CPU)): names for p in sorted((CPU / package).rglob("*.py"))
             if (names := runtime_names(p.read_text()))}
    assert not wrong, (f"{package} splits its own work (describe it to runtime.parts."
                       f"add_parts instead): {wrong}")
