"""Server-side SVG charts for the leaderboard page: no JavaScript, no CDN, no runtime download.

Why one module: the charts share the SVG frame, the escaping, the tick rule and the colour
ramps, and a change of look (a font size, a margin) is made for all of them at once.

Each function returns one self-contained ``<svg>`` (as ``SafeString``) with a ``<title>`` and a
``<desc>``, a ``viewBox`` so it scales with its container, and CSS classes that
``static/css/leaderboard.css`` colours (so dark mode follows the page). Data-driven fills (the
heatmaps' cells) are computed here, with the cell text picked for contrast. The intervals, the
rating-over-time and the style charts also draw a phone's layout (``narrow``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext, gettext_noop

if TYPE_CHECKING:
    from ratings.model_pages import RatingSeries
    from ratings.selectors import RatedRow

FONT = 13
LABEL_WIDTH = 190
WIN_LOW = (180, 65, 15)  # the row model loses: the page's --b orange
WIN_MID = (244, 244, 246)
WIN_HIGH = (38, 71, 200)  # the row model wins: the page's --accent blue
COUNT_LOW = (238, 242, 255)
COUNT_HIGH = (38, 71, 200)
EMPTY_CELL = (226, 227, 232)


def _percent(text: str) -> str:
    """A translated message whose "%" is doubled (as a python-format message writes it)."""
    return text.replace("%%", "%")


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg(
    plot_id: str, width: float, height: float, title: str, desc: str, body: list[str]
) -> SafeString:
    return mark_safe(  # noqa: S308 - every interpolated text is escaped by _e
        f'<svg class="chart" viewBox="0 0 {_num(width)} {_num(height)}" '
        f'preserveAspectRatio="xMinYMin meet" role="img" '
        f'aria-labelledby="{plot_id}-title {plot_id}-desc" font-size="{FONT}" '
        # Natural size as attributes, shrunk by CSS (max-width: 100%): no style attribute, which
        # the Content-Security-Policy (style-src 'self') would block.
        f'width="{_num(width)}" height="{_num(height)}">'
        f'<title id="{plot_id}-title">{_e(title)}</title>'
        f'<desc id="{plot_id}-desc">{_e(desc)}</desc>' + "".join(body) + "</svg>"
    )


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10) + 0.0)  # + 0.0 turns -0.0 into 0.0
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def _truncate(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def forest_plot(
    rows: Sequence[RatedRow],
    *,
    plot_id: str = "forest",
    narrow: bool = False,
    digits: int = 0,
    title: str | None = None,
    description: str | None = None,
    axis: str | None = None,
) -> SafeString:
    """Ratings with their 95% intervals, one line per model, best first.

    ``narrow`` is the phone's layout: each name above its interval rather than beside it, in a
    drawing about as wide as a phone, so that its text is not shrunk to a third of its size.
    ``digits``, ``title``, ``description`` (with ``%(ratings)s``) and ``axis`` draw another
    estimate the same way (the red-team board's robustness, on a logit scale); the three are
    translated messages, a "%" in them doubled as in every python-format message.
    """
    if narrow:
        row_h, top, bottom, right = 44, 10, 44, 48
        width, label_width = 360, 12
    else:
        row_h, top, bottom, right = 30, 16, 44, 56
        width, label_width = 620, 210  # room for the rank and a 24-character name
    plot_left, plot_right = label_width, width - right
    height = top + row_h * len(rows) + bottom
    lows = [r["rating_lower"] for r in rows if r.get("rating_lower") is not None]
    highs = [r["rating_upper"] for r in rows if r.get("rating_upper") is not None]
    ticks = (
        nice_ticks(min(lows), max(highs), count=4 if narrow else 6)
        if lows and highs
        else [0.0, 1.0]
    )
    lo, hi = ticks[0], ticks[-1] if ticks[-1] > ticks[0] else ticks[0] + 1

    def x(value: float) -> float:
        return plot_left + (value - lo) / (hi - lo) * (plot_right - plot_left)

    body = []
    axis_y = top + row_h * len(rows)
    for tick in ticks:
        tx = x(tick)
        body.append(
            f'<line class="grid" x1="{tx:.1f}" y1="{top - 6}" x2="{tx:.1f}" y2="{axis_y}"/>'
            f'<text class="tick" x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle">'
            f"{_num(tick)}</text>"
        )
    axis_label = _e(_percent(axis or gettext("Rating (95%% interval)")))
    body.append(
        f'<text class="axis-label" x="{(plot_left + plot_right) / 2:.1f}" y="{height - 6}" '
        f'text-anchor="middle">{axis_label}</text>'
    )
    for i, row in enumerate(rows):
        # The interval's line: the row's middle, or below the name in the narrow layout.
        cy = top + row_h * i + (30 if narrow else row_h / 2)
        row_top = top + row_h * i
        if i % 2 == 0:
            body.append(
                f'<rect class="band" x="0" y="{row_top:.1f}" width="{width}" height="{row_h}"/>'
            )
        name = _truncate(str(row.get("name", row["model"])), 40 if narrow else 24)
        retired = "" if row.get("active", True) else " (retired)"
        label = f'<tspan class="rank">{_e(row.get("rank", ""))}</tspan>  {_e(name)}{_e(retired)}'
        if narrow:
            body.append(
                f'<text class="label" x="{label_width}" y="{row_top + 15:.1f}">{label}</text>'
            )
        else:
            body.append(
                f'<text class="label" x="{label_width - 12}" y="{cy + 4.5:.1f}" '
                f'text-anchor="end">{label}</text>'
            )
        rating = row.get("rating")
        if rating is None:
            continue
        if row.get("rating_lower") is not None and row.get("rating_upper") is not None:
            x1, x2 = x(row["rating_lower"]), x(row["rating_upper"])
            body.append(
                f'<line class="whisker" x1="{x1:.1f}" y1="{cy:.1f}" x2="{x2:.1f}" y2="{cy:.1f}"/>'
                f'<line class="whisker" x1="{x1:.1f}" y1="{cy - 6:.1f}" x2="{x1:.1f}" '
                f'y2="{cy + 6:.1f}"/>'
                f'<line class="whisker" x1="{x2:.1f}" y1="{cy - 6:.1f}" x2="{x2:.1f}" '
                f'y2="{cy + 6:.1f}"/>'
            )
        body.append(
            f'<circle class="point" cx="{x(rating):.1f}" cy="{cy:.1f}" r="5.5">'
            f"<title>{_e(row.get('name', row['model']))}: {rating:.{digits}f} "
            f"({row.get('rating_lower', rating):.{digits}f} to "
            f"{row.get('rating_upper', rating):.{digits}f})</title></circle>"
            f'<text class="value" x="{plot_right + 10}" y="{cy + 4.5:.1f}">'
            f"{rating:.{digits}f}</text>"
        )
    desc = "; ".join(
        f"{r.get('name', r['model'])} {r['rating']:.{digits}f} "
        f"[{r['rating_lower']:.{digits}f}, {r['rating_upper']:.{digits}f}]"
        for r in rows
        if r.get("rating") is not None
    )
    return _svg(
        plot_id,
        width,
        height,
        _percent(title or gettext("Ratings with 95%% confidence intervals")),
        (description or gettext("Models sorted by rating, best first: %(ratings)s."))
        % {"ratings": desc},
        body,
    )


def _mix(low: tuple[int, int, int], high: tuple[int, int, int], t: float) -> tuple[int, ...]:
    t = min(max(t, 0.0), 1.0)
    return tuple(round(a + (b - a) * t) for a, b in zip(low, high, strict=True))


def _hex(rgb: Sequence[int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _ink(rgb: Sequence[int]) -> str:
    """Black or white text, whichever contrasts more with the fill (WCAG relative luminance)."""

    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4

    lum = 0.2126 * channel(rgb[0]) + 0.7152 * channel(rgb[1]) + 0.0722 * channel(rgb[2])
    return "#111216" if (lum + 0.05) / 0.05 > 1.05 / (lum + 0.05) else "#ffffff"


def win_colour(value: float) -> tuple[int, ...]:
    if value < 0.5:
        return _mix(WIN_LOW, WIN_MID, value / 0.5)
    return _mix(WIN_MID, WIN_HIGH, (value - 0.5) / 0.5)


def heatmap(
    *,
    labels: Sequence[str],
    values: Sequence[Sequence[float | None]],
    kind: str,
    plot_id: str,
    title: str,
    desc: str,
    narrow: bool = False,
) -> SafeString:
    """A square matrix: rows and columns are models in rating order.

    ``kind`` is ``"fraction"`` (0..1 on a diverging scale, shown as percentages) or ``"count"``
    (a square-root sequential scale, shown as integers). Empty cells are grey with a dash.
    ``narrow`` is the phone's drawing: never wider than a phone, names cut shorter, the cells
    as large as that leaves (their figures drawn while they fit, the colours always).
    """
    n = len(labels)
    if narrow:
        # Room on the right for the last column's slanted name.
        left, names, col_label_h = 104.0, 12, 90.0
        cell = min(48.0, (360.0 - left - 64) / max(n, 1))
        width = left + cell * n + 64
    else:
        cell = max(26.0, min(60.0, 600.0 / max(n, 1)))
        left, names, col_label_h = LABEL_WIDTH, 24, 120.0
        width = left + cell * n + 24
    legend_h = 46.0
    height = col_label_h + cell * n + legend_h + 10
    peak = max((v for row in values for v in row if v is not None), default=0) or 1
    show_values = cell >= 30
    body = []

    def fill(v: float) -> tuple[int, ...]:
        if kind == "fraction":
            return win_colour(v)
        return _mix(COUNT_LOW, COUNT_HIGH, math.sqrt(v / peak))

    def text(v: float) -> str:
        return f"{v * 100:.0f}" if kind == "fraction" else f"{v:.0f}"

    for j, label in enumerate(labels):
        cx = left + cell * j + cell / 2
        body.append(
            f'<text class="label" transform="translate({cx + 4:.1f},{col_label_h - 8}) '
            f'rotate(-50)" text-anchor="start">{_e(_truncate(label, min(names, 20)))}</text>'
        )
    for i, label in enumerate(labels):
        cy = col_label_h + cell * i
        body.append(
            f'<text class="label" x="{left - 10}" y="{cy + cell / 2 + 4.5:.1f}" '
            f'text-anchor="end">{_e(_truncate(label, names))}</text>'
        )
        for j in range(n):
            v = values[i][j] if j < len(values[i]) else None
            cx = left + cell * j
            # None: an empty cell (no battles, or a model against itself in counts)
            value = None if v is None or (kind == "count" and i == j) else float(v)
            rgb: tuple[int, ...]
            if value is None:
                rgb = EMPTY_CELL
                tip = f"{labels[i]} vs {labels[j]}: no battles"
            else:
                rgb = fill(value)
                tip = (
                    f"{labels[i]} vs {labels[j]}: {text(value)}% won"
                    if kind == "fraction"
                    else f"{labels[i]} vs {labels[j]}: {text(value)} battles"
                )
            body.append(
                f'<rect x="{cx + 1:.1f}" y="{cy + 1:.1f}" width="{cell - 2:.1f}" '
                f'height="{cell - 2:.1f}" rx="3" fill="{_hex(rgb)}"><title>{_e(tip)}</title></rect>'
            )
            if show_values:
                shown = "–" if value is None else text(value)
                body.append(
                    f'<text x="{cx + cell / 2:.1f}" y="{cy + cell / 2 + 4.5:.1f}" '
                    f'text-anchor="middle" color="{_ink(rgb)}" font-size="{min(FONT, cell / 3):.1f}"'
                    f' aria-hidden="true">{shown}</text>'
                )
    # Legend: a gradient bar under the matrix.
    ly = col_label_h + cell * n + 18
    # At least wide enough for its three labels apart, however few the models.
    lw = max(min(cell * n, 300.0), min(200.0, width - left - 8))
    stops = 10
    grad = []
    for k in range(stops):
        t = k / (stops - 1)
        rgb = win_colour(t) if kind == "fraction" else _mix(COUNT_LOW, COUNT_HIGH, math.sqrt(t))
        grad.append(
            f'<rect x="{left + lw * k / stops:.1f}" y="{ly}" width="{lw / stops + 0.5:.1f}" '
            f'height="10" fill="{_hex(rgb)}"/>'
        )
    body.extend(grad)
    low_text, high_text = (
        (_e(_percent(gettext("0%% won"))), _e(_percent(gettext("100%% won"))))
        if kind == "fraction"
        else ("0", f"{peak:.0f}")
    )
    body.append(
        f'<text class="tick" x="{left}" y="{ly + 24}">{low_text}</text>'
        f'<text class="tick" x="{left + lw}" y="{ly + 24}" text-anchor="end">{high_text}</text>'
    )
    if kind == "fraction":
        body.append(
            f'<text class="tick" x="{left + lw / 2:.1f}" y="{ly + 24}" text-anchor="middle">'
            "50%</text>"
        )
    return _svg(plot_id, width, height, title, desc, body)


# Marked here, translated where they are drawn (``style_label``).
STYLE_LABELS = {
    "length": gettext_noop("Answer length"),
    "header": gettext_noop("Headers"),
    "list": gettext_noop("List items"),
    "bold": gettext_noop("Bold text"),
}


def style_label(name: str) -> str:
    """A style element's name in the active language; an unknown one as the fit named it."""
    label = STYLE_LABELS.get(name)
    return gettext(label) if label else name


def style_plot(
    coefficients: dict[str, float | None],
    intervals: dict[str, list[float] | None] | None,
    *,
    plot_id: str = "style",
    narrow: bool = False,
) -> SafeString:
    """Style coefficients as bars from zero with 95% interval whiskers; ``narrow`` is the
    phone's drawing, about as wide as a phone, its axis label on two lines."""
    names = list(coefficients)
    intervals = intervals or {}
    row_h, top, bottom = 40, 14, 58 if narrow else 44
    width, right, label_width = (360, 68, 104) if narrow else (600, 62, 120)
    plot_left, plot_right = label_width, width - right
    height = top + row_h * len(names) + bottom
    extent = [0.0]
    for name in names:
        coefficient, interval = coefficients[name], intervals.get(name)
        if coefficient is not None:
            extent.append(float(coefficient))
        if interval:
            extent.extend(float(v) for v in interval if v is not None)
    bound = max(abs(v) for v in extent) or 0.1
    ticks = nice_ticks(-bound, bound, 5 if narrow else 7)
    lo, hi = ticks[0], ticks[-1]

    def x(value: float) -> float:
        return plot_left + (value - lo) / (hi - lo) * (plot_right - plot_left)

    axis_y = top + row_h * len(names)
    middle = (plot_left + plot_right) / 2
    body = []
    for tick in ticks:
        tx = x(tick)
        body.append(
            f'<line class="grid" x1="{tx:.1f}" y1="{top - 6}" x2="{tx:.1f}" y2="{axis_y}"/>'
            f'<text class="tick" x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle">'
            f"{'0' if tick == 0 else format(tick, '+.2f')}</text>"
        )
    axis_label = _percent(gettext("Log-odds of winning per s.d. of the difference (95%% interval)"))
    lines = axis_label.split(" (", 1) if narrow else [axis_label]
    if len(lines) == 2:
        lines[1] = "(" + lines[1]
    spans = "".join(
        f'<tspan x="{middle:.1f}" dy="{0 if i == 0 else 14}">{_e(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    body.append(
        f'<line class="zero" x1="{x(0):.1f}" y1="{top - 6}" x2="{x(0):.1f}" y2="{axis_y}"/>'
        f'<text class="axis-label" x="{middle:.1f}" y="{height - 6 - 14 * (len(lines) - 1)}" '
        f'text-anchor="middle">{spans}</text>'
    )
    parts = []
    for i, name in enumerate(names):
        cy = top + row_h * i + row_h / 2
        body.append(
            f'<text class="label" x="{label_width - 12}" y="{cy + 4.5:.1f}" text-anchor="end">'
            f"{_e(style_label(name))}</text>"
        )
        value = coefficients[name]
        if value is None:
            not_estimated = _e(gettext("not estimated (no variation)"))
            at = plot_left + 4 if narrow else x(0) + 8
            body.append(
                f'<text class="tick" x="{at:.1f}" y="{cy + 4.5:.1f}">{not_estimated}</text>'
            )
            parts.append(gettext("%(element)s not estimated") % {"element": style_label(name)})
            continue
        x0, x1 = sorted((x(0), x(value)))
        css = "bar positive" if value >= 0 else "bar negative"
        body.append(
            f'<rect class="{css}" x="{x0:.1f}" y="{cy - 11:.1f}" width="{max(x1 - x0, 1):.1f}" '
            f'height="22" rx="3"><title>{_e(style_label(name))}: {value:+.3f}'
            "</title></rect>"
        )
        interval = intervals.get(name)
        if interval and None not in interval:
            a, b = x(interval[0]), x(interval[1])
            body.append(
                f'<line class="whisker" x1="{a:.1f}" y1="{cy:.1f}" x2="{b:.1f}" y2="{cy:.1f}"/>'
                f'<line class="whisker" x1="{a:.1f}" y1="{cy - 6:.1f}" x2="{a:.1f}" '
                f'y2="{cy + 6:.1f}"/>'
                f'<line class="whisker" x1="{b:.1f}" y1="{cy - 6:.1f}" x2="{b:.1f}" '
                f'y2="{cy + 6:.1f}"/>'
            )
        body.append(
            f'<text class="value" x="{plot_right + 10}" y="{cy + 4.5:.1f}">{value:+.3f}</text>'
        )
        parts.append(f"{style_label(name)} {value:+.3f}")
    return _svg(
        plot_id,
        width,
        height,
        gettext("Style coefficients"),
        gettext(
            "How much each style element shifts the odds of winning, controlled for the models: "
            "%(coefficients)s."
        )
        % {"coefficients": "; ".join(parts)},
        body,
    )


def rating_time_plot(
    series: Sequence[RatingSeries],
    *,
    plot_id: str = "over-time",
    title: str,
    narrow: bool = False,
) -> SafeString:
    """Ratings across snapshots, one line per model (its 95% interval as a band for a single
    model), time along the x axis; models keep the order given (the legend's). ``narrow`` is
    the phone's drawing, about as wide as a phone, so that its text keeps its size."""
    if narrow:
        width, height, left, right, top, bottom = 360, 220, 48, 12, 16, 48
    else:
        width, height, left, right, top, bottom = 640, 300, 56, 16, 16, 48
    legend_h = 20 * len(series) if len(series) > 1 else 0
    height += legend_h
    plot_bottom = height - bottom - legend_h
    points = [p for s in series for p in s.points]
    if not points:
        return _svg(
            plot_id, width, 60, title, gettext("No snapshot has rated these models yet."), []
        )
    lows = [p.rating_lower if len(series) == 1 else p.rating for p in points]
    highs = [p.rating_upper if len(series) == 1 else p.rating for p in points]
    ticks = nice_ticks(min(lows), max(highs), 5)
    lo, hi = ticks[0], ticks[-1] if ticks[-1] > ticks[0] else ticks[0] + 1
    times = sorted({p.created_at.timestamp() for p in points})
    t0, t1 = times[0], times[-1]

    def x(moment: float) -> float:
        if t1 == t0:
            return (left + width - right) / 2
        return left + (moment - t0) / (t1 - t0) * (width - right - left)

    def y(value: float) -> float:
        return plot_bottom - (value - lo) / (hi - lo) * (plot_bottom - top)

    body = []
    for tick in ticks:
        ty = y(tick)
        body.append(
            f'<line class="grid" x1="{left}" y1="{ty:.1f}" x2="{width - right}" y2="{ty:.1f}"/>'
            f'<text class="tick" x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{_num(tick)}</text>"
        )
    first = min(points, key=lambda p: p.created_at).created_at
    last = max(points, key=lambda p: p.created_at).created_at
    for moment, anchor in ((first, "start"), (last, "end")) if t1 > t0 else ((first, "middle"),):
        tx = (
            x(moment.timestamp())
            if anchor == "middle"
            else (left if anchor == "start" else width - right)
        )
        body.append(
            f'<text class="tick" x="{tx:.1f}" y="{plot_bottom + 16}" text-anchor="{anchor}">'
            f"{_e(moment.strftime('%Y-%m-%d %H:%M'))}</text>"
        )
    axis_label = _e(gettext("Snapshot time (UTC)"))
    body.append(
        f'<text class="axis-label" x="{(left + width - right) / 2:.1f}" y="{plot_bottom + 34}" '
        f'text-anchor="middle">{axis_label}</text>'
    )
    for i, line in enumerate(series):
        cls = f"series series-{i % 6}"
        coords = [(x(p.created_at.timestamp()), p) for p in line.points]
        if len(series) == 1 and len(coords) > 1:
            upper = " ".join(f"{cx:.1f},{y(p.rating_upper):.1f}" for cx, p in coords)
            lower = " ".join(f"{cx:.1f},{y(p.rating_lower):.1f}" for cx, p in reversed(coords))
            body.append(f'<polygon class="interval-band" points="{upper} {lower}"/>')
        if len(coords) > 1:
            path = " ".join(f"{cx:.1f},{y(p.rating):.1f}" for cx, p in coords)
            body.append(f'<polyline class="{cls}" points="{path}"/>')
        for cx, p in coords:
            body.append(
                f'<circle class="{cls} dot" cx="{cx:.1f}" cy="{y(p.rating):.1f}" r="3.5">'
                f"<title>{_e(line.name)}: {p.rating:.0f} ({p.rating_lower:.0f} to "
                f"{p.rating_upper:.0f}), snapshot #{p.snapshot_id}</title></circle>"
            )
        if legend_h:
            ly = plot_bottom + bottom + 20 * i + 6
            body.append(
                f'<line class="{cls}" x1="{left}" y1="{ly}" x2="{left + 24}" y2="{ly}"/>'
                f'<text class="label" x="{left + 32}" y="{ly + 4.5}">{_e(line.name)}</text>'
            )
    desc = "; ".join(
        f"{s.name}: "
        + (
            ", ".join(f"{p.rating:.0f} on {p.created_at:%Y-%m-%d %H:%M}" for p in s.points)
            or "not rated"
        )
        for s in series
    )
    return _svg(
        plot_id,
        width,
        height,
        title,
        gettext("Rating at each snapshot, oldest first. %(ratings)s.") % {"ratings": desc},
        body,
    )
