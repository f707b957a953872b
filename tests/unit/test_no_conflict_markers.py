"""No merge conflict left behind: no tracked text file carries conflict markers."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<<<<<<<|>>>>>>>) |^=======$", re.MULTILINE)
SKIP = {".venv", ".git", ".wt", "node_modules", "__pycache__", "build", "dist"}


def test_no_file_carries_merge_conflict_markers() -> None:
    offenders = []
    for path in REPO.rglob("*"):
        if path.suffix not in {".py", ".sql", ".md", ".toml", ".html", ".css", ".js", ".cfg", ".txt", ".yml"}:
            continue
        if SKIP.intersection(path.relative_to(REPO).parts):
            continue
        text = path.read_text("utf-8", errors="replace")
        offenders += [f"{path.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}" for m in MARKER.finditer(text)]
    assert offenders == []
