"""The queue limits form: what an operator asked to change, read from the posted fields
with the rules of ``pgqueue queues limit`` (a positive whole number, or empty / ``none``
for no limit; a rate is a number of starts and a period in the duration grammar, both or
neither), and said back in words for the log and the page.

Every field of the form comes with the value it was shown with (``<name>_was``): only the
fields the operator changed are applied, so a limit someone else changed meanwhile is
not put back. A field that is not posted at all is kept too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from .._duration import parse_duration
from ..errors import ConfigError
from ..ops.queues import KEEP, Keep, QueueControl, Rate

__all__ = ["LimitsChange", "duration_text", "limits_text", "parse_limits"]

NONE = "none"
#: The most digits a limit may have (a million is the most ops accepts).
MAX_DIGITS = 12


class Form(Protocol):
    def getlist(self, key: Any) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class LimitsChange:
    """The limits asked for; :data:`~pgqueue.ops.queues.KEEP` for the ones left as they are."""

    concurrency: int | Keep | None = KEEP
    rate: Rate | Keep | None = KEEP
    key_concurrency: int | Keep | None = KEEP
    key_fifo: bool | Keep = KEEP
    key_rate: Rate | Keep | None = KEEP

    def kwargs(self) -> dict[str, Any]:
        """The arguments of :func:`pgqueue.ops.set_queue_limits`."""
        return {
            "concurrency": self.concurrency,
            "rate": self.rate,
            "key_concurrency": self.key_concurrency,
            "key_fifo": self.key_fifo,
            "key_rate": self.key_rate,
        }

    @property
    def empty(self) -> bool:
        return all(isinstance(v, Keep) for v in self.kwargs().values())

    def describe(self) -> str:
        """``concurrency 5, rate none``: the changes asked for, in the form's words."""
        parts = []
        for label, value in (
            ("concurrency", self.concurrency),
            ("rate", self.rate),
            ("key concurrency", self.key_concurrency),
            ("key FIFO", self.key_fifo),
            ("key rate", self.key_rate),
        ):
            if isinstance(value, Keep):
                continue
            if value is None:
                text = NONE
            elif isinstance(value, bool):
                text = "on" if value else "off"
            elif isinstance(value, tuple):
                count, period = value
                seconds = period.total_seconds() if isinstance(period, timedelta) else float(period)
                text = f"{count} per {duration_text(seconds)}"
            else:
                text = str(value)
            parts.append(f"{label} {text}")
        return ", ".join(parts) or "no change"


def _last(form: Form, name: str) -> str | None:
    """The field's posted value (the last one, for a checkbox after its hidden default),
    None when it was not posted."""
    values = form.getlist(name)
    return str(values[-1]).strip() if values else None


def _changed(form: Form, *names: str) -> bool:
    """Whether the operator changed these fields from the values the form showed (always,
    when the form did not say what it showed)."""
    for name in names:
        now, was = _last(form, name), _last(form, f"{name}_was")
        if now is None:
            continue
        if was is None or now.lower() != was.lower():
            return True
    return False


def _positive(text: str, label: str) -> int:
    if not text.isdigit() or len(text) > MAX_DIGITS or int(text) < 1:
        raise ConfigError(f"{label}: give a positive whole number, or leave it empty for no limit; got {text[:20]!r}")
    return int(text)


def _count(text: str, label: str) -> int | None:
    """A positive whole number, or None for empty / ``none``."""
    if text == "" or text.lower() == NONE:
        return None
    return _positive(text, label)


def _limit(form: Form, name: str, label: str) -> int | Keep | None:
    text = _last(form, name)
    if text is None or not _changed(form, name):
        return KEEP
    return _count(text, label)


def _rate(form: Form, prefix: str, label: str) -> Rate | Keep | None:
    count_name, period_name = f"{prefix}_limit", f"{prefix}_period"
    count, period = _last(form, count_name), _last(form, period_name)
    if (count is None and period is None) or not _changed(form, count_name, period_name):
        return KEEP
    count, period = count or "", period or ""
    if count.lower() in ("", NONE) and period.lower() in ("", NONE):
        return None
    if count.lower() in ("", NONE) or period.lower() in ("", NONE):
        raise ConfigError(
            f"{label}: give both the number of starts and the period (e.g. 100 per 1m), or neither for no limit"
        )
    n = _positive(count, f"{label} limit")
    seconds = parse_duration(period, option=f"{label} period").total_seconds()
    if seconds <= 0:
        raise ConfigError(f"{label} period: give a length of time longer than zero (e.g. 1s, 1m), got {period[:20]!r}")
    return n, seconds


def _fifo(form: Form) -> bool | Keep:
    text = _last(form, "key_fifo")
    if text is None or not _changed(form, "key_fifo"):
        return KEEP
    return text.lower() in ("on", "true", "yes", "1")


def parse_limits(form: Form) -> LimitsChange:
    """The limits the posted form changes.

    Raises:
        ConfigError: a limit that is not a positive whole number, a rate with only one of
            its two parts, a period that is not a duration or is zero (nothing is changed).
    """
    return LimitsChange(
        concurrency=_limit(form, "concurrency", "concurrency"),
        rate=_rate(form, "rate", "rate"),
        key_concurrency=_limit(form, "key_concurrency", "key concurrency"),
        key_fifo=_fifo(form),
        key_rate=_rate(form, "key_rate", "key rate"),
    )


def duration_text(seconds: float | None) -> str:
    """A period the duration grammar reads back: ``1m``, ``1m30s``, ``0.5s``, ``1d``;
    empty for None."""
    if seconds is None:
        return ""
    rest = round(float(seconds), 3)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if rest >= size:
            parts.append(f"{int(rest // size)}{unit}")
            rest = round(rest - int(rest // size) * size, 3)
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return "".join(parts)


def _rate_text(limit: int | None, period: float | None) -> str:
    return NONE if limit is None or period is None else f"{limit} per {duration_text(period)}"


def limits_text(control: QueueControl) -> str:
    """A queue's limits after a change, for the page's message."""
    key = NONE if control.key_concurrency is None else str(control.key_concurrency)
    return (
        f"concurrency {control.concurrency if control.concurrency is not None else NONE}; "
        f"rate {_rate_text(control.rate_limit, control.rate_period_seconds)}; "
        f"key concurrency {key}{' FIFO' if control.key_fifo else ''}; "
        f"key rate {_rate_text(control.key_rate_limit, control.key_rate_period_seconds)}"
    )
