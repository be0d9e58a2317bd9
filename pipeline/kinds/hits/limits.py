"""Bounds of one hits query over HTTP: each answer stays one bounded read (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.core.params import BadParam

#: Longest range of one series per granularity: at most about 2,900 minutes, 2,200
#: hours, 1,100 days or 600 months per answer.
MAX_SPAN: Mapping[str, timedelta] = {
    "minute": timedelta(days=2),
    "hour": timedelta(days=93),
    "day": timedelta(days=1100),
    "month": timedelta(days=50 * 366),
}
#: Longest range of the top pages (monthly documents: one per page and month).
MAX_PAGE_DAYS = 366
#: Longest range of property counts (daily documents: one per page and day).
MAX_PROP_DAYS = 93
#: Bucket sizes of a unique-visitors answer (``total``: one row, the union over the range).
VISITOR_BUCKETS = ("hour", "day", "month", "total")
#: ``by`` of the visits query, and its longest range (one site rollup read per day).
VISIT_BUCKETS = ("day", "month", "total")
#: ``order`` of the entry and exit pages query.
VISIT_ENDS = ("entries", "exits")
MAX_VISIT_DAYS = 1100
#: Longest range of unique visitors per bucket: hours read one daily document a day, days and
#: the total at most one a day (whole months one a month), months one a month.
MAX_VISITOR_DAYS: Mapping[str, int] = {"hour": 31, "day": 1100, "total": 1100, "month": 50 * 366}


def as_utc(t: Any) -> Any:
    """A naive time (a site's wall clock) as if UTC, for range checks; others unchanged."""
    return t.replace(tzinfo=UTC) if isinstance(t, datetime) and t.tzinfo is None else t


def check_span(name: str, first: Any, last: Any, longest: timedelta, unit: str) -> None:
    """``last`` not before ``first``, and at most ``longest`` after it (else a 400 naming ``name``).

    A naive time (a site's wall clock) is compared as UTC: 14 hours either way do not matter here.
    """
    first, last = as_utc(first), as_utc(last)
    if last < first:
        raise BadParam("to", f"is before `from` ({last} < {first})")
    if last - first > longest:
        raise BadParam(name, f"the range is longer than {unit} allows ({longest.days} days)")
