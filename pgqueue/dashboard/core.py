"""What every handler shares (:class:`Dashboard`: the config, the pool, the guard, the
templates) and how handlers turn expected failures into pages."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from .._db.conn import Conn
from ..errors import (
    DatabaseUnavailableError,
    JobNotFoundError,
    PgQueueError,
    SchemaNotInstalledError,
    UnknownQueueError,
)
from .config import DashboardConfig
from .database import Database
from .format import install_filters
from .security import CSRF_COOKIE, Guard

__all__ = ["PACKAGE", "Dashboard", "dash_of", "handled"]

log = logging.getLogger("pgqueue.dashboard")
T = TypeVar("T")
PACKAGE = resources.files("pgqueue.dashboard")


class Dashboard:
    """What every handler shares: the config, the pool, the guard and the templates."""

    def __init__(self, config: DashboardConfig) -> None:
        self.config = config
        self.db = Database(config)
        self.guard = Guard(config)
        self.templates = Jinja2Templates(directory=str(PACKAGE / "templates"))
        install_filters(self.templates.env)

    async def run(self, fn: Callable[[Conn, DashboardConfig], T]) -> T:
        return await run_in_threadpool(self.db.run, lambda conn: fn(conn, self.config))

    def render(self, request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        token, new = self.guard.csrf_token(request)
        base = {
            "csrf": token,
            "read_only": self.config.read_only,
            "refresh": self.config.refresh_seconds,
            "schema": self.config.schema,
            "msg": self.message(request),
        }
        response = self.templates.TemplateResponse(request, name, {**base, **context}, status_code=status)
        if new:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    def message(self, request: Request) -> str:
        """The outcome of the action that redirected here, if the dashboard signed it."""
        msg, tag = request.query_params.get("msg", ""), request.query_params.get("sig", "")
        return msg if msg and tag and self.guard.signed(msg, tag) else ""

    def error(self, request: Request, message: str, status: int) -> Response:
        return self.render(request, "error.html", {"message": message}, status=status)


def dash_of(request: Request) -> Dashboard:
    dash: Dashboard = request.app.state.dashboard
    return dash


Handler = Callable[[Request], Awaitable[Response]]


def handled(fn: Handler) -> Handler:
    """Turn expected failures into a page: bad input 400, unknown job 404, a write the
    database refused (read-only mode) 403, a database error 503."""

    async def wrapper(request: Request) -> Response:
        dash = dash_of(request)
        try:
            return await fn(request)
        except PermissionError as exc:  # a POST without the CSRF token, or from another site
            return dash.error(request, str(exc), 403)
        except (JobNotFoundError, UnknownQueueError) as exc:
            return dash.error(request, str(exc), 404)
        except psycopg.errors.InsufficientPrivilege as exc:
            first = str(exc).strip().splitlines()[0]
            return dash.error(request, f"PostgreSQL refused the change: {first}", 403)
        except (psycopg.Error, DatabaseUnavailableError, SchemaNotInstalledError) as exc:
            log.warning("dashboard: %s failed: %s", request.url.path, exc)
            return dash.error(request, f"database error: {str(exc).strip().splitlines()[0]}", 503)
        except PgQueueError as exc:  # bad input (ConfigError and the like): say which
            return dash.error(request, str(exc), 400)

    wrapper.__name__ = fn.__name__
    return wrapper
