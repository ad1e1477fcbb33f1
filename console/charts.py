"""Small server-rendered SVG charts for the dashboard: no JavaScript, every label escaped."""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

PALETTE = ("#417690", "#79aec8", "#e0a800", "#ba2121", "#5b8a3c", "#8c6bb1", "#c46a2d", "#888888")
STATUS_COLOURS = {"ok": "#5b8a3c", "nothing_to_save": "#79aec8", "failed": "#ba2121", "undone": "#888888",
                  "running": "#e0a800"}


def _r(value: float) -> float:
    return round(value, 1)


def colour(name: str, index: int) -> str:
    return STATUS_COLOURS.get(name, PALETTE[index % len(PALETTE)])


def _svg(width: int, height: int, body: SafeString, label: str) -> SafeString:
    return format_html('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="100%" role="img" '
                       'aria-label="{}">{}</svg>', width, height, label, body)


def legend(series: list[str]) -> SafeString:
    return format_html_join(
        " ", '<span style="white-space:nowrap"><span style="display:inline-block;width:10px;height:10px;'
             'background:{}"></span> {}</span>',
        ((colour(name, i), name) for i, name in enumerate(series)))


def stacked_columns(days: list[str], series: list[str], values: dict[tuple[str, str], int], *,
                    label: str, width: int = 560, height: int = 200) -> SafeString:
    """One column per day, stacked by series (e.g. review runs by outcome)."""
    left, bottom, top = 34, 22, 8
    plot_w, plot_h = width - left - 6, height - bottom - top
    totals = [sum(values.get((d, s), 0) for s in series) for d in days]
    peak = max(totals, default=0) or 1
    step = plot_w / max(len(days), 1)
    parts = [format_html('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>', left, top + plot_h, width - 6,
                         top + plot_h),
             format_html('<text x="{}" y="{}" text-anchor="end">{}</text>', left - 4, top + 10, peak),
             format_html('<text x="{}" y="{}" text-anchor="end">0</text>', left - 4, top + plot_h)]
    for i, day in enumerate(days):
        y = top + plot_h
        for j, name in enumerate(series):
            n = values.get((day, name), 0)
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                                     "<title>{} {}: {}</title></rect>", _r(left + i * step + 1), _r(y),
                                     _r(max(step - 2, 1)), _r(h), colour(name, j), day, name, n))
        if i % max(1, len(days) // 6) == 0:
            parts.append(format_html('<text x="{}" y="{}" text-anchor="middle">{}</text>',
                                     _r(left + i * step + step / 2), height - 6, day[5:]))
    return _svg(width, height, mark_safe("".join(parts)), label)  # every part is format_html output


def horizontal_bars(rows: list[tuple[str, int]], *, label: str, width: int = 560, bar: int = 16) -> SafeString:
    """One bar per row, longest first (e.g. memory rows by category and scope)."""
    left = 190
    height = max(len(rows), 1) * (bar + 6) + 6
    peak = max((n for _, n in rows), default=0) or 1
    parts = []
    for i, (name, n) in enumerate(rows):
        y = 6 + i * (bar + 6)
        w = (width - left - 60) * n / peak
        parts.append(format_html(
            '<text x="{}" y="{}" text-anchor="end">{}</text><rect x="{}" y="{}" width="{}" height="{}" '
            'fill="{}"><title>{}: {}</title></rect><text x="{}" y="{}">{}</text>',
            left - 6, y + bar - 4, name, left, y, _r(max(w, 1)), bar, PALETTE[0], name, n, _r(left + w + 4),
            y + bar - 4, n))
    return _svg(width, height, mark_safe("".join(parts)), label)  # every part is format_html output


def gauges(rows: list[tuple[str, float, float]], *, label: str, width: int = 560, bar: int = 14) -> SafeString:
    """Share of a limit per row, with the threshold marked: (name, share 0..1+, threshold 0..1)."""
    left = 220
    plot_w = width - left - 50
    height = max(len(rows), 1) * (bar + 8) + 8
    parts = []
    for i, (name, share, threshold) in enumerate(rows):
        y = 6 + i * (bar + 8)
        fill = "#ba2121" if share >= threshold else ("#e0a800" if share >= threshold * 0.8 else "#5b8a3c")
        tx = left + plot_w * threshold
        parts.append(format_html(
            '<text x="{}" y="{}" text-anchor="end">{}</text>'
            '<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>'
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {}% of the window</title></rect>'
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333" stroke-dasharray="3,2"/>'
            '<text x="{}" y="{}">{}%</text>',
            left - 6, y + bar - 3, name, left, y, plot_w, bar, left, y, _r(plot_w * min(share, 1.0)), bar, fill, name,
            round(share * 100, 1), _r(tx), y - 2, _r(tx), y + bar + 2, left + plot_w + 4, y + bar - 3,
            round(share * 100)))
    return _svg(width, height, mark_safe("".join(parts)), label)  # every part is format_html output


def small_multiples(days: list[str], series: dict[str, dict[str, int]], *, label: str, width: int = 560,
                    row_h: int = 34) -> SafeString:
    """One strip of daily columns per series (e.g. revisions per resource), each on its own scale."""
    left = 110
    plot_w = width - left - 40
    height = max(len(series), 1) * (row_h + 6) + 18
    step = plot_w / max(len(days), 1)
    parts = []
    for i, (name, per_day) in enumerate(series.items()):
        y0 = 4 + i * (row_h + 6)
        peak = max(per_day.values(), default=0) or 1
        parts.append(format_html('<text x="{}" y="{}" text-anchor="end">{}</text>', left - 6, y0 + row_h - 10, name))
        parts.append(format_html('<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#ccc"/>', left, y0 + row_h,
                                 left + plot_w, y0 + row_h))
        for j, day in enumerate(days):
            n = per_day.get(day, 0)
            if n:
                h = (row_h - 4) * n / peak
                parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                                         "<title>{} {}: {}</title></rect>", _r(left + j * step + 0.5),
                                         _r(y0 + row_h - h), _r(max(step - 1, 1)), _r(h), colour(name, i), name,
                                         day, n))
        parts.append(format_html('<text x="{}" y="{}">{}</text>', left + plot_w + 4, y0 + row_h - 10,
                                 sum(per_day.values())))
    if days:
        parts.append(format_html('<text x="{}" y="{}">{}</text><text x="{}" y="{}" text-anchor="end">{}</text>',
                                 left, height - 4, days[0][5:], left + plot_w, height - 4, days[-1][5:]))
    return _svg(width, height, mark_safe("".join(parts)), label)  # every part is format_html output
