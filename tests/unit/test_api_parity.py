"""Every ``X_async`` in pgqueue has a sync twin ``X`` taking the same parameters (same names,
kinds and defaults; the connection and iterable types may be the async kinds), and the
known twins exist. That they give the same result: tests/integration/test_api_parity.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import pgqueue

# The twins users call; the scan below also finds any new ones.
KNOWN = {"App.enqueue", "App.enqueue_many", "Task.enqueue", "_db.enqueue.enqueue_one", "_db.enqueue.enqueue_many"}

# The only ways an async twin's annotations may differ from its sync twin's.
ASYNC_SPELLINGS = [(" | AsyncIterable[JobSpec]", ""), ("AsyncConnection", "Connection"), ("AsyncSession", "Session")]


def _modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(pgqueue.__path__, prefix="pgqueue."):
        if info.name == "pgqueue.__main__":  # importing it runs the command line
            continue
        if info.name.startswith("pgqueue.contrib.django."):  # needs a configured Django project
            continue
        yield importlib.import_module(info.name)


def twins() -> dict[str, tuple[Callable[..., Any], Callable[..., Any]]]:
    """``"Owner.name" -> (sync, async)`` for every public ``name_async`` defined in pgqueue."""
    found: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}
    for module in _modules():
        short = module.__name__.removeprefix("pgqueue.")
        owners: list[tuple[str, Any]] = [(short, module)]
        owners += [
            (cls.__name__, cls)
            for cls in vars(module).values()
            if inspect.isclass(cls) and cls.__module__ == module.__name__
        ]
        for owner_name, owner in owners:
            for name, obj in vars(owner).items():
                if name.startswith("_") or not name.endswith("_async") or not callable(obj):
                    continue
                if owner is module and getattr(obj, "__module__", None) != module.__name__:
                    continue  # imported, not defined here
                base = name.removesuffix("_async")
                assert hasattr(owner, base), f"{owner_name}.{name} has no sync twin {owner_name}.{base}"
                found[f"{owner_name}.{base}"] = (getattr(owner, base), obj)
    return found


TWINS = twins()


def test_the_known_twins_exist() -> None:
    assert set(TWINS) >= KNOWN, sorted(KNOWN - set(TWINS))


def _sync_spelling(annotation: Any) -> Any:
    if not isinstance(annotation, str):
        return annotation
    for async_text, sync_text in ASYNC_SPELLINGS:
        annotation = annotation.replace(async_text, sync_text)
    return annotation


@pytest.mark.parametrize("name", sorted(TWINS))
def test_twins_take_the_same_parameters(name: str) -> None:
    sync_fn, async_fn = TWINS[name]
    assert inspect.iscoroutinefunction(async_fn), f"{name}_async is not async"
    assert not inspect.iscoroutinefunction(sync_fn), f"{name} is async"
    sync_sig, async_sig = inspect.signature(sync_fn), inspect.signature(async_fn)
    shape = [(p.name, p.kind, p.default) for p in sync_sig.parameters.values()]
    assert [(p.name, p.kind, p.default) for p in async_sig.parameters.values()] == shape
    annotations = [_sync_spelling(p.annotation) for p in async_sig.parameters.values()]
    assert annotations == [p.annotation for p in sync_sig.parameters.values()]
    assert _sync_spelling(async_sig.return_annotation) == sync_sig.return_annotation
