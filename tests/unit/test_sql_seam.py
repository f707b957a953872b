"""One SQL seam: statements live in ``sql/`` and only the DB modules run them.

No database needed: the package's source is read with :mod:`ast`. A module outside
``DB_MODULES`` fails this test when it calls ``.execute``/``.executemany``/``.copy``,
uses :mod:`psycopg.sql` composition, or holds a string literal that reads as SQL.
``NOT_YET`` lists the modules still to be moved behind the seam; it only ever shrinks.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "pgqueue"

#: The package that may run SQL: the loader and the DB layer, every module in it.
DB_PACKAGE = "_db."

#: Modules that still run or build SQL themselves (debt: move them behind the seam).
NOT_YET: frozenset[str] = frozenset()

#: String literals that read as SQL but are not statements the library runs.
TEXT_NOT_SQL = {
    ("cli.demo", "SELECT state, count(*) FROM "),  # a psql command line shown to the user
}

_EXECUTING = {"execute", "executemany", "copy"}
_SQL_TEXT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|SET|RESET|LISTEN|NOTIFY|UNLISTEN|VACUUM|ANALYZE"
    r"|TRUNCATE|GRANT|REVOKE|BEGIN|COMMIT|ROLLBACK|EXPLAIN)\b"
    r"|\b(FROM|WHERE|JOIN|VALUES|RETURNING|ORDER BY|GROUP BY)\b [a-z{(]"
)


def _docstrings(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _imports_sql_composition(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.module == "psycopg" and any(a.name == "sql" for a in node.names)
    return isinstance(node, ast.Import) and any(a.name == "psycopg.sql" for a in node.names)


def violations(module: str, source: str) -> list[str]:
    """What in ``source`` runs or builds SQL (empty for a module that keeps to the seam)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{module}.py:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _EXECUTING:
            found.append(f"{where}: calls .{node.func.attr}()")
        elif _imports_sql_composition(node):
            found.append(f"{where}: imports psycopg.sql")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and _SQL_TEXT.search(node.value)
            and (module, node.value) not in TEXT_NOT_SQL
        ):
            found.append(f"{where}: SQL text {node.value[:50]!r}")
    return found


def _modules() -> list[str]:
    """Every module of the package, dotted below ``pgqueue`` (``worker.fetcher``)."""
    return sorted(".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in PACKAGE.rglob("*.py"))


DB_MODULES = frozenset(m for m in _modules() if m.startswith(DB_PACKAGE))


@pytest.mark.parametrize("module", [m for m in _modules() if m not in DB_MODULES])
def test_only_db_modules_run_or_build_sql(module: str) -> None:
    found = violations(module, (PACKAGE / (module.replace(".", "/") + ".py")).read_text("utf-8"))
    if module in NOT_YET:
        assert found, f"{module} keeps to the seam now: remove it from NOT_YET"
    else:
        assert not found, "SQL outside the DB modules (put it in sql/queries/, run it from a DB module):\n" + "\n".join(
            found
        )


def test_the_lists_name_real_modules() -> None:
    assert {"_db.sql", "_db.jobs", "_db.enqueue"} <= DB_MODULES
    assert set(_modules()) >= NOT_YET
    assert not DB_MODULES & NOT_YET


def test_the_check_catches_each_kind() -> None:
    source = (
        "from psycopg import sql\ndef f(conn):\n    conn.execute(q)\n    x = 'SELECT 1'\n    y = 'id FROM {}.jobs'\n"
    )
    assert len(violations("m", source)) == 4
    assert violations("m", '"""SELECT in a docstring is prose."""\nx = "Select a queue"\n') == []
