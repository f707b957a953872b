"""The one duration grammar of pgqueue's options: ``90s``, ``15m``, ``1d12h``, ``2w``.

A duration is one or more ``<number><unit>`` parts written together, the unit required:
``s`` seconds, ``m`` minutes, ``h`` hours, ``d`` days, ``w`` weeks; the number may have a
decimal part (``1.5h``). ``forever`` is accepted only by options that allow it
(retention). Errors name the option, the value and the grammar.
"""

from __future__ import annotations

import re
from datetime import timedelta

from .errors import ConfigError

__all__ = ["FOREVER", "GRAMMAR", "parse_duration", "parse_retention"]

FOREVER = "forever"
#: How the grammar is described in errors and help texts.
GRAMMAR = "a number and a unit (s, m, h, d or w), repeated as needed: 90s, 15m, 36h, 1d12h, 2w"

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_BARE_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_TRAILING_NUMBER = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+(\d+(?:\.\d+)?)")


def _error(option: str, text: str, problem: str) -> ConfigError:
    return ConfigError(f"{option}: invalid duration {text!r}: {problem}; a duration is {GRAMMAR}")


def parse_duration(text: str, *, option: str = "duration") -> timedelta:
    """``"90s"``, ``"15m"``, ``"1d12h"``, ``"2w"`` → timedelta.

    ``option`` names the setting in the error (``"--older-than"``).

    Raises:
        ConfigError: ``text`` does not follow the grammar (``"3"`` needs a unit), is
        ``forever`` or is too long to represent.
    """
    if not isinstance(text, str):
        raise _error(option, str(text), "expected text")
    compact = text.strip().lower()
    if not compact:
        raise _error(option, text, "empty")
    if compact == FOREVER:
        raise _error(option, text, "'forever' is not accepted here, give a length of time")
    if _BARE_NUMBER.fullmatch(compact):
        raise _error(option, text, f"needs a unit, e.g. {compact}s or {compact}d")
    if not _DURATION.fullmatch(compact):
        trailing = _TRAILING_NUMBER.fullmatch(compact)
        if trailing:
            raise _error(option, text, f"{trailing[1]!r} at the end needs a unit")
        raise _error(option, text, "not a duration")
    try:
        return timedelta(seconds=sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(compact)))
    except OverflowError:
        raise _error(option, text, "too long") from None


def parse_retention(text: str, *, option: str = "retention") -> float:
    """How long finished jobs are kept, in seconds, ``0`` meaning ``forever`` (the
    convention of ``WorkerConfig.retention_*``).

    Raises:
        ConfigError: not a duration nor ``forever``, or a zero duration.
    """
    if isinstance(text, str) and text.strip().lower() == FOREVER:
        return 0.0
    seconds = parse_duration(text, option=option).total_seconds()
    if seconds <= 0:
        raise _error(option, text, "must be longer than zero (use 'forever' to keep jobs forever)")
    return seconds
