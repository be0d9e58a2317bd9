"""The hits views analysts query: one row per page or site and local day or month, in plain words.

The stored documents are built for writing (short names, counters keyed by position and
missing when zero, escaped page names, sketches); these views are built for reading
(docs/analysts.md): readable names, every hour of a day and every day of a month with its
zeros, page names as sent, unique visitors as the number the workers store beside each
sketch (:mod:`pipeline.kinds.hits.visitor_counts`). They are declared from the field
names of :mod:`pipeline.kinds.hits.layout`, so that they follow ``PREAGG_SCHEMA``, and
read nothing else: no name-store tokens, marks, registers or bookkeeping reach a row.
"""

from __future__ import annotations

from typing import Any

from pipeline.core.fields import FieldMode, View
from pipeline.kinds.hits.bots import AGENT, BOT
from pipeline.kinds.hits.layout import (
    DailyFields,
    DocFields,
    MonthlyFields,
    TopFields,
    VisitPagesFields,
    hits_fields,
    visit_pages_fields,
)
from pipeline.kinds.hits.sites.caps import OTHER_PAGE
from pipeline.kinds.hits.visit_docs import BOUNCES, SECONDS, VIEWS, VISITS
from pipeline.store.names.layout import escape_key
from pipeline.store.names.store import names_fields
from pipeline.store.view_exprs import (
    BOOL,
    DAY,
    INT,
    MONTH,
    TEXT,
    day_text,
    days_in_month,
    field_of,
    month_text,
    number,
    path,
    unescaped,
    zero_filled,
)

#: A UTC day's hours (a zoned day stores its own length), and the hours the zeros template holds:
#: a DST day's 25. The rare longer day (a site moving zones) keeps its later hours, appended after
#: the template in the order they were first written; a longer template costs every row.
HOURS = 24
MAX_HOURS = 25

_VISITORS = (
    (
        "visitors",
        {"bsonType": ["int", "long", "null"], "minimum": 0},
        "unique visitors of the period (null until a worker first counts them, within a minute; "
        "five while it writes commit after commit)",
    ),
    (
        "visitors_exact",
        {"bsonType": ["bool", "null"]},
        "true when visitors is exact, false when it is a HyperLogLog estimate (0.81%)",
    ),
)


def _visitors(f: DocFields) -> dict[str, Any]:
    """The stored count; 0 (exact) for a period without a sketch (only crawlers, or visitors off);
    ``null`` for a sketch not counted yet. Whether there is a sketch is told in the first stage
    (:data:`NO_SKETCH`), so that the sketch itself is never carried further."""
    no_sketch = f"${NO_SKETCH}"
    return {
        NO_SKETCH: {"$eq": [{"$type": path(f.visitors)}, "missing"]},
        "visitors": {"$ifNull": [path(f.visitor_count), {"$cond": [no_sketch, 0, None]}]},
        "visitors_exact": {"$ifNull": [path(f.visitors_exact), {"$cond": [no_sketch, True, None]}]},
    }


def _escaped_site(site: Any) -> Any:
    """``escape_part`` of a site, as the name store's namespaces spell it."""
    once = {"$replaceAll": {"input": site, "find": "%", "replacement": "%25"}}
    return {"$replaceAll": {"input": once, "find": "/", "replacement": "%2F"}}


def _token(docs: Any, name: str, nf: dict[str, str]) -> Any:
    """The name store token (as a field name) of ``name`` among a namespace's documents ``docs``."""
    at = {"$indexOfArray": [f"$$this.{nf['list']}", name]}
    return {
        "$reduce": {
            "input": docs,
            "initialValue": None,
            "in": {
                "$cond": [
                    {"$gte": [at, 0]},
                    {"$toString": {"$add": [f"$$this.{nf['least_value']}", at]}},
                    "$$value",
                ]
            },
        }
    }


