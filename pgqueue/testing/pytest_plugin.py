"""pgqueue's pytest plugin, registered through the ``pytest11`` entry point.

Installed, it does nothing but read one setting: ``pgqueue_fixtures = true`` (in
pytest.ini, pyproject.toml's ``[tool.pytest.ini_options]``, or ``-o
pgqueue_fixtures=true``) loads :mod:`pgqueue.testing.fixtures`.
"""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_configure"]

_FIXTURES = "pgqueue.testing.fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "pgqueue_fixtures", "load pgqueue's test fixtures (pgqueue.testing.fixtures)", type="bool", default=False
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getini("pgqueue_fixtures") and not config.pluginmanager.has_plugin(_FIXTURES):
        config.pluginmanager.import_plugin(_FIXTURES)
