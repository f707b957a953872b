"""Producers' wake-ups: at most one NOTIFY per queue per window from a fast producer.

A transaction that sends a NOTIFY takes a database-wide lock at commit and holds it until
its commit record is flushed, so notifying commits run one at a time, each paying its own
fsync: with 8 producers on one database, a NOTIFY in every enqueue halves what they can
commit. This module lets a producer that enqueues faster than one job per ``window``
notify once per window instead, without leaving a job it saw commit to the safety-net
poll:

* the first job of a quiet queue notifies as always (``PLAIN``);
* a job that comes within ``window`` of the last notification opens a window: its
  statement sends the plain wake-up plus an *echo* request (``~<ms> <queue>``), which makes
  every listening worker wake again ``window`` after it heard it (``ECHO``);
* while that window is open, further jobs skip the NOTIFY (``QUIET``): each commits before
  the window closes, so before the echo, whose claim sees it. A quiet job whose statement
  returned after the window closed (a slow commit) gets a NOTIFY of its own at once, after
  its commit (a repair), so the bound holds whatever the commit took.

Only statements that are their own transaction take part (an autocommit connection with
no transaction open, not in a pipeline): there pgqueue sees the commit happen. In a
caller's transaction the commit comes later, at a time pgqueue cannot see, so every such
enqueue notifies.

The window is per App, database and queue; apps do not coordinate. Jobs whose NOTIFY was
skipped are picked up at most ``window`` after they committed while workers idle, at once
while workers are busy (they claim again as slots free). A listener that connects claims
again ``MAX_WINDOW`` later, which covers a window opened before it listened. Left to the
queue's next wake-up or the safety-net poll: a quiet job whose statement failed or was
cancelled (the app cannot know whether it committed; it closes the window instead).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum

from .errors import ConfigError

__all__ = [
    "DEFAULT_WINDOW",
    "ECHO_PREFIX",
    "MAX_WINDOW",
    "MIN_WINDOW",
    "NO_WINDOW",
    "Plan",
    "Wake",
    "WakeThrottle",
    "check_window",
    "parse_echo",
]

#: Payloads that start with this ask for an echo; no queue name starts with it.
ECHO_PREFIX = "~"
#: The default window (seconds): App(notify_window=...). Off: every job notifies, and pickup
#: latency never waits for a window.
DEFAULT_WINDOW = 0.0
#: The shortest window accepted (a shorter one could never cover a job's round trip).
MIN_WINDOW = 0.001
#: The longest window accepted (seconds): longer would make a skipped job wait visibly.
MAX_WINDOW = 1.0


class Wake(Enum):
    PLAIN = "plain"  # NOTIFY the queue
    ECHO = "echo"  # NOTIFY the queue and ask for an echo: opens a window
    QUIET = "quiet"  # no NOTIFY: an open window's echo covers this job


@dataclass(slots=True)
class Plan:
    key: tuple[Hashable, str]  # (database, queue)
    wake: Wake
    started: float
    #: For QUIET: the window's end, which the statement must have returned before.
    window_end: float = 0.0
    #: For ECHO: the echo request sent with the plain wake-up.
    echo: str | None = None

    @property
    def notify(self) -> bool:
        return self.wake is not Wake.QUIET


def check_window(window: float) -> float:
    """``window`` in seconds, or :class:`ConfigError` naming the problem."""
    if isinstance(window, bool) or not isinstance(window, int | float) or not math.isfinite(window):
        raise ConfigError(f"notify_window must be a number of seconds, got {window!r}")
    if window != 0 and not MIN_WINDOW <= window <= MAX_WINDOW:
        raise ConfigError(
            f"notify_window must be 0 (off) or between {MIN_WINDOW} and {MAX_WINDOW} seconds, got {window!r}"
        )
    return float(window)


def echo_payload(queue: str, window: float) -> str:
    # Whole milliseconds, rounded up: a worker's echo must not come before the window ends.
    return f"{ECHO_PREFIX}{math.ceil(window * 1000)} {queue}"


def parse_echo(payload: str) -> tuple[str, float] | None:
    """``(queue, delay in seconds)`` of an echo request, or None for any other payload."""
    if not payload.startswith(ECHO_PREFIX):
        return None
    ms, _, queue = payload[len(ECHO_PREFIX) :].partition(" ")
    # Anyone who may connect can NOTIFY on the channel: only ASCII digits, at most 4 of them.
    if not (ms.isascii() and ms.isdigit() and len(ms) <= 4) or not queue or int(ms) > MAX_WINDOW * 1000:
        return None
    return queue, int(ms) / 1000


@dataclass(slots=True)
class _QueueState:
    last_sent: float = -math.inf  # when the last notifying statement was sent
    window_end: float = -math.inf  # end of the open window (its ECHO statement returned)
    echo_in_flight: bool = False  # an ECHO statement was sent and has not returned yet
    skipped: bool = False  # the open window covered a quiet job


class WakeThrottle:
    """Window state per database and queue, for one App; thread-safe (one App may serve
    many threads)."""

    def __init__(self, window: float) -> None:
        self._window = check_window(window)
        self._queues: dict[tuple[Hashable, str], _QueueState] = {}
        self._lock = threading.Lock()
        #: Round trip of recent enqueue statements (seconds): a job skips the NOTIFY only if
        #: it should return with this margin to spare before the window closes.
        self.rtt = 0.0
        self.repairs = 0  # quiet jobs that needed a NOTIFY after their commit (a test signal)
        self.unsure = 0  # quiet jobs whose statement failed: committed or not, no NOTIFY followed
        self.planned: Counter[Wake] = Counter()  # decisions made, by kind (a test signal)
        self.clock: Callable[[], float] = time.monotonic

    @property
    def window(self) -> float:
        return self._window

    def plan(self, database: Hashable, queue: str) -> Plan:
        """The wake-up of a job of ``queue`` about to be enqueued into ``database`` (any key
        that tells databases apart: a window covers only jobs its echo's listeners hear)."""
        now = self.clock()
        window = self._window
        key = (database, queue)
        with self._lock:
            st = self._queues.get(key)
            if st is None:
                st = self._queues[key] = _QueueState()
            if now + 2 * self.rtt < st.window_end:
                st.skipped = True
                plan = Plan(key, Wake.QUIET, now, st.window_end)
            elif not st.echo_in_flight and (st.skipped or now - st.last_sent < window):
                # A burst: this statement opens a window (the window that just closed
                # covered jobs, or the last notification was moments ago).
                st.echo_in_flight, st.skipped, st.last_sent = True, False, now
                plan = Plan(key, Wake.ECHO, now, echo=echo_payload(queue, window))
            else:
                st.last_sent = now
                plan = Plan(key, Wake.PLAIN, now)
            self.planned[plan.wake] += 1
            return plan

    def settle(self, plan: Plan | None, ok: bool) -> bool:
        """Record how ``plan``'s statement ended; True if the job needs a NOTIFY now (it
        skipped one and returned after its window closed). No plan (the job notified
        unthrottled): nothing to record."""
        if plan is None:
            return False
        now = self.clock()
        with self._lock:
            st = self._queues[plan.key]
            if ok:
                took = max(now - plan.started, 0.0)
                self.rtt = took if self.rtt == 0.0 else 0.8 * self.rtt + 0.2 * took
            if plan.wake is Wake.ECHO:
                st.echo_in_flight = False
                # Open only once the echo request is known to be committed: a quiet job
                # must never rely on a wake-up that was rolled back.
                if ok:
                    st.window_end = plan.started + self.window
            elif plan.wake is Wake.QUIET and ok and now >= plan.window_end:
                self.repairs += 1
                st.last_sent = now
                return True
            elif plan.wake is Wake.QUIET and not ok:
                # Failed, cancelled or lost: it may have committed all the same, and no
                # NOTIFY can follow it now. Close the window so that the queue's next job
                # notifies plainly (and wakes workers for this one too, if it came).
                self.unsure += 1
                st.window_end = st.last_sent = -math.inf
                st.skipped = False
            return False


#: No window: every job notifies (enqueue without an App's throttle).
NO_WINDOW = WakeThrottle(0.0)
