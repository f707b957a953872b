"""What a user sees on the command line: error lines, ``--version``, ``--traceback``, and
tables that keep every column on narrow terminals. Real ``pgqueue`` subprocesses where the
output matters, on a real database."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgqueue
from pgqueue import Schedule, ops
from pgqueue.errors import SchemaNotInstalledError
from tests.apps.cron_support import scheduler
from tests.conftest import REPO
from tests.ops_support import enqueue, error_entry, insert_finished

PGQUEUE = Path(sys.executable).with_name("pgqueue")  # the installed entry point
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x?connect_timeout=3"


def pgqueue_cli(
    *args: str, columns: int = 120, cwd: Path = REPO, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The real ``pgqueue ARGS`` with a terminal ``columns`` wide, PGQUEUE_* unset."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")}
    env["COLUMNS"] = str(columns)
    return subprocess.run([str(PGQUEUE), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def stderr_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.strip()]


# -- status/top before migrate ------------------------------------------------------------


def test_status_on_unmigrated_database_logs_nothing_from_the_pipeline(
    empty_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Whether psycopg complained ("error ignored terminating <psycopg.Pipeline …>") depended
    # on when the aborted results arrived: about one call in three did. Many calls, no line.
    caplog.set_level(logging.DEBUG, logger="psycopg")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        for i in range(60):
            with pytest.raises(SchemaNotInstalledError, match="run `pgqueue migrate --dsn "):
                ops.status(conn, "pgqueue", retention=i % 2 == 0)
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is still usable
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("command", [("status",), ("top", "--once")])
def test_status_and_top_before_migrate_print_one_line(empty_dsn: str, command: tuple[str, ...]) -> None:
    proc = pgqueue_cli(*command, "--dsn", empty_dsn)
    assert proc.returncode == 1
    [line] = stderr_lines(proc)
    dbname = psycopg.conninfo.conninfo_to_dict(empty_dsn)["dbname"]
    assert line.startswith(
        "error: schema 'pgqueue' lacks pgqueue's tables, views or functions: run `pgqueue migrate --dsn "
    )
    assert f"/{dbname}" in line


# -- --version ----------------------------------------------------------------------------


def test_version_prints_the_version_and_exits_0() -> None:
    proc = pgqueue_cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"pgqueue {pgqueue.__version__}\n", "")


# -- app targets that do not load ---------------------------------------------------------

USER_MODULES = {
    "boom": """
import pgqueue

app = pgqueue.App()


def configure() -> None:
    raise RuntimeError("SETTINGS_MODULE is not set")


configure()
""",
    "syntax": "import pgqueue\n\ndef broken(:\n    pass\n",
    "needsdep": "import pgqueue\nimport pgqueue_test_not_installed_dep\napp = pgqueue.App()\n",
    "fine": "import pgqueue\napp = pgqueue.App()\nnumber = 42\n",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's project directory holding the package ``userproj`` with the modules above."""
    package = tmp_path / "userproj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in USER_MODULES.items():
        (package / f"{name}.py").write_text(source.lstrip())
    return tmp_path


WORK = ("work", "{target}", "--dsn", UNREACHABLE)
CRON_LIST = ("cron", "list", "--app", "{target}", "--dsn", UNREACHABLE)


def run_target(project: Path, command: tuple[str, ...], target: str, *pre: str) -> subprocess.CompletedProcess[str]:
    return pgqueue_cli(*pre, *(arg.format(target=target) for arg in command), cwd=project)


