"""No merge conflict left behind: no tracked text file carries conflict markers."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<<<<<<<|>>>>>>>) |^=======$", re.MULTILINE)
SKIP = {".venv", ".git", ".wt", "node_modules", "__pycache__", "build", "dist"}


SUFFIXES = {".py", ".sql", ".md", ".toml", ".html", ".css", ".js", ".cfg", ".txt", ".yml"}


def _files() -> list[Path]:
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.startswith(".")]
        found += [Path(root, f) for f in files if Path(f).suffix in SUFFIXES]
    return found


def test_no_file_carries_merge_conflict_markers() -> None:
    offenders = []
    for path in _files():
        text = path.read_text("utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}" for m in MARKER.finditer(text)]
    assert offenders == []
