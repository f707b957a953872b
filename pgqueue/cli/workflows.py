"""``pgqueue workflows …``: a workflow's progress and jobs, and cancelling or retrying a
whole workflow (thin calls into ``ops``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich import box
from rich.table import Table

from .. import ops
from .common import DsnOpt, SchemaOpt, app, connect, console, fail, guard
from .jobs import JsonOpt, print_json

__all__ = ["batches_app", "workflows_app"]

workflows_app = typer.Typer(help="Inspect, cancel and retry workflows (jobs with dependencies).", no_args_is_help=True)
app.add_typer(workflows_app, name="workflows")

WorkflowIdArg = Annotated[int, typer.Argument(metavar="ID", help="The workflow's id (the id of its first job).")]


@workflows_app.command("show")
def show_cmd(
    workflow_id: WorkflowIdArg, as_json: JsonOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue"
) -> None:
    """A workflow's progress and every job of it with its status and parents."""

    def go() -> tuple[ops.WorkflowProgress | None, list[ops.WorkflowJob]]:
        with connect(dsn) as conn:
            return ops.workflow_progress(conn, schema, workflow_id), ops.workflow_jobs(conn, schema, workflow_id)

    progress, jobs = guard(go)
    if progress is None:
        raise fail(f"no workflow with id {workflow_id}")
    if as_json:
        print_json({"progress": progress, "jobs": jobs})
        return
    counts = ", ".join(
        f"{n} {name}"
        for name, n in (
            ("waiting", progress.waiting), ("ready", progress.ready), ("running", progress.running),
            ("completed", progress.completed), ("discarded", progress.discarded), ("cancelled", progress.cancelled),
        )
        if n
    )  # fmt: skip
    done = "finished" if progress.done else "in progress"
    console.print(f"workflow {workflow_id}: {progress.total} jobs, {counts} ({done})")
    table = Table(box=box.SIMPLE)
    for column in ("id", "task", "status", "parents"):
        table.add_column(column)
    for job in jobs:
        table.add_row(str(job.id), job.task, job.status, ", ".join(map(str, job.parents)))
    console.print(table)


@workflows_app.command("cancel")
def cancel_cmd(workflow_id: WorkflowIdArg, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Cancel every job of a workflow not finished yet (running ones at their next check)."""

    def go() -> int:
        with connect(dsn) as conn:
            return ops.cancel_workflow(conn, schema, workflow_id)

    console.print(f"workflow {workflow_id}: {guard(go)} job(s) cancelled or asked to stop")


@workflows_app.command("retry")
def retry_cmd(workflow_id: WorkflowIdArg, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Retry a workflow's discarded and cancelled jobs; their dependents wait for them again."""

    def go() -> int:
        with connect(dsn) as conn:
            return ops.retry_workflow(conn, schema, workflow_id)

    console.print(f"workflow {workflow_id}: {guard(go)} job(s) retried")


batches_app = typer.Typer(help="Inspect and cancel batches.", no_args_is_help=True)
app.add_typer(batches_app, name="batches")
BatchIdArg = Annotated[int, typer.Argument(metavar="ID", help="The batch's id.")]


@batches_app.command("show")
def batch_show_cmd(
    batch_id: BatchIdArg, as_json: JsonOpt = False, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue"
) -> None:
    """A batch's members per outcome, whether it is closed and its callbacks fired."""

    def go() -> ops.BatchProgress | None:
        with connect(dsn) as conn:
            return ops.batch_progress(conn, schema, batch_id)

    b = guard(go)
    if b is None:
        raise fail(f"no batch with id {batch_id}")
    if as_json:
        print_json(b)
        return
    state = "open" if not b.closed else ("callbacks fired" if b.fired_at else "closed")
    console.print(
        f"batch {batch_id}: {b.total} members, {b.completed} completed, {b.discarded} discarded, "
        f"{b.cancelled} cancelled, {b.pending} pending ({state})"
    )
    if b.callback_ids:
        console.print(f"callback jobs: {', '.join(map(str, b.callback_ids))}")


@batches_app.command("cancel")
def batch_cancel_cmd(batch_id: BatchIdArg, dsn: DsnOpt = None, schema: SchemaOpt = "pgqueue") -> None:
    """Close a batch and cancel its members not finished yet."""

    def go() -> int:
        with connect(dsn) as conn:
            return ops.cancel_batch(conn, schema, batch_id)

    console.print(f"batch {batch_id}: {guard(go)} member(s) cancelled or asked to stop")
