"""``pgqueue queues …`` and ``pgqueue tasks …``: pause, resume and limit queues and tasks
on every worker at once, and see the controls with what they count now (thin calls into
``ops``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import ops
from .._duration import parse_duration
from ..errors import ConfigError
from ..ops.queues import KEEP, Keep, QueueControl, Rate
from .common import DsnOpt, SchemaOpt, app, connect, console, guard
from .jobs import JsonOpt, print_json
from .render import fit_table, rate_text

__all__ = ["queues_app", "tasks_app"]

queues_app = typer.Typer(help="Pause, resume and limit queues on every worker.", no_args_is_help=True)
tasks_app = typer.Typer(help="Limit how many jobs of a task run at once across every worker.", no_args_is_help=True)
app.add_typer(queues_app, name="queues")
app.add_typer(tasks_app, name="tasks")

QueueArg = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue's name.")]
CreateOpt = Annotated[
    bool, typer.Option("--create", help="Also for a queue no worker served yet and no job is in (it becomes known).")
]
NONE = "none"


def _limit(value: str | None, option: str) -> int | Keep | None:
    """``None`` (not given): keep; ``none``: remove; a positive integer: set."""
    if value is None:
        return KEEP
    if value.strip().lower() == NONE:
        return None
    if not value.strip().isdigit() or int(value) < 1:
        raise ConfigError(f"{option}: give a positive integer, or 'none' to remove the limit; got {value!r}")
    return int(value)


def _rate(value: str | None, option: str) -> Rate | Keep | None:
    """``N/DURATION`` (``100/1m``: at most 100 starts in any minute), ``none``, or keep."""
    if value is None:
        return KEEP
    if value.strip().lower() == NONE:
        return None
    count, sep, period = value.partition("/")
    if not sep or not count.strip().isdigit():
        raise ConfigError(f"{option}: give N/DURATION, e.g. 100/1m or 5/1s (or 'none'); got {value!r}")
    return int(count), parse_duration(period, option=option)


def _print_queue(control: QueueControl) -> None:
    console.print(
        f"queue {escape(control.queue)}: {'paused' if control.paused else 'running'}; "
        f"concurrency {control.concurrency or '-'} (running {control.running}); "
        f"per key {control.key_concurrency or '-'}{' fifo' if control.key_fifo else ''}; "
        f"rate {rate_text(control.rate_limit, control.rate_period_seconds)}; "
        f"key rate {rate_text(control.key_rate_limit, control.key_rate_period_seconds)}",
        highlight=False,
    )


@queues_app.command("list")
def list_cmd(as_json: JsonOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Every known queue: paused or not, its limits, and what they count now."""

    def go() -> list[QueueControl]:
        with connect(dsn) as conn:
            return ops.queue_controls(conn, schema)

    controls = guard(go)
    if as_json:
        print_json(controls)
        return
    table = Table(title=f"{len(controls)} queue(s)", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (
        ("queue", "left"),
        ("state", "left"),
        ("running", "right"),
        ("limit", "right"),
        ("per key", "right"),
        ("rate", "right"),
        ("in window", "right"),
        ("key rate", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for c in controls:
        table.add_row(
            escape(c.queue),
            Text("paused", style="bold yellow") if c.paused else Text("running", style="green"),
            str(c.running),
            str(c.concurrency) if c.concurrency is not None else "-",
            (str(c.key_concurrency) if c.key_concurrency is not None else "-") + (" fifo" if c.key_fifo else ""),
            rate_text(c.rate_limit, c.rate_period_seconds),
            str(c.starts_in_window) if c.rate_limit is not None else "-",
            rate_text(c.key_rate_limit, c.key_rate_period_seconds),
        )
    console.print(fit_table(table))


@queues_app.command("add")
def add_cmd(queue: QueueArg, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Make a queue known before any worker served it, to pause or limit it ahead."""

    def go() -> bool:
        with connect(dsn) as conn:
            return ops.add_queue(conn, schema, queue)

    added = guard(go)
    console.print(f"queue {escape(queue)} {'added' if added else 'was already known'}", highlight=False)


@queues_app.command("pause")
def pause_cmd(queue: QueueArg, create: CreateOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Stop every worker starting jobs of QUEUE (running jobs finish)."""

    def go() -> bool:
        with connect(dsn) as conn:
            return ops.pause_queue(conn, schema, queue, create=create)

    changed = guard(go)
    console.print(f"queue {escape(queue)} {'paused' if changed else 'was already paused'}", highlight=False)


@queues_app.command("resume")
def resume_cmd(queue: QueueArg, create: CreateOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Let workers start jobs of QUEUE again."""

    def go() -> bool:
        with connect(dsn) as conn:
            return ops.resume_queue(conn, schema, queue, create=create)

    changed = guard(go)
    console.print(f"queue {escape(queue)} {'resumed' if changed else 'was not paused'}", highlight=False)


@queues_app.command("limit")
def limit_cmd(
    queue: QueueArg,
    concurrency: Annotated[
        str | None,
        typer.Argument(metavar="[N|none]", help="Most jobs of QUEUE running at once across every worker."),
    ] = None,
    rate: Annotated[
        str | None, typer.Option(metavar="N/DURATION", help="At most N starts in any DURATION (100/1m), or none.")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", metavar="N", help="Most jobs running at once per concurrency key, or none.")
    ] = None,
    fifo: Annotated[
        bool | None,
        typer.Option("--fifo/--no-fifo", help="Run each key's jobs one at a time in enqueue order (with --key 1)."),
    ] = None,
    key_rate: Annotated[
        str | None, typer.Option(metavar="N/DURATION", help="At most N starts per key in any DURATION, or none.")
    ] = None,
    create: CreateOpt = False,
    as_json: JsonOpt = False,
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """Set QUEUE's limits on every worker at once; the ones not given stay as they are.

    Examples: `pgqueue queues limit images 10`, `pgqueue queues limit api --rate 100/1m`,
    `pgqueue queues limit sync --key 1 --fifo`, `pgqueue queues limit images none`.
    """

    def go() -> QueueControl:
        with connect(dsn) as conn:
            return ops.set_queue_limits(
                conn,
                schema,
                queue,
                concurrency=_limit(concurrency, "concurrency"),
                rate=_rate(rate, "--rate"),
                key_concurrency=_limit(key, "--key"),
                key_fifo=KEEP if fifo is None else fifo,
                key_rate=_rate(key_rate, "--key-rate"),
                create=create,
            )

    control = guard(go)
    if as_json:
        print_json(control)
        return
    _print_queue(control)


@tasks_app.command("list")
def tasks_list_cmd(as_json: JsonOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Every task limit and the task's jobs running now."""

    def go() -> list[ops.TaskControl]:
        with connect(dsn) as conn:
            return ops.task_controls(conn, schema)

    controls = guard(go)
    if as_json:
        print_json(controls)
        return
    table = Table(title=f"{len(controls)} task limit(s)", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("task")
    table.add_column("running", justify="right")
    table.add_column("limit", justify="right")
    for c in controls:
        table.add_row(escape(c.task), str(c.running), str(c.concurrency))
    console.print(fit_table(table))


@tasks_app.command("limit")
def tasks_limit_cmd(
    task: Annotated[str, typer.Argument(metavar="TASK", help="The task's name.")],
    concurrency: Annotated[
        str, typer.Argument(metavar="N|none", help="Most jobs of TASK running at once across every worker and queue.")
    ],
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
) -> None:
    """Set (or with `none` remove) TASK's concurrency limit on every worker at once."""

    def go() -> int | None:
        n = _limit(concurrency, "concurrency")
        if isinstance(n, Keep):  # the argument is required: never
            raise ConfigError("give N or none")
        with connect(dsn) as conn:
            ops.set_task_limit(conn, schema, task, n)
        return n

    n = guard(go)
    console.print(
        f"task {escape(task)}: {'no limit' if n is None else f'at most {n} running at once'}", highlight=False
    )