def _bots(f: DailyFields, mode: FieldMode) -> tuple[list[dict[str, Any]], Any]:
    """Stages and expression of a day's crawler hits: the ``agent`` property's ``Bot`` counter.

    Readable mode stores it by name; compact mode under name-store tokens, which the stages
    look up in the site's two namespaces (one read of a few small documents per row).
    """
    props = path(f.props)
    if mode == "readable":
        return [], number(path(f.props, escape_key(AGENT), escape_key(BOT)))
    nf = names_fields(mode)
    site = _escaped_site(path(f.metadata, f.site))
    spaces = {"n": {"$concat": ["n/", site]}, "v": {"$concat": ["v/", site, f"/{AGENT}"]}}
    ns = path(nf["namespace"])
    stages = [
        {
            "$lookup": {  # both namespaces in one read
                "from": nf["collection"],
                "let": spaces,
                "pipeline": [
                    {"$match": {"$expr": {"$in": [ns, ["$$n", "$$v"]]}}},
                    {"$project": {"_id": 0, nf["namespace"]: 1, nf["least_value"]: 1, nf["list"]: 1}},
                ],
                "as": "_names",
            }
        }
    ]

    def of(space: str) -> Any:
        return {
            "$filter": {"input": "$_names", "cond": {"$eq": [f"$$this.{nf['namespace']}", spaces[space]]}}
        }

    agent = field_of(props, _token(of("n"), AGENT, nf))
    return stages, number(field_of(agent, _token(of("v"), BOT, nf)))


#: The fields analysts filter on: computed first, cheaply, so that MongoDB applies their filter
#: before the rest of a row is built (it moves a $match past the stages that leave its fields alone).
KEYS = ("site", "page", "date", "month")
#: The first stage's note that a document has no visitor sketch.
NO_SKETCH = "_no_sketch"


def _stored_paths(expr: Any) -> set[str]:
    """The stored top-level fields an expression reads (``$a.b`` → ``a``; variables and the
    first stage's own fields, ``_``-named, left out)."""
    if isinstance(expr, dict):
        return set().union(*(_stored_paths(v) for v in expr.values())) if expr else set()
    if isinstance(expr, (list, tuple)):
        return set().union(*(_stored_paths(v) for v in expr)) if expr else set()
    if isinstance(expr, str) and expr.startswith("$") and not expr.startswith("$$"):
        top = expr[1:].split(".")[0]
        return {top} if top and not top.startswith("_") else set()
    return set()


def _staged(row: dict[str, Any], middle: tuple[dict[str, Any], ...] = ()) -> tuple[dict[str, Any], ...]:
    """``row`` as two projections: first its keys (and ``_``-named helpers) with only the stored
    fields the rest reads, then (after ``middle``) the row itself.

    A filter on ``site`` cannot move ahead of ``site: "$m.s"`` (a nested rename: MongoDB's
    ``complex_match_swap.js``), but it moves ahead of everything after it: zero-filled hours,
    visitors and lookups are built only for the rows it keeps; and the first stage drops what
    no row shows (minute counters, sketches, marks), which a store that filters last (the
    embedded one) would otherwise carry through every stage.
    """
    early = {k: v for k, v in row.items() if k in KEYS or (k.startswith("_") and k != "_id")}
    late = {k: v for k, v in row.items() if k not in early and k != "_id"}
    # a lookup's own pipeline reads the other collection: only its `let` reads this one
    needed = _stored_paths([late, [m["$lookup"].get("let", {}) if "$lookup" in m else m for m in middle]])
    first = {"_id": 0, **early, **{name: 1 for name in sorted(needed - set(early))}}
    last = {k: 1 if k in KEYS else v for k, v in row.items() if k in KEYS or k in late}
    return ({"$project": first}, *middle, {"$project": {"_id": 0, **last}})


