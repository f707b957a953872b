"""Import an :class:`~pgqueue.App` from a ``module:attribute`` string (the CLI's target)."""

from __future__ import annotations

import importlib
import os
import sys

from .app import App
from .errors import ConfigError

__all__ = ["load_app"]


def load_app(target: str) -> App:
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"expected MODULE:APP, like 'myproject.tasks:app', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {module_name!r}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise ConfigError(f"{target} is a {type(obj).__name__}, not a pgqueue.App")
    return obj
