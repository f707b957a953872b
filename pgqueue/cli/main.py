"""The ``pgqueue`` command line: parses options, calls the library, prints with rich.

Every command takes ``--dsn``, else ``$PGQUEUE_DSN`` (``work`` and ``cron list --app``:
else the app's ``App(dsn=...)`` first), else the embedded PostgreSQL, and says which in
one line on stderr unless ``--dsn`` named it; and ``--schema`` (or ``$PGQUEUE_SCHEMA``).
Errors print one clear line to stderr and exit non-zero. Shared options and helpers live
in ``pgqueue.cli.common``; command groups other than the core ones live in their own modules
of ``pgqueue.cli``, registered below.

Why this module is over 300 lines: it holds the core commands (migrate, enqueue, work,
demo) whose options are the documented CLI surface; each is a thin call into the library.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Annotated, Any

import typer

from ..errors import ConfigError
from .common import DsnOpt, SchemaOpt, app, connect, console, database, fail, guard, settings

__all__ = ["app", "main"]


def _print_version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"pgqueue {__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print pgqueue's version and exit."),
    ] = False,
    show_traceback: Annotated[
        bool, typer.Option("--traceback", help="On an error, also print the full Python traceback.")
    ] = False,
) -> None:
    settings.traceback = show_traceback


@app.command()
def migrate(
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
    max_payload_bytes: Annotated[
        int | None, typer.Option(help="Server-side cap on a job's stored args (default 8 MiB).")
    ] = None,
    create_roles: Annotated[
        bool, typer.Option(help="Then create/update the owner, producer, worker and inspector roles (superuser).")
    ] = False,
    print_roles_sql: Annotated[
        bool, typer.Option(help="Only print the roles SQL (for a DBA to run); touches no database.")
    ] = False,
    role_prefix: Annotated[
        str | None, typer.Option(help="Role names are PREFIX_owner etc. (default: the schema).")
    ] = None,
    as_owner: Annotated[
        bool, typer.Option(help="Run the migrations as the owner role (SET ROLE PREFIX_owner).")
    ] = False,
) -> None:
    """Create or upgrade pgqueue's tables (safe to run concurrently and repeatedly)."""
    from ..migrate import current_version
    from ..migrate import migrate as run_migrate
    from ..roles import apply_roles, render_roles_sql, role_names

    if print_roles_sql:
        sys.stdout.write(guard(lambda: render_roles_sql(schema, role_prefix)))
        return

    def go() -> None:
        owner = role_names(schema, role_prefix).owner if (as_owner or create_roles) else None
        with connect(dsn) as conn:
            applied = run_migrate(
                conn, schema, max_payload_bytes=max_payload_bytes, as_role=owner if as_owner else None
            )
            version = current_version(conn, schema)
            if create_roles:
                names = apply_roles(conn, schema, role_prefix)
        if applied:
            # One line however many versions were applied (rich would wrap it at 80 columns
            # when the output is not a terminal, splitting what scripts grep for).
            console.print(
                f"schema [bold]{schema}[/]: applied {', '.join(map(str, applied))}; now at version {version}",
                soft_wrap=True,
            )
        else:
            console.print(f"schema [bold]{schema}[/]: up to date at version {version}")
        if create_roles:
            console.print(
                f"roles: {', '.join(names.all())} (NOLOGIN groups: GRANT them to login users)", soft_wrap=True
            )

    guard(go)


