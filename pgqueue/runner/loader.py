"""Import an :class:`~pgqueue.App` from a ``module:attribute`` string (the CLI's target).

Every command that takes an app target loads it here, so every failure reads the same: one
line naming the target and the error, plus the user's own stack frames (not pgqueue's,
importlib's, typer's or click's), kept on :attr:`AppImportError.user_frames`.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from types import ModuleType, TracebackType

from ..app import App
from ..errors import ConfigError

__all__ = ["AppImportError", "load_app"]

#: Top-level packages whose frames are machinery, not the user's code.
_MACHINERY = frozenset({"pgqueue", "typer", "click", "importlib", "_frozen_importlib", "_frozen_importlib_external"})


class AppImportError(ConfigError):
    """The app target could not be loaded."""

    def __init__(self, message: str, user_frames: str = "") -> None:
        super().__init__(message)
        #: The formatted stack frames in the user's code that led to the error ("" if none).
        self.user_frames = user_frames


def load_app(target: str) -> App:
    """Import ``module`` and return its ``attribute``, which must be a :class:`~pgqueue.App`.

    Raises:
        AppImportError: the target is malformed, the module fails to import, the attribute
            is missing, or it is not an App.
    """
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise AppImportError(f"expected MODULE:APP, like 'myproject.tasks:app', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = _import(module_name)
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppImportError(
                f"{target} not found: module {module_name!r} has no attribute {attr!r}{_apps_in(module)}"
            ) from None
    if not isinstance(obj, App):
        raise AppImportError(f"{target} is not a pgqueue.App (it is of type {type(obj).__name__}){_apps_in(module)}")
    return obj


def _import(module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        frames = _user_frames(exc.__traceback__)
        if isinstance(exc, ModuleNotFoundError) and not frames and _is_prefix(exc.name, module_name):
            raise AppImportError(
                f"cannot import module {module_name!r}: {exc} (run pgqueue from your project's "
                "directory, or add it to PYTHONPATH)"
            ) from exc
        if isinstance(exc, SyntaxError):
            # The location is the error itself (compile() has no frame in the user's code).
            located = traceback.format_exception_only(exc)[:-1]
            frames += "".join(located)
            message = f"{exc.msg} ({exc.filename}, line {exc.lineno})"
        else:
            lines = str(exc).strip().splitlines() or [""]
            message = lines[0] + (" …" if len(lines) > 1 else "")
        raise AppImportError(f"cannot import module {module_name!r}: {type(exc).__name__}: {message}", frames) from exc


def _is_prefix(name: str | None, module_name: str) -> bool:
    return name is not None and (module_name == name or module_name.startswith(name + "."))


def _user_frames(tb: TracebackType | None) -> str:
    kept = []
    for frame, lineno in traceback.walk_tb(tb):
        package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if package not in _MACHINERY:
            kept.append((frame, lineno))
    return "".join(traceback.StackSummary.extract(iter(kept)).format())


def _apps_in(module: ModuleType) -> str:
    names = sorted(name for name, value in vars(module).items() if isinstance(value, App))
    return f" (pgqueue.App objects in {module.__name__}: {', '.join(names)})" if names else ""
