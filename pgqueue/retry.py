"""Retry backoff: exponential growth with full jitter, capped. Pure, no I/O."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["Backoff", "Retries"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before attempt ``n + 1`` after attempt ``n`` failed.

    ``delay = uniform(0, min(cap, base * factor ** (n - 1)))`` ("full jitter"): retries of
    many jobs that failed together spread out instead of stampeding back at once.
    ``jitter=False`` gives the deterministic upper bound, handy in tests.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 3600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        # NaN fails every comparison; the cap bounds every delay (ten years at most).
        if not (self.base >= 0 and 0 <= self.cap <= 10 * 365 * 86400 and self.factor >= 1):
            raise ConfigError("Backoff needs base >= 0, 0 <= cap <= ten years and factor >= 1")

    def ceiling(self, attempt: int) -> float:
        exponent = max(attempt - 1, 0)
        # Guard the power against overflow for absurd attempt counts.
        if exponent > 200:
            return self.cap
        return min(self.cap, self.base * self.factor**exponent)

    def delay(self, attempt: int) -> float:
        ceiling = self.ceiling(attempt)
        return random.uniform(0.0, ceiling) if self.jitter else ceiling


class Retries:
    """A retry loop's position in a :class:`Backoff`: ``next()`` counts a failure and gives
    the delay before trying again; ``reset()`` after a success starts over."""

    __slots__ = ("attempt", "backoff")

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.attempt = 0

    def next(self) -> float:
        self.attempt += 1
        return self.backoff.delay(self.attempt)

    def reset(self) -> None:
        self.attempt = 0