@pytest.mark.parametrize(
    ("module", "first_line", "user_lines"),
    [
        (
            "boom",
            "error: cannot import module 'userproj.boom': RuntimeError: SETTINGS_MODULE is not set",
            ['boom.py", line 10, in <module>', "    configure()", 'boom.py", line 7, in configure'],
        ),
        (
            "syntax",
            "error: cannot import module 'userproj.syntax': SyntaxError: invalid syntax ({file}, line 3)",
            ['syntax.py", line 3', "    def broken(:"],
        ),
        (
            "needsdep",
            "error: cannot import module 'userproj.needsdep': ModuleNotFoundError: "
            "No module named 'pgqueue_test_not_installed_dep'",
            ['needsdep.py", line 2, in <module>', "    import pgqueue_test_not_installed_dep"],
        ),
    ],
)
def test_a_module_that_fails_to_import_shows_one_line_and_the_users_frames(
    project: Path, module: str, first_line: str, user_lines: list[str]
) -> None:
    proc = run_target(project, WORK, f"userproj.{module}:app")
    assert proc.returncode == 1
    lines = stderr_lines(proc)
    assert lines[0] == first_line.format(file=project / "userproj" / f"{module}.py")
    assert lines[-1] == "(`pgqueue --traceback COMMAND ...` prints the full traceback)"
    shown = "\n".join(lines[1:-1])
    for needle in user_lines:
        assert needle in shown, proc.stderr
    # Only the user's own frames: none of pgqueue, importlib, typer or click.
    assert "Traceback" not in proc.stderr
    for machinery in ("importlib", "typer", "click", "pgqueue/"):
        assert machinery not in shown, proc.stderr
    assert len(lines) <= 8, proc.stderr


def test_traceback_option_prints_the_full_traceback(project: Path) -> None:
    proc = run_target(project, WORK, "userproj.boom:app", "--traceback")
    assert proc.returncode == 1
    assert "Traceback (most recent call last):" in proc.stderr
    assert "importlib" in proc.stderr  # the machinery frames are there too
    assert 'boom.py", line 7, in configure' in proc.stderr
    assert stderr_lines(proc)[-1] == (
        "error: cannot import module 'userproj.boom': RuntimeError: SETTINGS_MODULE is not set"
    )


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "userproj.fine:number",
            "error: userproj.fine:number is not a pgqueue.App (it is of type int) "
            "(pgqueue.App objects in userproj.fine: app)",
        ),
        (
            "userproj.fine:ap",
            "error: userproj.fine:ap not found: module 'userproj.fine' has no attribute 'ap' "
            "(pgqueue.App objects in userproj.fine: app)",
        ),
        (
            "userproj.nothere:app",
            "error: cannot import module 'userproj.nothere': No module named 'userproj.nothere' "
            "(run pgqueue from your project's directory, or add it to PYTHONPATH)",
        ),
    ],
)
def test_a_target_that_is_missing_or_not_an_app_is_one_line(project: Path, target: str, message: str) -> None:
    proc = run_target(project, WORK, target)
    assert proc.returncode == 1
    assert stderr_lines(proc) == [message]


def test_cron_list_app_loads_its_target_the_same_way(project: Path) -> None:
    proc = run_target(project, CRON_LIST, "userproj.boom:app")
    assert proc.returncode == 1
    lines = stderr_lines(proc)
    assert lines[0] == "error: cannot import module 'userproj.boom': RuntimeError: SETTINGS_MODULE is not set"
    assert 'boom.py", line 7, in configure' in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_target(project, CRON_LIST, "userproj.fine:number")
    assert stderr_lines(proc) == [
        "error: userproj.fine:number is not a pgqueue.App (it is of type int) "
        "(pgqueue.App objects in userproj.fine: app)"
    ]


# -- narrow terminals ---------------------------------------------------------------------

LONG_QUEUE = "billing-reconciliation.eu-west-1.priority-high:nightly-batch-queue"[:64]
LONG_TASK = "mycompany.billing.tasks.reconcile_invoices_for_every_customer_account_in_region"
LONG_SCHEDULE = "reconcile-invoices-for-every-customer-account-nightly"
LONG_WORKER = "build-server-eu-west-1a.internal.example.com:123456:0f3c9a1b2c"
LONG_ERROR = "connection to the upstream invoicing service at https://invoices.internal.example.com timed out"

