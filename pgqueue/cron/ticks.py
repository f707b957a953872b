"""Cron arithmetic: the instants at which a cron expression fires in a time zone.

Pure code, no I/O and no clock of its own: the scheduler passes in the database's time.
Expressions are parsed and matched by croniter on *naive wall-clock* times; this module
maps wall-clock matches to real instants (UTC) and applies the DST rules itself, because
croniter's own time-zone handling fires a 02:30 schedule twice on a fall-back night.

DST rules (those of Vixie cron, which most cron users expect):

* A **fixed-time** schedule (its second, minute and hour fields are plain values, lists or
  ranges, like ``30 2 * * *``) fires once per wall-clock match. In a fall-back overlap
  (02:00-02:59 happens twice) it fires at the first occurrence only. In a spring-forward
  gap (02:00-02:59 does not exist) a match inside the gap fires once, at the first valid
  instant after it (03:00 new time).
* An **interval-like** schedule (``*`` or a step ``/`` in its second, minute or hour field,
  like ``*/5 * * * *``, ``0 * * * *`` or ``@hourly``) follows the clock as it reads: wall
  times inside a gap do not exist and do not fire; wall times in an overlap fire at both
  occurrences, so such a schedule keeps its real-time rhythm through both transitions.

Time-zone transitions are found by probing the zone's UTC offset every few hours and
bisecting to the second; no zone has had two transitions within that probe interval in
the period the tz database covers for the future.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from ..errors import ConfigError

__all__ = ["ALIASES", "CronExpr"]

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANDOM_TOKEN = re.compile(r"(?<![A-Za-z])R(?![A-Za-z])")
_PROBE = timedelta(hours=6)
_LOOKBACK = timedelta(days=1)  # longer than any overlap, to know whether `lo` sits in one
_SECOND = timedelta(seconds=1)
_SEARCH_LIMIT = timedelta(days=366 * 60)
_CRONITER_ERRORS = (CroniterError, ValueError, TypeError, KeyError, IndexError, OverflowError)


@dataclass(frozen=True, slots=True)
class _Transition:
    at: datetime  # the first instant (UTC) on the new offset
    before: timedelta
    after: timedelta


def _naive(instant: datetime, offset: timedelta) -> datetime:
    return (instant + offset).replace(tzinfo=None)


def _floor_second(t: datetime) -> datetime:
    return t.replace(microsecond=0)


class CronExpr:
    """A validated cron expression bound to a time zone.

    ``expression`` has 5 fields (minute hour day-of-month month day-of-week), or 6 with
    **seconds as the sixth field** (croniter's convention: ``*/10 * * * * *`` is not
    "every 10 minutes" but every second of every tenth minute; every 10 seconds is
    ``* * * * * */10``), or is one of the :data:`ALIASES`. ``H`` fields are hashed on
    ``hash_key`` (the schedule name), so they spread schedules deterministically.

    Raises:
        ConfigError: the expression is malformed, random (``R``), never fires, or the
            time zone is unknown.
    """

    def __init__(self, expression: str, timezone: str = "UTC", *, hash_key: str = "") -> None:
        if not isinstance(expression, str) or not expression.strip():
            raise ConfigError(f"cron expression must be a non-empty string, got {expression!r}")
        text = " ".join(expression.split())
        text = ALIASES.get(text.lower(), text)
        fields = text.split(" ")
        if len(fields) not in (5, 6):
            raise ConfigError(
                f"invalid cron expression {expression!r}: give 5 fields (minute hour day month weekday), "
                "6 with seconds last (croniter's order), or an alias like @daily"
            )
        if _RANDOM_TOKEN.search(text):
            raise ConfigError(f"invalid cron expression {expression!r}: random fields (R) would differ between nodes")
        if not isinstance(timezone, str) or not timezone:
            raise ConfigError(f"time zone must be an IANA name like 'Europe/Paris', got {timezone!r}")
        try:
            self.zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigError(
                f"unknown time zone {timezone!r} (use an IANA name like 'Europe/Paris' or 'UTC')"
            ) from None
        self.expression = text
        self.timezone = timezone
        self._hash_id = hash_key.encode() if hash_key else None
        try:
            # One parsed iterator, re-positioned for every walk (parsing costs ~0.4 ms).
            self._iter = croniter(text, datetime(2000, 1, 1), hash_id=self._hash_id)
            first = [self._iter.get_next(datetime) for _ in range(3)]
        except CroniterBadDateError:
            raise ConfigError(f"cron expression {expression!r} never fires") from None
        except _CRONITER_ERRORS as exc:
            raise ConfigError(f"invalid cron expression {expression!r}: {exc}") from None
        clock_fields = [fields[0], fields[1]] + ([fields[5]] if len(fields) == 6 else [])
        #: True for fixed-time schedules (see the module docstring for what that changes).
        self.fixed_time = not any("*" in f or "/" in f for f in clock_fields)
        # A typical spacing of ticks: the first search windows are sized from it.
        self._spacing = max(first[2] - first[1], first[1] - first[0], timedelta(minutes=1))

    def __repr__(self) -> str:
        return f"CronExpr({self.expression!r}, {self.timezone!r})"

    # -- public --------------------------------------------------------------------------

    def ticks(self, lo: datetime, hi: datetime, limit: int | None = None) -> list[datetime]:
        """Fire instants ``t`` with ``lo < t <= hi``, ascending, in UTC (at most ``limit``)."""
        lo, hi = lo.astimezone(UTC), hi.astimezone(UTC)
        out: list[datetime] = []
        if hi <= lo or limit == 0:
            return out
        transitions = self._transitions(lo - _LOOKBACK, hi)
        earlier = [t for t in transitions if t.at <= lo]
        inside = [t for t in transitions if t.at > lo]
        bounds = [lo, *(t.at for t in inside), hi]
        offset = self._offset(lo)
        cutoff = self._repeat_cutoff(earlier[-1]) if earlier else None
        for index in range(len(bounds) - 1):
            start, end = bounds[index], bounds[index + 1]
            if index > 0:
                transition = inside[index - 1]
                offset = transition.after
                cutoff = self._repeat_cutoff(transition)
                if self.fixed_time and transition.after > transition.before:
                    gap = (_naive(transition.at, transition.before), _naive(transition.at, transition.after))
                    if self._matches_in(*gap):
                        self._emit(out, transition.at)
            last = index == len(bounds) - 2
            for wall in self._walls_from(_naive(start, offset)):
                instant = (wall - offset).replace(tzinfo=UTC)
                if instant > hi or (not last and instant >= end):
                    break
                if instant <= lo or (cutoff is not None and wall < cutoff):
                    continue
                self._emit(out, instant)
                if limit is not None and len(out) >= limit:
                    return out
            if limit is not None and len(out) >= limit:
                return out[:limit]
        return out

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire instant strictly after ``t`` (None if there is none for decades)."""
        width = self._spacing * 2
        lo = t.astimezone(UTC)
        while width < _SEARCH_LIMIT:
            found = self.ticks(lo, lo + width, limit=1)
            if found:
                return found[0]
            lo, width = lo + width, width * 2
        return None

    def latest(self, lo: datetime, hi: datetime, count: int) -> list[datetime]:
        """The last ``count`` fire instants in ``(lo, hi]``, ascending."""
        lo, hi = lo.astimezone(UTC), hi.astimezone(UTC)
        found: list[datetime] = []
        width = self._spacing * (count + 1)
        end = hi
        while count > 0 and end > lo and len(found) < count:
            start = max(lo, end - width)
            found = self.ticks(start, end) + found
            end, width = start, width * 2
        return found[-count:] if count > 0 else []

    # -- internals -----------------------------------------------------------------------

    @staticmethod
    def _emit(out: list[datetime], instant: datetime) -> None:
        # A gap's fire instant can coincide with a real match at the end of the gap.
        if not out or out[-1] != instant:
            out.append(instant)

    def _repeat_cutoff(self, transition: _Transition) -> datetime | None:
        """For a fall-back, the wall time before which readings repeat the earlier pass."""
        if self.fixed_time and transition.after < transition.before:
            return _naive(transition.at, transition.before)
        return None

    def _walls_from(self, naive_start: datetime) -> Iterator[datetime]:
        """Wall-clock matches at or after ``naive_start`` (to the second), ascending.

        Walks share one croniter, so at most one walk may be in progress at a time (no
        nesting, no threads).
        """
        self._iter.set_current(_floor_second(naive_start) - _SECOND, force=True)
        while True:
            try:
                wall: datetime = self._iter.get_next(datetime)
            except CroniterBadDateError:
                return
            yield wall

    def _matches_in(self, naive_lo: datetime, naive_hi: datetime) -> bool:
        for wall in self._walls_from(naive_lo):
            return wall < naive_hi
        return False

    def _offset(self, instant: datetime) -> timedelta:
        offset = instant.astimezone(self.zone).utcoffset()
        if offset is None:  # a ZoneInfo always has one
            raise ValueError(f"time zone {self.zone} gives no UTC offset for {instant}")
        return offset

    def _transitions(self, lo: datetime, hi: datetime) -> list[_Transition]:
        found: list[_Transition] = []
        a, off_a = lo, self._offset(lo)
        while a < hi:
            b = min(a + _PROBE, hi)
            off_b = self._offset(b)
            if off_b != off_a:
                # Bisect on whole seconds: x keeps the old offset, y has the new one.
                x, y = int(a.timestamp()), int(b.timestamp()) + 1
                while y - x > 1:
                    mid = (x + y) // 2
                    if self._offset(datetime.fromtimestamp(mid, UTC)) == off_a:
                        x = mid
                    else:
                        y = mid
                found.append(_Transition(datetime.fromtimestamp(y, UTC), off_a, off_b))
            a, off_a = b, off_b
        return found
