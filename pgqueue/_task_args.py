"""Checking a job's arguments against its handler's signature, at enqueue and in the worker.

A handler is called as ``fn(**args)``, or ``fn(ctx, **args)`` when it takes a context
(``pass_context``/``transactional``): the context's parameter is not a job argument. The
signature is read once per task (at ``@app.task``); a check is then a few set operations,
and the error is worded only when one is found.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ConfigError

__all__ = ["ArgsChecker"]

_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_VAR_POSITIONAL = inspect.Parameter.VAR_POSITIONAL
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_VAR_KEYWORD = inspect.Parameter.VAR_KEYWORD


class ArgsChecker:
    """The job arguments a handler accepts.

    Raises:
        ConfigError: the handler can never be called the way the worker calls it (no
        parameter for the context, or a required positional-only parameter).
    """

    def __init__(self, task: str, fn: Callable[..., Any], *, pass_context: bool) -> None:
        self.task = task
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins and C callables have none: nothing to check
            signature = None
        self.checked = signature is not None
        params = list(signature.parameters.values()) if signature is not None else []
        #: The parameter that receives the context when it could also be named by a job argument.
        self._context_name: str | None = None
        if pass_context and signature is not None:
            if params and params[0].kind in (_POSITIONAL_ONLY, _POSITIONAL_OR_KEYWORD):
                if params[0].kind is _POSITIONAL_OR_KEYWORD:
                    self._context_name = params[0].name
                params = params[1:]
            elif not any(p.kind is _VAR_POSITIONAL for p in params):
                raise ConfigError(
                    f"task {task!r} takes a context (pass_context/transactional), so its handler needs "
                    "a first positional parameter for it, like `def handler(ctx, ...)`"
                )
        for p in params:
            if p.kind is _POSITIONAL_ONLY and p.default is p.empty:
                raise ConfigError(
                    f"task {task!r}: handler parameter {p.name!r} is positional-only, but job arguments "
                    "are passed by name (drop the `/`)"
                )
        #: The parameters job arguments may name, in order.
        self.names = tuple(p.name for p in params if p.kind in (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY))
        self.required = frozenset(
            p.name for p in params if p.kind in (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY) and p.default is p.empty
        )
        self.any_keyword = any(p.kind is _VAR_KEYWORD for p in params)
        #: Default values of the parameters that have one (what a job argument left out
        #: reads as: unique and concurrency keys derived from arguments use them).
        self.defaults = {
            p.name: p.default
            for p in params
            if p.kind in (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY) and p.default is not p.empty
        }
        self._accepted = frozenset(self.names)

    def unknown_names(self, names: Iterable[str]) -> list[str]:
        """Which of ``names`` no job argument can carry to the handler (none when it
        takes ``**kwargs`` or has no readable signature)."""
        if not self.checked or self.any_keyword:
            return []
        return [n for n in names if n not in self._accepted]

    def takes(self) -> str:
        """What the handler takes, in words (for error messages)."""
        return self._takes()

    def problem(self, args: Mapping[str, Any]) -> str | None:
        """Why the handler cannot be called with ``args``, or None when it can."""
        if not self.checked:
            return None
        keys = args.keys()
        if self.required <= keys and (
            keys <= self._accepted if not self.any_keyword else self._context_name not in keys
        ):
            return None
        unknown = [k for k in args if k not in self._accepted and (not self.any_keyword or k == self._context_name)]
        if unknown:
            return "; ".join(self._unknown(k, keys) for k in unknown) + f" ({self._takes()})"
        missing = [n for n in self.names if n in self.required and n not in keys]
        names = ", ".join(repr(n) for n in missing)
        return f"missing required argument{'s' if len(missing) > 1 else ''} {names} ({self._takes()})"

    def _unknown(self, key: str, given: Any) -> str:
        if key == self._context_name:
            return f"argument {key!r} names the parameter that receives the job's context"
        free = [n for n in self.names if n not in given]
        close = difflib.get_close_matches(key, free or self.names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unexpected argument {key!r}{hint}"

    def _takes(self) -> str:
        if not self.names:
            return "the handler takes no arguments" + (" by name" if self.any_keyword else "")
        shown = ", ".join(n if n in self.required else f"{n}=..." for n in self.names)
        return f"the handler takes {shown}" + (", **kwargs" if self.any_keyword else "")