HEADERS = {
    "jobs": [["id", "state", "queue", "task", "try", "created", "run/finish", "last error"]],
    "cron": [["schedule", "task", "expression", "zone", "missed", "last tick", "next tick", "last run", "status"]],
    "status": [
        ["queue", "avail", "sched", "run", "retry", "lag", "done 1m/5m/15m", "dead 1m/5m/15m", "fail 5m"],
        ["worker", "queues", "in flight", "listen", "heartbeat", "up", "state"],
        ["task", "error", "jobs", "last seen", "last job", "last message"],
        ["state", "keep for", "partitions", "oldest day", "newest day", "rows", "size"],
    ],
}
COMMANDS_OF = {"jobs": ("jobs", "list"), "cron": ("cron", "list"), "status": ("status",)}


@pytest.fixture
def long_values(dsn: str, conn: psycopg.Connection[Any]) -> str:
    """Jobs, a worker, a failure and cron schedules whose names and messages are long."""
    enqueue(conn, LONG_TASK, LONG_QUEUE)
    insert_finished(
        conn,
        "discarded",
        ago=timedelta(seconds=30),
        queue=LONG_QUEUE,
        task=LONG_TASK,
        errors=[error_entry(1, LONG_ERROR, "requests.exceptions.ReadTimeout")],
    )
    insert_finished(conn, "completed", ago=timedelta(seconds=10), queue="images")
    conn.execute(
        "INSERT INTO pgqueue.worker_registry (worker_id, host, pid, queues, concurrency, expires_at, version)"
        " VALUES (%s, 'build-server', 1234, %s, 10, now() + interval '1 hour', '0.1.0')",
        [LONG_WORKER, [LONG_QUEUE, "images"]],
    )
    schedules = [
        Schedule(name=LONG_SCHEDULE, task=LONG_TASK, cron="30 2 * * 1-5", timezone="America/Argentina/Buenos_Aires"),
        Schedule(name="tick", task="t", cron="* * * * *"),
    ]

    async def register() -> None:
        async with scheduler(dsn, schedules) as s:
            await s.register()

    asyncio.run(register())
    return dsn


def header_words(out: str) -> set[str]:
    """The words of every table header: the lines above each rule, up to a blank line."""
    lines = out.splitlines()
    words: set[str] = set()
    for i, line in enumerate(lines):
        if line.strip() and set(line.strip()) == {"─"}:
            for above in reversed(lines[max(0, i - 3) : i]):
                if not above.strip():
                    break
                words.update(above.split())
    return words


def squeezed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("command", ["jobs", "cron", "status"])
def test_tables_keep_every_column_at_80_columns(long_values: str, command: str) -> None:
    proc = pgqueue_cli(*COMMANDS_OF[command], "--dsn", long_values, columns=80)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    words = header_words(proc.stdout)
    for table in HEADERS[command]:
        for header in table:
            assert set(header.split()) <= words, f"column {header!r} lost:\n{proc.stdout}"
    for value in {"jobs": ["available", "discarded", "completed"], "cron": ["tick", "30 2 * *"]}.get(command, []):
        assert value in proc.stdout


@pytest.mark.parametrize("command", ["jobs", "cron", "status"])
def test_too_narrow_for_a_table_prints_one_record_per_row(long_values: str, command: str) -> None:
    proc = pgqueue_cli(*COMMANDS_OF[command], "--dsn", long_values, columns=40)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 40
    labels = {line.split(":")[0] for line in lines if ":" in line and not line.startswith(" ")}
    for table in HEADERS[command]:
        assert set(table) <= labels, f"fields missing:\n{proc.stdout}"
    # Records wrap their values instead of abbreviating them.
    everything = squeezed(proc.stdout)
    long = {"jobs": [LONG_QUEUE, LONG_TASK], "cron": [LONG_SCHEDULE, LONG_TASK], "status": [LONG_QUEUE, LONG_WORKER]}
    for value in long[command]:
        assert squeezed(value) in everything
