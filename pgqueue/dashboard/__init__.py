"""A web dashboard for pgqueue: queues, jobs, failures, cron, workers and queue controls
in a browser, with retry/cancel/delete and pause/resume (``pip install
'postgres-jobqueue[dashboard]'``).

``pgqueue dashboard`` serves it; :func:`create_app` returns the same ASGI application to
mount inside a Starlette, FastAPI or Django (ASGI) project under any path prefix. It
needs Starlette and Jinja2, which ``import pgqueue`` never loads.
"""

from __future__ import annotations

from .config import DashboardConfig, args_rule_from_app, is_loopback
from .web import create_app

__all__ = ["DashboardConfig", "args_rule_from_app", "create_app", "is_loopback"]
