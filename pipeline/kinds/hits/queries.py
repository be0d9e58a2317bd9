"""The hits kind's queries, declared once: ``preagg query hits|pages|props|visitors|visits|sites``
and ``/api/hits|pages|props|visitors|visits|sites``.

Each is answered by one function of ``answers.py``; ``api.py`` formats it for HTTP and
``cli.py`` for the command line (:mod:`pipeline.core.queries`), both taking these
parameters, defaults and bounds, parsed by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from pipeline.core.params import BadParam, Param
from pipeline.core.queries import Query, indexed
from pipeline.core.series import GRANULARITIES
from pipeline.kinds.hits.bots import FILTERED_BY
from pipeline.kinds.hits.limits import (
    MAX_PAGE_DAYS,
    MAX_PROP_DAYS,
    MAX_SPAN,
    MAX_VISIT_DAYS,
    MAX_VISITOR_DAYS,
    VISIT_BUCKETS,
    VISIT_ENDS,
    VISITOR_BUCKETS,
    check_span,
)

SITE = Param("site", "the site, as in the events' `site`", required=True)
PAGE = Param("page", "one page (default: all pages of the site)")
BOTS = Param(
    "bots",
    "`exclude`: leave out hits whose `agent` property is `Bot` (`preagg produce --format clf --props`); "
    "known per day, so series need by=day or by=month",
    "choice",
    default="include",
    choices=("include", "exclude"),
    flag=("--no-bots", "exclude"),
)
METRIC = Param(
    "metric",
    "`visitors`: each listed page's unique visitors beside its hits (pages are ranked by hits; "
    "one more read per page and day, or per whole month)",
    "choice",
    default="hits",
    choices=("hits", "visitors"),
)
#: A range of local days ending today by default (visitors, visits).
FIRST_DAY = Param("from", "first local day (YYYY-MM-DD, today-29d)", "date", default="today-29d")
LAST_DAY = Param("to", "last local day (inclusive)", "date", default="today")
#: Most pages one top-pages answer lists.
MAX_PAGES = 1000


def _check_series(a: Mapping[str, Any]) -> None:
    check_span("from", a["from"], a["to"], MAX_SPAN[a["by"]], f"by={a['by']}")
    if a["bots"] == "exclude" and a["by"] not in FILTERED_BY:
        raise BadParam("bots", "exclude needs by=day or by=month: bot hits are counted per day")


def _check_days(longest: int) -> Callable[[Mapping[str, Any]], None]:
    def check(a: Mapping[str, Any]) -> None:
        check_span("from", a["from"], a["to"] or a["from"], timedelta(days=longest), "this query")

    return check


def _check_visitors(a: Mapping[str, Any]) -> None:
    days = MAX_VISITOR_DAYS[a["by"]]
    check_span("from", a["from"], a["to"] or a["from"], timedelta(days=days), f"by={a['by']}")


QUERIES = indexed(
    Query(
        "hits",
        "/api/hits",
        "Zero-filled hit series of a site or page",
        (
            SITE,
            PAGE,
            Param(
                "from",
                "start: ISO date or time (without offset: the site's local time), epoch ms or now-60m",
                "time",
                default="now-60m",
            ),
            Param(
                "to",
                "end (inclusive bucket): ISO time, epoch ms or now; a date is its whole local day",
                "end",
                default="now",
            ),
            Param("by", "bucket size", "choice", default="minute", choices=GRANULARITIES),
            BOTS,
        ),
        _check_series,
        {"max_days_by": {by: span.days for by, span in MAX_SPAN.items()}},
    ),
    Query(
        "pages",
        "/api/pages",
        "The pages of a site with the most hits over a range of its local days",
        (
            SITE,
            Param(
                "from",
                "first day, the site's local calendar (YYYY-MM-DD, today-29d)",
                "date",
                default="today-29d",
            ),
            Param("to", "last day (inclusive)", "date", default="today"),
            Param("limit", "most pages", "integer", default="10", minimum=1, maximum=MAX_PAGES),
            BOTS,
            METRIC,
        ),
        _check_days(MAX_PAGE_DAYS),
        {"max_days": MAX_PAGE_DAYS},
    ),
    Query(
        "props",
        "/api/props",
        "Custom property counts of a site or page over its local days",
        (
            SITE,
            PAGE,
            Param("from", "first local day", "date", default="today"),
            Param("to", "last local day (default: from)", "date"),
            Param("name", "one property (default: all)"),
        ),
        _check_days(MAX_PROP_DAYS),
        {"max_days": MAX_PROP_DAYS},
    ),
    Query(
        "visitors",
        "/api/visitors",
        "Unique visitors of a site or page over its local days: per hour, day or month, or the "
        "range's total (a union, not a sum), each saying whether it is exact",
        (
            SITE,
            PAGE,
            FIRST_DAY,
            LAST_DAY,
            Param(
                "by",
                "bucket size; `total`: one row, the visitors of the whole range",
                "choice",
                default="day",
                choices=VISITOR_BUCKETS,
            ),
        ),
        _check_visitors,
        {"max_days_by": dict(MAX_VISITOR_DAYS)},
    ),
    Query(
        "visits",
        "/api/visits",
        "Visits of a site over its local days (with PREAGG_HITS_VISITS): visits, bounce rate, views "
        "per visit and visit duration per day, month or over the range, each saying whether it is final",
        (
            SITE,
            FIRST_DAY,
            LAST_DAY,
            Param(
                "by",
                "bucket size; `total`: one row, the visits of the whole range",
                "choice",
                default="day",
                choices=VISIT_BUCKETS,
            ),
        ),
        _check_days(MAX_VISIT_DAYS),
        {"max_days": MAX_VISIT_DAYS},
    ),
    Query(
        "visit-pages",
        "/api/visit-pages",
        "The pages most visits of a site entered or left by over its local days (with PREAGG_HITS_VISITS), "
        "exact, with both counts; visits still open are not in them yet",
        (
            SITE,
            FIRST_DAY,
            LAST_DAY,
            Param("order", "rank by `entries` or `exits`", "choice", default="entries", choices=VISIT_ENDS),
            Param("limit", "most pages", "integer", default="10", minimum=1, maximum=MAX_PAGES),
        ),
        _check_days(MAX_VISIT_DAYS),
        {"max_days": MAX_VISIT_DAYS},
    ),
    Query(
        "sites",
        "/api/sites",
        "Every site with hits or settings, its time zone, and its first and last month with hits",
        (),
    ),
)
