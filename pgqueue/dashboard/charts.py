"""Server-side SVG charts: no JavaScript, no library, nothing to vendor. The overview
draws finished jobs per minute (completed and discarded, stacked) and the failure rate.

Only numbers and escaped labels go into the markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["Point", "bar_chart", "line_chart"]

WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_BOTTOM, PAD_TOP = 600, 140, 44, 16, 18, 8
PLOT_W = WIDTH - PAD_LEFT - PAD_RIGHT


@dataclass(frozen=True, slots=True)
class Point:
    label: str  #: the x axis label (HH:MM)
    values: tuple[float, ...]  #: stacked from the bottom


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 1.0
    while step * 10 < value:
        step *= 10
    for mult in (1, 2, 5, 10):
        if value <= step * mult:
            return step * mult
    return value


def _frame(title: str, top: float, points: Sequence[Point], unit: str) -> list[str]:
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    base = PAD_TOP + plot_h
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<line x1="{PAD_LEFT}" y1="{base}" x2="{PAD_LEFT + PLOT_W}" y2="{base}" class="axis"/>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + 8}" class="tick" text-anchor="end">{_fmt(top)}{unit}</text>',
        f'<text x="{PAD_LEFT - 4}" y="{PAD_TOP + plot_h}" class="tick" text-anchor="end">0</text>',
    ]
    if points:
        step = max(1, len(points) // 6)
        slot = PLOT_W / len(points)
        for i in range(0, len(points), step):
            x = PAD_LEFT + slot * (i + 0.5)
            out.append(f'<text x="{x:.1f}" y="{HEIGHT - 4}" class="tick" text-anchor="middle">')
            out.append(f"{escape(points[i].label)}</text>")
    return out


def _fmt(value: float) -> str:
    return f"{value:g}" if value < 10_000 else f"{value / 1000:g}k"


def bar_chart(title: str, points: Sequence[Point], classes: Sequence[str]) -> str:
    """Stacked bars, one per point; ``classes`` style each stacked series."""
    top = _nice_max(max((sum(p.values) for p in points), default=0.0))
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    out = _frame(title, top, points, "")
    slot = PLOT_W / max(len(points), 1)
    for i, point in enumerate(points):
        base = float(PAD_TOP + plot_h)
        tip = " + ".join(f"{v:g}" for v in point.values)
        for value, cls in zip(point.values, classes, strict=False):
            h = plot_h * value / top
            if h <= 0:
                continue
            base -= h
            out.append(
                f'<rect x="{PAD_LEFT + slot * i + 1:.1f}" y="{base:.1f}" width="{max(slot - 2, 1):.1f}" '
                f'height="{h:.1f}" class="{escape(cls)}"><title>{escape(point.label)}: {tip}</title></rect>'
            )
    out.append("</svg>")
    return "".join(out)


def line_chart(title: str, points: Sequence[Point], unit: str = "", floor: float = 1.0) -> str:
    """A line through each point's first value, scaled to the largest (at least ``floor``)."""
    scale = _nice_max(max([floor, *(p.values[0] for p in points)]))
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    out = _frame(title, scale, points, unit)
    slot = PLOT_W / max(len(points), 1)
    coords = [
        f"{PAD_LEFT + slot * (i + 0.5):.1f},{PAD_TOP + plot_h - plot_h * min(p.values[0], scale) / scale:.1f}"
        for i, p in enumerate(points)
    ]
    if coords:
        out.append(f'<polyline points="{" ".join(coords)}" class="line"/>')
    out.append("</svg>")
    return "".join(out)