def _day(f: DailyFields, page: bool, capped: str | None = None) -> dict[str, Any]:
    meta = (f.metadata,)
    length = {"$ifNull": [path(*meta, f.length), HOURS]}
    row: dict[str, Any] = {"_id": 0, "site": path(*meta, f.site)}
    if page:
        row["page"] = path(*meta, f.page)
    row |= {
        "date": day_text(path(*meta, f.date)),
        "zone": {"$ifNull": [path(*meta, f.zone), "UTC"]},
        "hits": number(path(f.total)),
        "hours": zero_filled(path(f.hourly), 0, length, MAX_HOURS),
        **_visitors(f),
    }
    if capped is not None:
        row["capped"] = number(path(capped))
    return row


def _month(f: MonthlyFields, page: bool) -> dict[str, Any]:
    meta = (f.metadata,)
    row: dict[str, Any] = {"_id": 0, "site": path(*meta, f.site)}
    if page:
        row["page"] = path(*meta, f.page)
    return row | {
        "month": month_text(path(*meta, f.date)),
        "hits": number(path(f.total)),
        "days": zero_filled(path(f.daily), 1, days_in_month(path(*meta, f.date)), 31),
        **_visitors(f),
    }


def _top(f: TopFields, period: str, text: Any) -> tuple[dict[str, Any], ...]:
    """Listed pages busiest first (ties by name), ``(other)`` apart, and whether the list is exact."""
    entries = {"$objectToArray": {"$ifNull": [path(f.pages), {}]}}
    listed = {"$filter": {"input": entries, "as": "e", "cond": {"$ne": ["$$e.k", OTHER_PAGE]}}}
    other = number({"$getField": {"field": OTHER_PAGE, "input": path(f.pages)}})
    total = {"$sum": {"$map": {"input": entries, "as": "e", "in": "$$e.v"}}}
    return _staged(
        {
            "_id": 0,
            "site": path(f.metadata, f.site),
            period: text,
            "pages": {
                "$map": {
                    "input": {"$sortArray": {"input": listed, "sortBy": {"v": -1, "k": 1}}},
                    "as": "e",
                    "in": {"page": unescaped("$$e.k"), "hits": "$$e.v"},
                }
            },
            "other_hits": other,
            "exact": {"$or": [{"$eq": [other, 0]}, {"$eq": [path(f.sealed), total]}]},
        }
    )


_DAY_FIELDS = (
    ("site", TEXT, "the site"),
    ("date", DAY, "the site's local day, YYYY-MM-DD"),
    ("zone", TEXT, "the IANA time zone of that day (UTC unless the site has one)"),
    ("hits", INT, "page views of the day (every hit, crawlers' too)"),
    (
        "hours",
        {"bsonType": "array", "minItems": 1, "maxItems": 48, "items": INT},
        "hits per hour of the local day from midnight: 24 numbers (23 or 25 on a DST change), zeros included",
    ),
    *_VISITORS,
)
_MONTH_FIELDS = (
    ("site", TEXT, "the site"),
    ("month", MONTH, "the site's local month, YYYY-MM"),
    ("hits", INT, "page views of the month"),
    (
        "days",
        {"bsonType": "array", "minItems": 28, "maxItems": 31, "items": INT},
        "hits per day of the month, from the 1st: one number per day, zeros included",
    ),
    *_VISITORS,
)
_PAGE = (("page", TEXT, "the page, as sent (its path)"),)
_LISTED = {
    "bsonType": "array",
    "items": {
        "bsonType": "object",
        "required": ["page", "hits"],
        "properties": {"page": TEXT, "hits": INT},
        "additionalProperties": False,
    },
}
_TOP = (
    ("site", TEXT, "the site"),
    ("pages", _LISTED, "[{page, hits}]: the listed pages, busiest first (ties by name)"),
    ("other_hits", INT, "hits of the pages not listed (the list keeps what fits its byte budget)"),
    (
        "exact",
        BOOL,
        "true when every count and the order are exact; false while a busy period's list awaits "
        "its seal (within a minute)",
    ),
)


