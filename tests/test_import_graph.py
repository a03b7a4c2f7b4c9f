"""The modules of ppl_vae import one another in an order that only goes down: no cycle, lazy
(function-level) imports and the package ``__init__`` each import runs included, neither between
modules nor between subpackages; models do not depend on the objectives' terms."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ppl_vae"


def _module_files() -> dict[str, Path]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside ``if TYPE_CHECKING:`` blocks (never run)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return skipped


def _imports_by_name(node: ast.AST) -> bool:
    """Whether ``node`` is ``importlib.import_module("literal.name")`` (or ``import_module(...)``)."""
    return (
        isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
        and bool(node.args) and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
    )


def _packages_loaded_with(target: str, importer: str) -> set[str]:
    """The packages whose ``__init__`` importing ``target`` from ``importer`` runs: ``target``'s
    enclosing packages, less those enclosing ``importer`` (already loaded when it runs)."""
    parts = target.split(".")
    enclosing = {".".join(parts[:end]) for end in range(1, len(parts))}
    importer_parts = importer.split(".")
    loaded = {".".join(importer_parts[:end]) for end in range(1, len(importer_parts) + 1)}
    return enclosing - loaded


def import_graph() -> dict[str, set[str]]:
    """Module -> the ppl_vae modules it imports anywhere in its code (module level or inside
    functions, ``importlib.import_module`` of a literal name included), ``from package import
    name`` resolved to the submodule when ``name`` is one,
    with the package ``__init__`` modules each import runs on the way (importing
    ``ppl_vae.models.variables`` runs ``ppl_vae.models``)."""
    files = _module_files()

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_blocks(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
            elif _imports_by_name(node):
                targets.add(node.args[0].value)
        imported = {resolved for t in targets if t.startswith("ppl_vae")
                    for resolved in [resolve(t)] if resolved and resolved != module}
        graph[module] = imported.union(*(_packages_loaded_with(t, module) for t in imported))
    return graph


def subpackage_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between ppl_vae's subpackages and top-level modules: ``ppl_vae.infer``
    imports ``ppl_vae.models`` when any module of the one imports any module of the other."""

    def subpackage(module: str) -> str:
        return ".".join(module.split(".")[:2])

    collapsed: dict[str, set[str]] = {subpackage(module): set() for module in graph}
    for module, targets in graph.items():
        collapsed[subpackage(module)].update(subpackage(t) for t in targets)
    for node, targets in collapsed.items():
        targets.discard(node)
    return collapsed


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_ppl_vae_lazy_imports_included():
    assert cycles(import_graph()) == []


def test_no_import_cycle_between_subpackages():
    assert cycles(subpackage_graph(import_graph())) == []


def test_importing_a_submodule_runs_the_packages_around_it_not_the_importers_own():
    assert _packages_loaded_with("ppl_vae.models.vae", "ppl_vae.infer.parted") == {"ppl_vae.models"}
    assert _packages_loaded_with("ppl_vae.infer.terms", "ppl_vae.infer.parted") == set()
    assert _packages_loaded_with("ppl_vae.infer.terms", "ppl_vae.infer") == set()


def test_a_module_imported_by_a_literal_name_counts():
    tree = ast.parse('importlib.import_module("ppl_vae.recipes.vae")\nimport_module(f"ppl_vae.{x}")')
    assert [node.args[0].value for node in ast.walk(tree) if _imports_by_name(node)] == ["ppl_vae.recipes.vae"]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_models_do_not_import_the_objectives_terms():
    graph = import_graph()
    offending = {module: sorted(targets) for module, targets in graph.items()
                 if module.startswith("ppl_vae.models") and any(t.startswith("ppl_vae.infer.terms") for t in targets)}
    assert offending == {}
