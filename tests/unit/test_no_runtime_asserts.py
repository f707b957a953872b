"""The package checks what it relies on with real checks: an ``assert`` vanishes under
``python -O``, so none is allowed in pgqueue's code (tests may use them freely)."""

from __future__ import annotations

import ast

from tests.conftest import REPO


def test_the_package_has_no_assert_statements() -> None:
    found = []
    for path in sorted((REPO / "pgqueue").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assert):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == [], f"assert statements vanish under -O; raise an error instead: {found}"
