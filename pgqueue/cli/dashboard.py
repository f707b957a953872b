"""``pgqueue dashboard``: serve the web dashboard with uvicorn (the ``[dashboard]`` extra).

Binds to 127.0.0.1 by default; any other interface needs ``--token`` or ``--basic-auth``
(or ``--insecure-no-auth`` said out loud), so that nobody else on the network can act on
the queue.
"""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from ..errors import ConfigError
from .common import DsnOpt, SchemaOpt, app, database, err, fail, guard

__all__ = ["dashboard"]

_MISSING = "the dashboard needs its extra: pip install 'postgres-jobqueue[dashboard]'"


@app.command()
def dashboard(
    dsn: DsnOpt = None,
    schema: SchemaOpt = "pgqueue",
    host: Annotated[str, typer.Option(help="Interface to bind (anything but loopback needs authentication).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8000,
    read_only: Annotated[
        bool,
        typer.Option(help="Connect as the inspector role (SET ROLE PREFIX_inspector): PostgreSQL refuses writes."),
    ] = False,
    role_prefix: Annotated[str | None, typer.Option(help="Role prefix of the inspector (default: the schema).")] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="PGQUEUE_DASHBOARD_TOKEN", help="Require this token (16+ chars): Bearer or login form."),
    ] = None,
    basic_auth: Annotated[
        str | None,
        typer.Option(
            envvar="PGQUEUE_DASHBOARD_BASIC_AUTH", metavar="USER:PASSWORD", help="Require HTTP basic authentication."
        ),
    ] = None,
    app_target: Annotated[
        str | None,
        typer.Option("--app", metavar="MODULE:APP", help="Show the args of this app's tasks declared log_args=True."),
    ] = None,
    show_args: Annotated[bool, typer.Option(help="Show every job's arguments.")] = False,
    insecure_no_auth: Annotated[
        bool, typer.Option(help="Allow a non-loopback bind without authentication (not recommended).")
    ] = False,
) -> None:
    """Serve the web dashboard: queues, jobs, failures, cron, workers, and actions on them."""
    try:
        import uvicorn

        from ..dashboard import DashboardConfig, args_rule_from_app, create_app, is_loopback
        from ..dashboard.config import parse_basic_auth
        from ..dashboard.database import Database
    except ImportError:
        raise fail(_MISSING) from None

    def build() -> DashboardConfig:
        loaded = None
        if app_target is not None:
            from ..runner.loader import load_app

            loaded = load_app(app_target)
        users = dict([parse_basic_auth(basic_auth)]) if basic_auth else {}
        if not is_loopback(host) and not (token or users) and not insecure_no_auth:
            raise ConfigError(
                f"--host {host} is reachable from other machines: give --token or --basic-auth "
                "(or --insecure-no-auth if something else guards it)"
            )
        return DashboardConfig(
            dsn=database(dsn).dsn,
            schema=schema,
            read_only=read_only,
            role_prefix=role_prefix,
            token=token,
            basic_auth=users,
            show_args=args_rule_from_app(loaded, show_args),
        )

    config = guard(build)
    guard(Database(config).check)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    shown = "[::1]" if host == "::1" else host
    err.print(f"pgqueue dashboard on http://{shown}:{port}/ (pid {os.getpid()}; Ctrl-C stops it)", highlight=False)
    uvicorn.run(create_app(config), host=host, port=port, log_level="warning", proxy_headers=False)
