"""The dashboard's settings, validated once: database, read-only role, authentication,
which tasks' arguments may be shown, page and batch sizes."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._db.sql import validate_schema
from ..errors import ConfigError
from ..roles import role_names

if TYPE_CHECKING:
    from .._db.conn import Conn

__all__ = ["ArgsRule", "DashboardConfig", "JobRelations", "is_loopback", "parse_basic_auth"]

#: Which tasks' arguments the dashboard shows: True every task, False none, else the
#: tasks named (the logs' rule: a task opts in with ``@app.task(log_args=True)``).
ArgsRule = bool | frozenset[str]

#: A hook for jobs related to a job (workflow parents and children, a batch): called with
#: the connection, the schema and the job's id, it returns ``(label, job ids)`` pairs that
#: the job page lists under "Related jobs". None: the section is not shown.
JobRelations = Callable[["Conn", str, int], list[tuple[str, list[int]]]]


def is_loopback(host: str) -> bool:
    """Whether binding to ``host`` keeps the dashboard on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable


def parse_basic_auth(value: str) -> tuple[str, str]:
    """``USER:PASSWORD`` (the password may contain colons)."""
    user, sep, password = value.partition(":")
    if not sep or not user or not password:
        raise ConfigError("basic auth must be USER:PASSWORD with a non-empty user and password")
    return user, password


@dataclass(frozen=True)
class DashboardConfig:
    """Everything :func:`pgqueue.dashboard.create_app` needs.

    ``read_only`` connects as the schema's inspector role (``SET ROLE``; the login user
    must be a member of it, see ``pgqueue migrate --create-roles``), so PostgreSQL itself
    refuses every write; the action buttons are hidden too. ``token`` and ``basic_auth``
    (user → password) protect every page: give one of them whenever the dashboard is
    reachable from another machine (``pgqueue dashboard`` refuses a non-loopback bind
    without). Forms are protected against cross-site requests in every mode.
    """

    dsn: str
    schema: str = "pgqueue"
    read_only: bool = False
    #: The role prefix of ``pgqueue migrate --create-roles --role-prefix`` (default: the schema).
    role_prefix: str | None = None
    token: str | None = None
    basic_auth: Mapping[str, str] = field(default_factory=dict)
    show_args: ArgsRule = False
    #: Seconds between live refreshes of the overview.
    refresh_seconds: float = 5.0
    #: Jobs per page, and how many jobs one page (or one batch of a bulk action) looks at
    #: at most when filtering: what keeps every page equally fast on any table size.
    page_size: int = 50
    scan_limit: int = 10_000
    batch_size: int = 500
    #: Minutes of history in the overview's charts.
    chart_minutes: int = 30
    #: The failures page looks at this many of the newest live jobs that failed, and as
    #: many of the newest jobs discarded or cancelled in the last 24 hours, at most.
    failure_window: int = 5_000
    pool_size: int = 4
    job_relations: JobRelations | None = None

    def __post_init__(self) -> None:
        validate_schema(self.schema)
        if not isinstance(self.dsn, str) or not self.dsn:
            raise ConfigError("the dashboard needs a DSN")
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("the dashboard token must be at least 16 characters")
        for user, password in self.basic_auth.items():
            if not user or ":" in user or not password:
                raise ConfigError("basic auth users need a name without ':' and a non-empty password")
        if not isinstance(self.show_args, bool) and not isinstance(self.show_args, frozenset):
            raise ConfigError("show_args must be True, False or a frozenset of task names")
        for name, value, low, high in (
            ("refresh_seconds", self.refresh_seconds, 0.5, 3600),
            ("page_size", self.page_size, 1, 1000),
            ("scan_limit", self.scan_limit, 1, 10_000_000),
            ("batch_size", self.batch_size, 1, 10_000),
            ("chart_minutes", self.chart_minutes, 1, 24 * 60),
            ("failure_window", self.failure_window, 1, 1_000_000),
            ("pool_size", self.pool_size, 1, 100),
        ):
            if isinstance(value, bool) or not low <= value <= high:
                raise ConfigError(f"{name} must be between {low} and {high}, got {value!r}")
        if self.read_only:
            self.inspector_role  # noqa: B018  (validates the prefix now)

    @property
    def inspector_role(self) -> str:
        return role_names(self.schema, self.role_prefix).inspector

    @property
    def auth_required(self) -> bool:
        return self.token is not None or bool(self.basic_auth)

    def args_visible(self, task: str) -> bool:
        rule = self.show_args
        return rule if isinstance(rule, bool) else task in rule

    def args_tasks(self) -> list[str] | None:
        """The tasks whose arguments a text filter may search (None: every task)."""
        rule = self.show_args
        if rule is True:
            return None
        return [] if rule is False else sorted(rule)


def args_rule_from_app(app: Any, show_all: bool) -> ArgsRule:
    """The logs' rule for an application's tasks: those declared with ``log_args=True``."""
    if show_all:
        return True
    if app is None:
        return False
    return frozenset(name for name, task in app.tasks.items() if getattr(task, "log_args", False))
