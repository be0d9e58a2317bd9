"""The two families of hits documents when the site rollups run ahead of the pages (pure).

``sites``: the site rollups of days and months (``hits_site_daily``, ``hits_site_monthly``),
what a site chart reads, a few documents per site and period. ``pages``: everything else
(pages' days and months, the site's top pages, visitor registers, properties), and what of
a site's rollup only the pages' flush decides: a day's hits of pages past the day's page cap
(``capped``: the cap is the pages' state), and the day's hourly visitor sketches (whose
registers the pages' flush writes: one family decides and writes each sketch,
:func:`~pipeline.kinds.hits.planning.visitors.plan_visitors`). Each family is flushed by a
flusher of its own, with its own ledger and marks (:mod:`pipeline.core.families`); a window of
the ``sites`` family is counted with every page as one (its plan writes no page document), and
its plan and the ``pages`` plan of the same records add up to the plan of one flush of both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.layout import HitsFields

SITES: Literal["sites"] = "sites"
PAGES: Literal["pages"] = "pages"
#: ``None``: one flush writes every document.
Family = Literal["sites", "pages"] | None


def of_family(family: Family, fields: HitsFields, updates: Iterable[DocUpdate]) -> list[DocUpdate]:
    """The updates of a plan that ``family`` writes."""
    if family is None:
        return list(updates)
    r = fields.rollups
    rollups = {r.daily.collection, r.monthly.collection}
    if family == SITES:
        return [u for u in updates if u.collection in rollups]
    out: list[DocUpdate] = []
    hours = f"{r.daily.hourly_visitors}."
    for u in updates:
        if u.collection not in rollups:
            out.append(u)
            continue
        if u.collection != r.daily.collection:
            continue
        capped = u.inc.get(r.daily.capped)
        sketches = {k: v for k, v in u.add_to_set.items() if k.startswith(hours)}
        marked = {k: v for k, v in u.max.items() if k.startswith(hours)}
        if capped or sketches or marked:
            out.append(
                DocUpdate(
                    u.collection,
                    u.id,
                    dict(u.set_on_insert),
                    {r.daily.capped: capped} if capped else {},
                    key=u.key,
                    max=marked,
                    add_to_set=sketches,
                )
            )
    return out
