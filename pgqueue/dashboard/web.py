"""The ASGI application: routes, the page handlers, rendering, authentication.

Handlers are thin: they parse the request, run a :mod:`.views` function on a pooled
connection in a worker thread, and render a Jinja2 template. Every asset (templates,
htmx, CSS) ships inside the package.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import ConfigError
from . import views
from .actions import ROUTES as ACTION_ROUTES
from .config import DashboardConfig
from .core import PACKAGE, Dashboard, dash_of, handled
from .filters import JobFilter, parse_before
from .security import SESSION_COOKIE

__all__ = ["create_app"]


# -- pages --------------------------------------------------------------------------------


@handled
async def overview(request: Request) -> Response:
    dash = dash_of(request)
    data = await dash.run(views.overview)
    name = "overview_live.html" if request.url.path.endswith("/live") else "overview.html"
    return dash.render(request, name, {"o": data, "page": "overview"})


@handled
async def jobs(request: Request) -> Response:
    dash = dash_of(request)
    flt = JobFilter.parse(request.query_params)
    before = parse_before(request.query_params.get("before"))
    page = await dash.run(lambda conn, cfg: views.jobs_page(conn, cfg, flt, before))
    return dash.render(request, "jobs.html", {"p": page, "f": flt, "before": before, "page": "jobs"})


@handled
async def job(request: Request) -> Response:
    dash = dash_of(request)
    raw = request.path_params["job_id"]
    job_id = parse_before(raw)
    if job_id is None:
        raise ConfigError("no job id")
    data = await dash.run(lambda conn, cfg: views.job_view(conn, cfg, job_id))
    return dash.render(request, "job.html", {"v": data, "j": data.job, "page": "jobs"})


@handled
async def failures(request: Request) -> Response:
    dash = dash_of(request)
    data = await dash.run(views.failures)
    return dash.render(request, "failures.html", {"w": data, "failures": data.groups, "page": "failures"})


@handled
async def workers(request: Request) -> Response:
    dash = dash_of(request)
    found = await dash.run(views.workers)
    return dash.render(request, "workers.html", {"workers": found, "page": "workers"})


@handled
async def cron(request: Request) -> Response:
    dash = dash_of(request)
    rows = await dash.run(views.cron)
    return dash.render(request, "cron.html", {"rows": rows, "page": "cron"})


@handled
async def queues(request: Request) -> Response:
    dash = dash_of(request)
    controls, tasks = await dash.run(views.queues)
    return dash.render(request, "queues.html", {"controls": controls, "tasks": tasks, "page": "queues"})


async def login(request: Request) -> Response:
    dash = dash_of(request)
    if request.method == "GET":
        return dash.render(request, "login.html", {"page": "login", "failed": False})
    form = await request.form()
    token = form.get("token")
    problem = dash.guard.csrf_ok(request, str(form.get("csrf") or ""))
    if problem is None and isinstance(token, str) and dash.guard.token_matches(token):
        response = RedirectResponse(request.url_for("overview"), status_code=303)
        response.set_cookie(SESSION_COOKIE, dash.guard.session_value(), httponly=True, samesite="strict", path="/")
        return response
    return dash.render(request, "login.html", {"page": "login", "failed": True}, status=401)


# -- the app ------------------------------------------------------------------------------


class AuthGate:
    """Every request but the login form and its stylesheet needs a user when the
    dashboard has a token or basic-auth users."""

    def __init__(self, app: ASGIApp, dash: Dashboard) -> None:
        self.app = app
        self.dash = dash

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.dash.config.auth_required:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = scope["path"][len(scope.get("root_path", "")) :] if scope.get("root_path") else scope["path"]
        if path in ("/login", "/static/style.css") or self.dash.guard.user(request) is not None:
            await self.app(scope, receive, send)
            return
        if self.dash.config.basic_auth and not self.dash.config.token:
            response: Response = Response(
                "authentication required", 401, headers={"WWW-Authenticate": 'Basic realm="pgqueue"'}
            )
        elif request.method == "GET" and "hx-request" not in request.headers:
            response = RedirectResponse(str(request.url_for("login")), status_code=303)
        else:
            response = HTMLResponse("authentication required", 401)
        await response(scope, receive, send)


def create_app(config: DashboardConfig | None = None, /, **settings: Any) -> Starlette:
    """The dashboard as an ASGI application; mount it anywhere, e.g.
    ``Mount("/pgqueue", app=create_app(dsn=..., token=...))`` in Starlette or FastAPI.

    Give a :class:`DashboardConfig`, or its fields as keyword arguments.
    """
    cfg = config if config is not None else DashboardConfig(**settings)
    dash = Dashboard(cfg)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(dash.db.close)

    routes = [
        Route("/", overview, name="overview"),
        Route("/live", overview, name="overview_live"),
        Route("/jobs", jobs, name="jobs"),
        Route("/jobs/{job_id}", job, name="job"),
        Route("/failures", failures, name="failures"),
        Route("/workers", workers, name="workers"),
        Route("/cron", cron, name="cron"),
        Route("/queues", queues, name="queues"),
        Route("/login", login, name="login", methods=["GET", "POST"]),
        *ACTION_ROUTES,
        Mount("/static", app=StaticFiles(directory=str(PACKAGE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dash
    app.add_middleware(AuthGate, dash=dash)
    return app
