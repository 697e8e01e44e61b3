"""Charts as inline SVG computed on the server: the geometry here, the markup in templates/_charts.html. No
JavaScript library and nothing fetched from elsewhere; a page is readable with scripts off.

A chart is one series of (x, y) points against an optional limit line (a rate limit, a budget) over a fixed x range
(the last minutes, the day, the month), so a series grows from the left as time passes. The y axis starts at 0 and
ends at the larger of the limit and the series' peak, so a series at its limit touches the line.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH_PX = 320
HEIGHT_PX = 110
PAD_PX = 4


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    unit: str
    points: str
    """SVG polyline points ("x,y x,y ..."), '' with fewer than one point."""
    dots: list[tuple[float, float]]
    """The last point, drawn as a dot (a lone sample has no line)."""
    limit: int
    """0: no limit (no line)."""
    limit_y_px: float
    y_max: float
    latest: float
    peak: float
    width_px: int = WIDTH_PX
    height_px: int = HEIGHT_PX

    @property
    def over_limit(self) -> bool:
        return bool(self.limit) and self.latest >= self.limit


def line_chart(
    title: str, unit: str, series: list[tuple[float, float]], x_range: tuple[float, float], limit: int = 0
) -> Chart:
    """`series`: (x, y) points in x order within `x_range` (x in any unit: seconds, days)."""
    peak = max((y for _, y in series), default=0.0)
    y_max = max(float(limit), peak, 1.0)
    x_lo, x_hi = x_range
    plot_w, plot_h = WIDTH_PX - 2 * PAD_PX, HEIGHT_PX - 2 * PAD_PX

    def at(x: float, y: float) -> tuple[float, float]:
        fx = min(max((x - x_lo) / (x_hi - x_lo), 0.0), 1.0) if x_hi > x_lo else 1.0
        return round(PAD_PX + fx * plot_w, 1), round(PAD_PX + plot_h * (1 - max(y, 0.0) / y_max), 1)

    xy = [at(x, y) for x, y in series]
    return Chart(
        title=title,
        unit=unit,
        points=" ".join(f"{x},{y}" for x, y in xy),
        dots=xy[-1:],
        limit=limit,
        limit_y_px=at(x_lo, float(limit))[1] if limit else 0.0,
        y_max=y_max,
        latest=series[-1][1] if series else 0.0,
        peak=peak,
    )
