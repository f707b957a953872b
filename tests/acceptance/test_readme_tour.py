"""README's five-minute tour runs as written, and every link in the docs resolves.

The tour's blocks are marked ``<!-- tour:NAME -->`` in README.md. The test runs them in a
fresh, unmigrated database: shell lines through the real ``pgqueue`` command (``createdb``
and ``export PGQUEUE_DSN`` are replaced by the test's own database and environment; ``psql
-c`` runs through psycopg so no client is needed), Python blocks as files of a throwaway
project.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import REPO, wait_until

ROOT = REPO
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


def tour_blocks() -> dict[str, str]:
    text = README.read_text()
    blocks = dict(re.findall(r"<!-- tour:([\w-]+) -->\n```\w*\n(.*?)```", text, flags=re.S))
    assert set(blocks) == {"shell-setup", "tasks", "enqueue", "shell-run"}, sorted(blocks)
    return blocks


def shell_lines(block: str) -> list[list[str]]:
    return [argv for line in block.splitlines() if (argv := shlex.split(line, comments=True))]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def command(argv: list[str]) -> list[str]:
    """The README's command, run with this interpreter's venv."""
    if argv[0] == "pgqueue":
        return [sys.executable, "-m", "pgqueue", *argv[1:]]
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    raise AssertionError(f"the tour runs a command the test does not know: {argv}")


@pytest.mark.slow
def test_the_tour_runs_as_written(empty_dsn: str, tmp_path: Path) -> None:
    blocks = tour_blocks()
    env = {**os.environ, "PGQUEUE_DSN": empty_dsn, "PYTHONPATH": str(tmp_path), "COLUMNS": "120"}
    env.pop("PGQUEUE_SCHEMA", None)

    for argv in shell_lines(blocks["shell-setup"]):
        if argv[0] == "createdb":
            assert argv[1:] == ["mydb"]
        elif argv[0] == "export":
            assert argv[1].startswith("PGQUEUE_DSN=postgresql://")
        elif argv[0] == "psql":
            assert argv[1:3] == ["$PGQUEUE_DSN", "-c"], argv
            with psycopg.connect(empty_dsn, autocommit=True) as c:
                c.execute(argv[3].encode())
        else:
            run(command(argv), tmp_path, env)

    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    assert blocks["tasks"].startswith("# myapp/tasks.py")
    (tmp_path / "myapp" / "tasks.py").write_text(blocks["tasks"])
    assert blocks["enqueue"].startswith("# enqueue.py")
    (tmp_path / "enqueue.py").write_text(blocks["enqueue"])

    lines = shell_lines(blocks["shell-run"])
    assert [a[:2] for a in lines] == [
        ["python", "enqueue.py"],
        ["pgqueue", "work"],
        ["pgqueue", "jobs"],
        ["pgqueue", "status"],
    ]
    out = run(command(lines[0]), tmp_path, env).stdout
    job_id = int(re.findall(r"enqueued job (\d+)", out)[0])

    def state() -> Any:
        with psycopg.connect(empty_dsn) as c:
            row = c.execute("SELECT state::text FROM pgqueue.jobs WHERE id = %s", (job_id,)).fetchone()
        return row[0] if row and row[0] == "completed" else None

    with subprocess.Popen(
        command(lines[1]), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as worker:
        try:
            wait_until(state, timeout=60, interval=0.1)
        finally:
            worker.send_signal(signal.SIGINT)  # the README's Ctrl-C
            log, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0, log
    assert f"job {job_id} myapp.tasks.resize_image queue=images attempt=1/5 completed" in log
    assert "resizing image 42 to 800x600" in log

    with psycopg.connect(empty_dsn) as c:
        assert c.execute("SELECT count(*) FROM uploads").fetchone() == (1,)
        schedules = c.execute("SELECT name FROM pgqueue.cron_schedules").fetchall()
    assert schedules == [("myapp.tasks.cleanup",)]

    listing = run(command(lines[2]), tmp_path, env).stdout
    assert "resize_image" in listing
    assert "completed" in listing
    status = run(command(lines[3]), tmp_path, env).stdout
    assert "images" in status


def _slug(heading: str) -> str:
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or doc.name != "README.md"
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = (doc.parent / target).resolve() if target else doc
        assert path.exists(), f"{doc.name}: {link} points at a missing file"
        if anchor:
            assert anchor in _anchors(path), f"{doc.name}: {link} names a missing section"


def test_docs_do_not_cite_internal_design_files() -> None:
    for doc in [README, *DOCS]:
        assert not re.search(r"DESIGN|STYLE\.md|§", doc.read_text()), doc.name


def test_shipped_code_does_not_cite_internal_design_files() -> None:
    # What users install (the package and its SQL) must not point at files they do not have.
    shipped = [*(ROOT / "pgqueue").rglob("*.py"), *(ROOT / "sql").rglob("*.sql"), *(ROOT / "bench").rglob("*.py")]
    assert shipped
    cited = [str(p.relative_to(ROOT)) for p in shipped if re.search(r"DESIGN|STYLE\.md|§", p.read_text())]
    assert cited == []
