"""The ``pgqueue`` command line (typer + rich); the only package that imports them."""

from __future__ import annotations

from .main import app, main

__all__ = ["app", "main"]
