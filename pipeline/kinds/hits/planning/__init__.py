"""Minute counts, visitors and properties planned into one upsert per hits document.

Documents follow the seed "Pre-Aggregated Reports": one per site/page/day with a day
total, ``hourly.<h>`` and ``minute.<h>.<m>``, one per site/page/month with a month total
and ``daily.<d>``, and the same per site (rollups) with the site's top pages. Each family
is planned by a function of its own over the touched documents
(:class:`~pipeline.kinds.hits.planning.documents.Touched`); :func:`plan_hits` composes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from pipeline.core.uniques import Budget
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.families import Family
from pipeline.kinds.hits.layout import HitsFields
from pipeline.kinds.hits.planning.counts import page_days_of, plan_minutes, plan_totals, rank_top_pages
from pipeline.kinds.hits.planning.documents import Touched
from pipeline.kinds.hits.planning.inputs import UTC_SITES, Calendars, Key, PropKeySource, SlotKey
from pipeline.kinds.hits.planning.props import plan_props
from pipeline.kinds.hits.planning.visitors import plan_visitors
from pipeline.kinds.hits.sites.caps import PageCaps, unlimited
from pipeline.kinds.hits.visit_log import VisitLog


def plan_hits(
    counts: Mapping[Key, int],
    fields: HitsFields,
    props: Mapping[SlotKey, Mapping[tuple[str, str], int]] | None = None,
    prop_keys: PropKeySource | None = None,
    calendars: Calendars = UTC_SITES,
    caps: PageCaps | None = None,
    written: datetime | None = None,
    refused: frozenset[bytes] | None = None,
    record: set[bytes] | None = None,
    visits: VisitLog | None = None,
    visitor_keys: Callable[[int], bytes] | None = None,
    budget: Budget | None = None,
    writer: int | None = None,
    family: Family = None,
) -> list[DocUpdate]:
    """Group minute counts into one upsert per daily and monthly document, pages' and sites'.

    ``calendars``: each site's local days and retention. ``caps``: the day's page cap (a
    page past it counts in its site's rollups only). ``written`` (today's UTC midnight)
    is set on every daily document. ``refused``: the pages refused a document by the
    flush this plan writes again (a redo decides as its flush did); ``record`` collects
    the keys this plan refuses. ``visits``: the window's visitors, with ``visitor_keys``,
    ``budget`` and ``writer`` (their one source partition, if one). ``family``: the family the
    plan is for, which decides who writes a site rollup's visitor sketches
    (:func:`~pipeline.kinds.hits.planning.visitors.plan_visitors`).
    """
    caps = caps if caps is not None else unlimited()
    docs = Touched(fields, calendars, caps, written, refused, record)
    page_days, cells = page_days_of(counts, calendars)
    rank_top_pages(docs, page_days, caps)
    targets = plan_minutes(docs, cells, caps)
    plan_totals(docs, page_days, targets, caps)
    extra: list[DocUpdate] = []
    if visits and visitor_keys is not None:
        extra = plan_visitors(
            docs, visits, visitor_keys, budget if budget is not None else Budget(), writer, family
        )
    if props and prop_keys is not None:
        plan_props(docs, props, prop_keys)
    return docs.updates(*extra)
