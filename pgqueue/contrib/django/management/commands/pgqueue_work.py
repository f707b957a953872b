"""``manage.py pgqueue_work [OPTIONS]``: ``pgqueue work`` for the Django project's tasks
(``django.tasks`` ones, and those of ``PGQUEUE["APP"]``), on the Django database."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand

from .pgqueue import WORKER_TARGET, run_cli


class Command(BaseCommand):
    help = "Run a pgqueue worker for the Django project's tasks (options as for `pgqueue work`)."

    def run_from_argv(self, argv: list[str]) -> None:
        run_cli(["work", WORKER_TARGET, *argv[2:]], f"{os.path.basename(argv[0])} pgqueue_work")

    def handle(self, *args: Any, **options: Any) -> None:
        run_cli(["work", WORKER_TARGET, *args], "pgqueue_work")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs="*")
