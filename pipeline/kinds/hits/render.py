"""Output of series for people: table, JSON, CSV, a terminal chart, a PNG plot."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.core.calendar import iso
from pipeline.core.parse import UsageError

BARS = " ▁▂▃▄▅▆▇█"


def series_rows(series: Sequence[tuple[datetime, int]]) -> list[dict[str, Any]]:
    """``{"t": ISO time with its offset, "hits": n}`` per bucket: the CLI's JSON and ``/api/hits``.

    UTC (and a naive time, UTC here) ends in ``Z``; a site's local time carries its offset.
    A bucket of a day past the site's retention (its counters pruned) has ``"pruned": true``:
    its count is not the day's traffic.
    """
    pruned: frozenset[int] = getattr(series, "pruned", frozenset())
    return [
        {"t": iso(t), "hits": n, **({"pruned": True} if i in pruned else {})}
        for i, (t, n) in enumerate(series)
    ]


def pruned_note(series: Sequence[tuple[datetime, int]], by: str) -> str | None:
    """One line naming the days whose buckets are past retention, if any (the CLI's table)."""
    pruned: frozenset[int] = getattr(series, "pruned", frozenset())
    if not pruned:
        return None
    days = sorted({series[i][0].date().isoformat() for i in pruned})
    shown = ", ".join(days[:5]) + (f" and {len(days) - 5} more" if len(days) > 5 else "")
    tier = "minute" if by == "minute" else "hourly"
    return (
        f"note: {len(pruned)} of {len(series)} buckets are past the site's retention ({tier} counters "
        f"pruned on {shown}): those zeros are not zeros; day and month series keep every hit "
        "(docs/calendar.md)"
    )


def as_json(series: Sequence[tuple[datetime, int]]) -> str:
    """JSON array of :func:`series_rows`."""
    return json.dumps(series_rows(series), indent=1)


def as_csv(series: Sequence[tuple[datetime, int]]) -> str:
    """CSV with a header ``t,hits``."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["t", "hits"])
    for t, n in series:
        w.writerow([iso(t), n])
    return out.getvalue()


def as_table(series: Sequence[tuple[datetime, int]]) -> str:
    """Aligned two-column text."""
    return "\n".join(f"{_short(t)}  {n:>10}" for t, n in series)


def _short(t: datetime) -> str:
    """``YYYY-MM-DD HH:MM``, with the offset when not UTC."""
    if t.tzinfo is None or t.tzinfo is UTC:
        return f"{t:%Y-%m-%d %H:%M}"
    return f"{t:%Y-%m-%d %H:%M%z}"


#: Periods per column a long sparkline sums: round numbers of minutes, hours and days.
ROUND_BINS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 24, 30, 60, 120, 180, 240, 360, 720, 1440)


def sparkline(values: Sequence[int], width: int = 100, unit: str = "periods") -> str:
    """A one-line terminal chart, one column per period; a series longer than ``width`` sums
    the same whole number of periods into each column, and says how many (uneven columns
    would draw a flat series as a ragged one)."""
    if not values:
        return ""
    need = -(-len(values) // width)
    k = next((n for n in ROUND_BINS if n >= need), need)
    cols = [sum(values[i : i + k]) for i in range(0, len(values), k)] if k > 1 else list(values)
    top = max(cols) or 1
    line = "".join(BARS[min(len(BARS) - 1, round(v / top * (len(BARS) - 1)))] for v in cols)
    return f"{line}  (each column: {k} {unit})" if k > 1 else line


def plot_png(series: Sequence[tuple[datetime, int]], path: Path, title: str, zone: str = "UTC") -> Path:
    """Draw the series as a bar/line chart into a PNG file (``preagg[plot]``)."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot draws with matplotlib: pip install 'preagg[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4), dpi=100)
    xs = [t for t, _ in series]
    ys = [n for _, n in series]
    ax.plot(xs, ys, drawstyle="steps-post", linewidth=1.2)  # type: ignore[arg-type]
    ax.fill_between(xs, ys, step="post", alpha=0.3)  # type: ignore[arg-type]
    ax.set_title(title)
    ax.set_ylabel("hits")
    ax.set_xlabel(f"time ({zone})")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
