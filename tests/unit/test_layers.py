"""The package's import graph: no circle, and every import goes down the layers.

No database needed: imports are read with :mod:`ast` (type-only and function-local
imports count too, so a circle cannot hide behind them). The layers, bottom up, are the
architecture README.md's "Inside" section describes.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "pgqueue"

#: Bottom up. A module may import modules of its own layer or below, never above; a
#: module is placed by its longest matching prefix (a package name covers its modules).
LAYERS: list[set[str]] = [
    {"errors", "_version", "models", "config", "retry", "_duration", "_task_args", "unique", "_tasks"},
    {"_dsn", "embedded", "logging_setup", "_enqueue", "_wake", "cron.ticks"},
    {"_db"},  # the SQL seam
    {"task", "cron.schedule", "metrics", "roles"},
    {"maintenance", "migrate", "cron.scheduler", "cron", "results", "workflow", "batch"},
    {"worker", "ops"},
    {"app"},
    {"runner", "pgqueue"},  # "pgqueue": the package's own __init__, the public API
    {"testing"},  # helpers for users' tests: nothing imports them
    {"cli", "__main__", "dashboard"},
    {"contrib"},  # framework integrations (Django's commands wrap the CLI): nothing imports them
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "pgqueue"


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int:
    best, rank = "", -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, rank = name, i
    assert rank >= 0, f"module {module} is in no layer: add it to LAYERS"
    return rank


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """(imported pgqueue module, line) for every import in ``module``."""
    path = MODULES[module]
    is_pkg = path.name == "__init__.py"
    here = [] if module == "pgqueue" else module.split(".")
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module == "pgqueue" or node.module.startswith("pgqueue.")):
                target = node.module.removeprefix("pgqueue").lstrip(".")
            else:
                continue
            subs = [f"{target}.{a.name}".lstrip(".") for a in node.names]
            found = [s for s in subs if s in MODULES]
            if len(found) == len(subs):
                yield from ((s, node.lineno) for s in found)
            else:
                yield (target or "pgqueue", node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("pgqueue."):
                    yield (alias.name.removeprefix("pgqueue."), node.lineno)


GRAPH = {m: sorted({t for t, _ in imports_of(m) if t != m}) for m in MODULES}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    up = [
        f"{MODULES[module].relative_to(REPO)}:{line}: imports {target} (layer {layer_of(target)} > {layer_of(module)})"
        for target, line in imports_of(module)
        if target in MODULES and layer_of(target) > layer_of(module)
    ]
    assert not up, "\n".join(up)


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle() -> None:
    assert cycles(GRAPH) == []


def test_the_cycle_check_finds_a_circle() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def test_only_the_command_line_imports_typer_and_rich() -> None:
    users = sorted(
        module
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] in {"typer", "rich"} for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in {"typer", "rich"})
    )
    assert users, "the scan finds the command line's imports"
    assert all(m == "cli" or m.startswith("cli.") for m in users), users


def test_import_pgqueue_loads_no_command_line_library_nor_the_dashboard() -> None:
    code = (
        "import sys, pgqueue, pgqueue.ops; print(sorted(m for m in ('typer', 'rich', 'pgqueue.cli',"
        " 'pgqueue.dashboard', 'starlette', 'jinja2', 'uvicorn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_import_pgqueue_loads_no_framework() -> None:
    """``import pgqueue`` stays light: no web framework, ORM or test framework comes with it."""
    frameworks = ("django", "sqlalchemy", "starlette", "fastapi", "pytest", "typer", "rich")
    code = f"import sys, pgqueue; print(sorted(m for m in sys.modules if m.split('.')[0] in {frameworks!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
