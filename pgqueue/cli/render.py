"""Tables that keep every column on a narrow terminal (``cron list``, ``jobs list``, ``status``).

Left alone, rich shrinks every column of a too-wide table by the same amount, and the
narrow ones reach zero width and vanish. :func:`fit_table` narrows the widest columns
first instead, down to their header's longest word; when even that does not fit, it prints
each row as a record, one ``field: value`` block per row.
"""

from __future__ import annotations

import dataclasses
from copy import copy

from rich.console import Console, ConsoleOptions, Group, OverflowMethod, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Column, Table
from rich.text import Text

__all__ = ["fit_table", "period_text", "rate_text"]

#: The narrowest a column is made (unless its content is narrower), in cells.
MIN_WIDTH = 4
#: Words up to this long are not split while other columns can still give way.
WORD_WIDTH = 8
_UNBOUNDED = 10_000


def fit_table(table: Table) -> RenderableType:
    """``table``, laid out for the width it is rendered at without dropping a column."""
    return _Fitted(table)


class _Fitted:
    def __init__(self, table: Table) -> None:
        self.table = table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield _fit(self.table, console, options.max_width)


def _fit(table: Table, console: Console, width: int) -> RenderableType:
    columns = table.columns
    if not columns or not table.rows:
        return table
    wide = console.options.update_width(_UNBOUNDED)
    natural: list[int] = []
    floor: list[int] = []
    for column in columns:
        header = Measurement.get(console, wide, column.header) if table.show_header else Measurement(0, 0)
        cells = [Measurement.get(console, wide, c) for c in column.cells]
        content = max([header.maximum, 1, *(m.maximum for m in cells)])
        if column.max_width is not None:
            content = min(content, column.max_width)
        content = max(content, column.min_width or 0)
        natural.append(content)
        word = min(max((m.minimum for m in cells), default=0), WORD_WIDTH)
        floor.append(min(content, max(header.minimum, word, MIN_WIDTH, column.min_width or 0)))
    if sum(natural) <= width - _overhead(table):
        return table
    # Too wide: no edges and one space less between columns, then the widest columns give
    # way first.
    fitted = copy(table)
    fitted.padding = (0, 1, 0, 0)
    fitted.pad_edge = False
    fitted.show_edge = False
    available = width - _overhead(fitted)
    if sum(floor) > available:
        return _records(table) if table.show_header else table
    low, high = 0, max(natural)  # the largest cap on column widths that fits
    while low < high:
        cap = (low + high + 1) // 2
        if sum(min(n, max(f, cap)) for n, f in zip(natural, floor, strict=True)) <= available:
            low = cap
        else:
            high = cap - 1
    fitted.columns = [
        _narrowed(column, min(n, max(f, low)), n) for column, n, f in zip(columns, natural, floor, strict=True)
    ]
    return Group(fitted, Text(""))  # the blank line the edge row gave


def _overhead(table: Table) -> int:
    """Cells a row takes besides its content: borders and padding."""
    _, right, _, left = Padding.unpack(table.padding)
    n = len(table.columns)
    borders = ((2 if table.show_edge else 0) + (n - 1)) if table.box else 0
    padding = n * (left + right) - (0 if table.pad_edge else left + right)
    return borders + padding


def _narrowed(column: Column, width: int, natural: int) -> Column:
    if width >= natural:
        return dataclasses.replace(column, width=width)
    # Cells wrap at spaces; a longer word is cut with an ellipsis where the table
    # abbreviated already, else folded onto the next line.
    overflow: OverflowMethod = "ellipsis" if column.overflow == "ellipsis" else "fold"
    return dataclasses.replace(column, width=width, no_wrap=False, overflow=overflow)


def _records(table: Table) -> Group:
    parts: list[RenderableType] = []
    if table.title:
        parts.append(_styled(table.title, "table.title"))
    labels = [_plain(c.header) or f"column {i + 1}" for i, c in enumerate(table.columns)]
    cells = [list(c.cells) for c in table.columns]
    for row in range(len(table.rows)):
        grid = Table.grid(padding=(0, 1))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for label, column in zip(labels, cells, strict=True):
            value = column[row] if row < len(column) else ""
            if _plain(value) != "":
                grid.add_row(Text(f"{label}:"), value)
        parts += [Text(""), grid]
    if table.caption:
        parts += [Text(""), _styled(table.caption, "table.caption")]
    parts.append(Text(""))
    return Group(*parts)


def _plain(value: RenderableType) -> str | None:
    """The text of a str or Text cell (None for other renderables, which are never empty)."""
    if isinstance(value, Text):
        return value.plain.strip()
    if isinstance(value, str):
        return value.strip()
    return None


def _styled(value: RenderableType, style: str) -> RenderableType:
    return Text.from_markup(value, style=style) if isinstance(value, str) else value


def period_text(value: float) -> str:
    """A rate's period, short: 500ms, 1s, 1m, 1m30s, 1h, 1d."""
    if value < 1:
        return f"{value * 1000:g}ms"
    parts = []
    rest = round(value, 3)
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if rest >= size:
            parts.append(f"{int(rest // size)}{unit}")
            rest -= int(rest // size) * size
    if rest:
        parts.append(f"{rest:g}s")
    return "".join(parts)


def rate_text(limit: int | None, period: float | None, used: int | None = None) -> str:
    """``100/1m`` (at most 100 starts in any minute), ``7 of 100/1m`` with the starts in
    the current window, ``-`` without a rate."""
    if limit is None or period is None:
        return "-"
    text = f"{limit}/{period_text(period)}"
    return text if used is None else f"{used} of {text}"