@app.command()
def work(
    target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="Where your pgqueue.App lives.")],
    dsn: DsnOpt = None,
    schema: Annotated[
        str | None, typer.Option("--schema", envvar="PGQUEUE_SCHEMA", help="Override the App's schema.")
    ] = None,
    queues: Annotated[str | None, typer.Option(help="Comma-separated queues (default: the tasks' queues).")] = None,
    queue: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            metavar="NAME[=N]",
            help="Serve this queue (repeatable); NAME=N gives it N slots of its own in each process.",
        ),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Jobs run at once per process (queues without their own slots).")
    ] = None,
    processes: Annotated[int, typer.Option(min=1, help="Worker processes, one event loop each.")] = 1,
    shutdown_timeout: Annotated[float | None, typer.Option(help="Seconds in-flight jobs get on SIGTERM.")] = None,
    lease: Annotated[float | None, typer.Option(help="Lease per claimed job, seconds.")] = None,
    heartbeat_interval: Annotated[float | None, typer.Option(help="Lease extension interval, seconds.")] = None,
    poll_interval: Annotated[float | None, typer.Option(help="Safety-net polling interval, seconds.")] = None,
    listen: Annotated[bool | None, typer.Option("--listen/--no-listen", help="Wake up on NOTIFY.")] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
    log_format: Annotated[
        str, typer.Option(help="text, kv (key=value) or json (one object per line).", envvar="PGQUEUE_LOG_FORMAT")
    ] = "text",
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve Prometheus metrics on this port (N processes: N ports from it).")
    ] = None,
    metrics_host: Annotated[str | None, typer.Option(help="Address the metrics endpoint binds to.")] = None,
    retention_completed: Annotated[
        str | None, typer.Option(help="Keep completed jobs this long: a duration (36h, 14d, 1d12h) or forever.")
    ] = None,
    retention_discarded: Annotated[str | None, typer.Option(help="Keep discarded jobs this long (or forever).")] = None,
    retention_cancelled: Annotated[str | None, typer.Option(help="Keep cancelled jobs this long (or forever).")] = None,
) -> None:
    """Run workers for the tasks of MODULE:APP until SIGTERM/SIGINT.

    Settings not given here come from the App's worker_config.
    """
    import os

    from .._duration import parse_retention
    from ..logging_setup import FORMATS, configure_logging
    from ..runner.supervisor import run_processes, run_worker

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        raise fail(f"unknown log level {log_level!r}")
    if log_format not in FORMATS:
        raise fail(f"unknown log format {log_format!r}: use {', '.join(FORMATS)}")
    given = {"completed": retention_completed, "discarded": retention_discarded, "cancelled": retention_cancelled}
    retention = guard(
        lambda: {s: None if v is None else parse_retention(v, option=f"--retention-{s}") for s, v in given.items()}
    )
    served, own_slots = guard(lambda: parse_queue_options(queues, queue or []))
    configure_logging(level, log_format)
    if processes > 1:
        os.environ["PGQUEUE_LOG_FORMAT"] = log_format  # the worker processes (spawned) follow it

    def go() -> int:
        # Only the options given replace the App's worker_config (None: not given).
        given: dict[str, Any] = {
            "queues": served,
            "queue_concurrency": own_slots,
            "concurrency": concurrency,
            "lease": lease,
            "heartbeat_interval": heartbeat_interval,
            "poll_interval": poll_interval,
            "shutdown_timeout": shutdown_timeout,
            "listen": listen,
            "retention_completed": retention["completed"],
            "retention_discarded": retention["discarded"],
            "retention_cancelled": retention["cancelled"],
            "metrics_port": metrics_port,
            "metrics_host": metrics_host,
            "metrics_port_span": processes if processes > 1 else None,
        }
        overrides = {name: value for name, value in given.items() if value is not None}
        overrides["wait_for_database"] = True  # a service waits for its database
        if processes == 1:
            return run_worker(target, dsn, schema, overrides)
        return run_processes(target, dsn, schema, overrides, processes, level, wait_for_database=True)

    raise typer.Exit(guard(go))


def parse_queue_options(queues: str | None, queue: list[str]) -> tuple[tuple[str, ...] | None, dict[str, int] | None]:
    """The queues to serve and their own slots, from ``--queues a,b`` and ``--queue a=5``.

    Raises:
        ConfigError: a malformed ``--queue`` or a queue named twice with different slots.
    """
    served = [q.strip() for q in queues.split(",") if q.strip()] if queues else []
    own: dict[str, int] = {}
    for item in queue:
        name, sep, count = item.partition("=")
        name = name.strip()
        if not name or (sep and not count.strip().isdigit()) or (sep and int(count) < 1):
            raise ConfigError(f"--queue {item!r}: use NAME or NAME=N with N a positive integer, e.g. --queue images=5")
        if sep:
            if own.get(name, int(count)) != int(count):
                raise ConfigError(f"--queue gives {name!r} two different numbers of slots")
            own[name] = int(count)
        if name not in served:
            served.append(name)
    return (tuple(served) if served else None), (own if own else None)


