"""The jobs page's filters: parsed from a query string or a form, checked, turned into a
bound query (never into SQL text) and back into a query string for links."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from urllib.parse import urlencode

from .._db.dashboard import JobPageQuery
from ..errors import ConfigError
from ..models import FINAL_STATES, JobState

__all__ = ["JobFilter", "like_pattern"]

MAX_TEXT = 200
MAX_NAME = 300
FIELDS = ("state", "queue", "task", "text", "created_from", "created_to")


def like_pattern(text: str) -> str:
    """An ILIKE pattern matching ``text`` anywhere, its wildcards taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _time(name: str, value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a date and time (use 2026-12-01T14:30)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _text(name: str, value: str | None, limit: int, *, exact: bool = False) -> str | None:
    """A filter value (None: not given). ``exact`` names (queue, task) are kept as typed,
    so that a look-alike never matches the real name; other values lose outer blanks."""
    if value is None or not value.strip():
        return None
    if len(value) > limit:
        raise ConfigError(f"{name} is longer than {limit} characters")
    if "\x00" in value:
        raise ConfigError(f"{name} contains a NUL character")
    return value if exact else value.strip()


@dataclass(frozen=True, slots=True)
class JobFilter:
    state: JobState | None = None
    queue: str | None = None
    task: str | None = None
    text: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> JobFilter:
        """From a query string or form; raises ConfigError naming the bad field."""
        state = _text("state", params.get("state"), 20)
        if state is not None:
            try:
                parsed_state: JobState | None = JobState(state)
            except ValueError:
                raise ConfigError(f"state: unknown state {state!r}") from None
        else:
            parsed_state = None
        start = _text("created_from", params.get("created_from"), 40)
        end = _text("created_to", params.get("created_to"), 40)
        return cls(
            state=parsed_state,
            queue=_text("queue", params.get("queue"), MAX_NAME, exact=True),
            task=_text("task", params.get("task"), MAX_NAME, exact=True),
            text=_text("text", params.get("text"), MAX_TEXT),
            created_from=None if start is None else _time("created_from", start),
            created_to=None if end is None else _time("created_to", end),
        )

    @property
    def narrows(self) -> bool:
        """Whether anything beyond the state filters rows (then pages scan a bounded window)."""
        return any(v is not None for v in (self.queue, self.task, self.text, self.created_from, self.created_to))

    def params(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, JobState):
                out[name] = value.value
            elif isinstance(value, datetime):
                out[name] = value.isoformat()
            else:
                out[name] = str(value)
        return out

    def query_string(self, **extra: str | int) -> str:
        return urlencode({**self.params(), **{k: str(v) for k, v in extra.items()}})

    def with_state(self, state: JobState) -> JobFilter:
        return replace(self, state=state)

    def page_query(
        self, *, before: int | None, limit: int, scan_limit: int, args_tasks: list[str] | None
    ) -> JobPageQuery:
        return JobPageQuery(
            state=None if self.state is None else self.state.value,
            queue=self.queue,
            task=self.task,
            text=None if self.text is None else like_pattern(self.text),
            args_tasks=args_tasks,
            created_from=self.created_from,
            created_to=self.created_to,
            before=2**63 - 1 if before is None else before,
            scan=scan_limit if self.narrows else limit,
            limit=limit,
        )


def parse_before(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 19:
        raise ConfigError(f"before: {value[:40]!r} is not a job id")
    return int(value)


#: What each bulk action may touch (the states it changes).
ACTION_STATES: dict[str, frozenset[JobState]] = {
    "retry": frozenset({JobState.DISCARDED, JobState.CANCELLED}),
    "cancel": frozenset(set(JobState) - FINAL_STATES),
    "delete": frozenset(FINAL_STATES),
}
