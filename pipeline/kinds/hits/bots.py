"""Bot hits, known per day from the ``agent`` property: what the dashboard's bot filter subtracts (pure).

Bots are not counted apart at ingest. ``preagg produce --format clf`` gives each hit
an ``agent`` property (:func:`pipeline.kinds.hits.clf.agent_family`, ``Bot`` for
crawlers), and custom properties are counted per page and per day in the daily
documents and per day in the site's rollups. So a day's human hits are its total
less that counter, exactly, and a page's are its total less its own counter. Minutes
and hours have no such counter: the filter answers day and month series and top
pages, and refuses the finer series rather than guess.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime

from pipeline.kinds.hits.clf import BOT_FAMILY

#: The property and value that mark a bot's hit (clf_props' user-agent family).
AGENT = "agent"
BOT = BOT_FAMILY
#: Granularities the filter answers (a day's bot hits are known, not a minute's).
FILTERED_BY = ("day", "month")


def bucket_of(day: date, by: str) -> date:
    """The series bucket (its first day) a day's bot hits belong to."""
    return day.replace(day=1) if by == "month" else day


def humans_series(
    series: Sequence[tuple[datetime, int]], bots: Mapping[date, int], by: str
) -> list[tuple[datetime, int]]:
    """Each bucket less the bot hits of its days (``bots``: per local day)."""
    per_bucket: dict[date, int] = {}
    for day, n in bots.items():
        key = bucket_of(day, by)
        per_bucket[key] = per_bucket.get(key, 0) + n
    return [(t, max(0, n - per_bucket.get(t.date(), 0))) for t, n in series]


def settled_top(
    ranked: Sequence[tuple[str, int]], bots: Mapping[str, int], limit: int
) -> list[tuple[str, int]] | None:
    """The ``limit`` pages with most human hits, once ``bots`` is known for enough of ``ranked``.

    ``ranked``: every page with its total, most first. ``bots`` covers a prefix of it.
    A page's human hits are at most its total, so once the ``limit``-th best human
    count of the prefix is at least the next unknown page's total, no later page can
    enter (ties are broken by page, as the unfiltered list): the answer is exact.
    ``None``: read the bots of more pages first.
    """
    known: list[tuple[str, int]] = []
    bound: int | None = None
    for page, total in ranked:
        if page not in bots:
            bound = total
            break
        known.append((page, total - bots[page]))
    known.sort(key=lambda row: (-row[1], row[0]))
    if bound is not None and (len(known) < limit or known[limit - 1][1] <= bound):
        return None
    return [row for row in known if row[1] > 0][:limit]