#: What a site's day or month row says of its visits (docs/visits.md; 0 with visits off).
_VISITS = (
    ("visits", INT, "visits that started that period and have closed (PREAGG_HITS_VISITS; 0 when off)"),
    ("bounces", INT, "of those, visits of one page view"),
    ("visit_views", INT, "page views in those visits"),
    ("visit_seconds", INT, "the sum of their durations, whole seconds (mean: visit_seconds / visits)"),
)


def _visits(visits: str) -> dict[str, Any]:
    """A site rollup's closed visits, as numbers (0 without any)."""
    names = (("visits", VISITS), ("bounces", BOUNCES), ("visit_views", VIEWS), ("visit_seconds", SECONDS))
    return {name: number(path(visits, sub)) for name, sub in names}


def _visit_pages(vp: VisitPagesFields) -> dict[str, Any]:
    """A page's entries and exits of one local day."""
    meta = (vp.metadata,)
    return {
        "_id": 0,
        "site": path(*meta, vp.site),
        "page": path(*meta, vp.page),
        "date": day_text(path(*meta, vp.date)),
        "entries": number(path(vp.entries)),
        "exits": number(path(vp.exits)),
    }


def views(mode: FieldMode) -> list[View]:
    """The hits views of a deployment in field-name ``mode``."""
    f = hits_fields(mode)
    r = f.rollups
    bot_stages, bots = _bots(r.daily, mode)
    top_d, top_m = r.top_daily, r.top_monthly
    vp = visit_pages_fields(mode)
    return [
        View(
            "hits_page_days",
            f.daily.collection,
            _staged(_day(f.daily, page=True)),
            "one row per site, page and local day",
            (_DAY_FIELDS[0], *_PAGE, *_DAY_FIELDS[1:]),
        ),
        View(
            "hits_site_days",
            r.daily.collection,
            _staged(
                _day(r.daily, page=False, capped=r.daily.capped)
                | {"bot_hits": bots}
                | _visits(r.daily.visits),
                tuple(bot_stages),
            ),
            "one row per site and local day: every page's hits together",
            (
                *_DAY_FIELDS,
                ("capped", INT, "hits of pages past the day's page cap (counted here, no page row)"),
                ("bot_hits", INT, "hits of crawlers (the agent property's Bot value; 0 without --props)"),
                *_VISITS,
            ),
        ),
        View(
            "hits_page_months",
            f.monthly.collection,
            _staged(_month(f.monthly, page=True)),
            "one row per site, page and local month",
            (_MONTH_FIELDS[0], *_PAGE, *_MONTH_FIELDS[1:]),
        ),
        View(
            "hits_site_months",
            r.monthly.collection,
            _staged(_month(r.monthly, page=False) | _visits(r.monthly.visits)),
            "one row per site and local month",
            (*_MONTH_FIELDS, *_VISITS),
        ),
        View(
            "top_pages_days",
            top_d.collection,
            _top(top_d, "date", day_text(path(top_d.metadata, top_d.date))),
            "one row per site and local day: its busiest pages",
            (_TOP[0], ("date", DAY, "the site's local day, YYYY-MM-DD"), *_TOP[1:]),
        ),
        View(
            "top_pages_months",
            top_m.collection,
            _top(top_m, "month", month_text(path(top_m.metadata, top_m.date))),
            "one row per site and local month: its busiest pages",
            (_TOP[0], ("month", MONTH, "the site's local month, YYYY-MM"), *_TOP[1:]),
        ),
        View(
            "visit_pages_days",
            vp.collection,
            _staged(_visit_pages(vp)),
            "one row per site, page and local day with visits that entered or left by the page",
            (
                ("site", TEXT, "the site"),
                *_PAGE,
                ("date", DAY, "the site's local day of the visits' start, YYYY-MM-DD"),
                ("entries", INT, "closed visits whose first hit was on the page (PREAGG_HITS_VISITS)"),
                ("exits", INT, "closed visits whose last hit was on the page"),
            ),
        ),
    ]