@app.command()
def enqueue(
    task: Annotated[str, typer.Argument(help="Task name (need not be registered here).")],
    args: Annotated[str, typer.Option("--args", help="Arguments as a JSON object.")] = "{}",
    queue: Annotated[str, typer.Option(help="Queue name.")] = "default",
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    delay: Annotated[float, typer.Option(help="Seconds to wait before it may run.")] = 0.0,
    unique_key: Annotated[str | None, typer.Option(help="Deduplicate against live jobs.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Override the task's max_attempts.")] = None,
    concurrency_key: Annotated[
        str | None, typer.Option(help="The job's key for per-key concurrency limits (1-200 characters).")
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option(
            help="Deadline after the job's run_at: a duration (90s, 15m, 1d12h); not started by then, it is cancelled."
        ),
    ] = None,
    unique_period: Annotated[
        str | None,
        typer.Option(help="Unique rules: the key is held this long (a duration) after a job takes it."),
    ] = None,
    unique_states: Annotated[
        str | None, typer.Option(help="Unique rules: comma-separated states in which a job holds its key.")
    ] = None,
    unique_mode: Annotated[
        str | None, typer.Option(help="Unique rules: keep, replace or debounce (what a held key does).")
    ] = None,
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """Enqueue one job and print its id.

    With any --unique-* option the job is unique under those rules, keyed by --unique-key
    or else by the task and its arguments.
    """
    from .._db.sql import validate_schema
    from .._duration import parse_duration
    from ..ops import enqueue_job, make_job
    from ..unique import Unique

    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as exc:
        raise fail(f"--args is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise fail("--args must be a JSON object, like '{\"user_id\": 42}'")

    def go() -> int:
        unique = None
        if unique_period is not None or unique_states is not None or unique_mode is not None:
            unique = Unique(
                period=None if unique_period is None else parse_duration(unique_period, option="--unique-period"),
                states=None if unique_states is None else [s.strip() for s in unique_states.split(",") if s.strip()],
                mode=unique_mode or "keep",  # type: ignore[arg-type]  # Unique checks it
            )
        job = make_job(
            task,
            parsed,
            queue=queue,
            priority=priority,
            delay=delay or None,
            unique_key=unique_key,
            max_attempts=max_attempts,
            concurrency_key=concurrency_key,
            expires_in=None if expires_in is None else parse_duration(expires_in, option="--expires-in"),
            unique=unique,
        )
        validate_schema(schema)
        with connect(dsn) as conn:  # nothing is sent before the job is known to be valid
            return enqueue_job(conn, schema, job)

    console.print(guard(go))


@app.command()
def demo(
    dsn: DsnOpt = None,
    schema: Annotated[str, typer.Option(help="Schema for the demo (dropped and recreated).")] = "pgqueue_demo",
    jobs: Annotated[int, typer.Option(min=10, help="How many jobs to enqueue.")] = 5000,
    concurrency: Annotated[int, typer.Option(min=1)] = 50,
) -> None:
    """A self-contained showcase: migrate, enqueue, run workers, show live progress."""
    from .demo import run_demo

    guard(lambda: run_demo(database(dsn).dsn, schema, jobs, concurrency, console))


from . import dashboard as _dashboard  # noqa: E402,F401  (registers `pgqueue dashboard`)
from . import jobs as _jobs  # noqa: E402,F401
from . import status as _status  # noqa: E402,F401  (registers `pgqueue jobs ...`, `status`, `top`)
from . import top as _top  # noqa: E402,F401
from . import workflows as _workflows  # noqa: E402,F401  (registers `pgqueue workflows ...`)
from .cron import cron_app as _cron_app  # noqa: E402,F401  (registers `pgqueue cron ...`)
from .embedded import embedded_app as _embedded_app  # noqa: E402,F401  (registers `pgqueue embedded ...`)
from .queues import queues_app as _queues_app  # noqa: E402,F401  (registers `pgqueue queues ...`, `tasks ...`)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
