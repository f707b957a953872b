"""``manage.py pgqueue COMMAND ...``: any ``pgqueue`` command (``status``, ``jobs list``,
``migrate``, ``work``...) on the database and schema of the Django settings."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import dsn, schema

WORKER_TARGET = "pgqueue.contrib.django.worker:app"


def run_cli(args: list[str], prog: str) -> None:
    """Run the pgqueue command line with ``args`` on the Django database."""
    from .....cli.main import app as cli

    saved = {name: os.environ.get(name) for name in ("PGQUEUE_DSN", "PGQUEUE_SCHEMA")}
    os.environ["PGQUEUE_DSN"] = dsn()
    os.environ["PGQUEUE_SCHEMA"] = schema()
    try:
        cli(args=args, prog_name=prog)
    except SystemExit as exc:
        if exc.code not in (0, None):
            code = exc.code if isinstance(exc.code, int) else 1
            raise CommandError(f"{prog} {' '.join(args)} exited with status {exc.code}", returncode=code) from None
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Command(BaseCommand):
    help = "Run a pgqueue command (status, jobs, migrate, work...) on the Django database."

    def run_from_argv(self, argv: list[str]) -> None:
        # pgqueue parses its own options: hand it everything after "pgqueue".
        args = argv[2:]
        if args[:1] == ["work"] and (len(args) < 2 or args[1].startswith("-")):
            args = ["work", WORKER_TARGET, *args[1:]]
        run_cli(args, f"{os.path.basename(argv[0])} pgqueue")

    def handle(self, *args: Any, **options: Any) -> None:  # call_command("pgqueue", ...)
        run_cli(list(args), "pgqueue")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs="*")
