"""Reads behind the bot filter: a site's (page's) bot hits per day, and top pages without bots.

The counters are the ``agent`` property's (:mod:`pipeline.kinds.hits.bots`): one
projected path of the daily documents, read over the (site, date) or
(site, page, date) index. Top pages read the bots of the most visited pages only,
a few at a time, until the answer is settled (:func:`bots.settled_top`).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.series import Granularity, next_bucket
from pipeline.kinds.hits.bots import AGENT, BOT, humans_series, settled_top
from pipeline.kinds.hits.layout import HitsFields, hits_fields, read_fields, site_filter
from pipeline.kinds.hits.query import Series, top_pages
from pipeline.kinds.hits.query_props import OTHER_LABEL
from pipeline.store.names.layout import escape_key, names_namespace, values_namespace
from pipeline.store.names.store import NameStore, read_namespaces

#: Pages whose bot counters one read asks for (the embedded store's ``$in`` is quadratic).
PAGES_PER_READ = 50


async def bot_key(db: AsyncDatabase[dict[str, Any]], site: str, fields: HitsFields) -> str | None:
    """Dotted counter path of ``agent = Bot`` under ``props``, or ``None``: the site never had one."""
    if fields.mode != "compact":
        return f"{escape_key(AGENT)}.{escape_key(BOT)}"
    names_ns, values_ns = names_namespace(site), values_namespace(site, AGENT)
    spaces = await read_namespaces(NameStore(db, fields.mode), [names_ns, values_ns])  # one read
    names, values = spaces[names_ns].tokens, spaces[values_ns].tokens
    return f"{names[AGENT]}.{values[BOT]}" if AGENT in names and BOT in values else None


def _count(doc: dict[str, Any], path: str) -> int:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, dict):
            return 0
        node = node.get(part)
    return int(node) if isinstance(node, int) else 0


async def bot_days(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    page: str | None,
    first: date,
    last: date,
    fields: HitsFields | None = None,
) -> dict[date, int]:
    """Bot hits of ``site`` (``page``) per local day from ``first`` to ``last``, days with any."""
    fields = fields or hits_fields()
    key = await bot_key(db, site, fields)
    if key is None:
        return {}
    f = read_fields(fields, page).daily
    path = f"{f.props}.{key}"
    flt = site_filter(f, site, page, datetime(*first.timetuple()[:3]), datetime(*last.timetuple()[:3]))
    out: dict[date, int] = {}
    async for doc in db[f.collection].find(flt, {path: 1, f"{f.metadata}.{f.date}": 1, "_id": 0}):
        n = _count(doc, path)
        if n:
            out[doc[f.metadata][f.date].date()] = n
    return out


async def humans(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    page: str | None,
    series: Series,
    by: Granularity,
    fields: HitsFields | None = None,
) -> Series:
    """A day or month ``series`` less its bot hits (every day of its buckets)."""
    if not series:
        return series
    first = series[0][0].date()
    last = series[-1][0].date()
    if by == "month":
        last = (next_bucket(datetime(last.year, last.month, 1), "month") - timedelta(days=1)).date()
    out = Series(humans_series(series, await bot_days(db, site, page, first, last, fields), by))
    out.pruned = series.pruned
    return out


async def bot_pages(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    pages: list[str],
    first: date,
    last: date,
    key: str,
    fields: HitsFields,
) -> dict[str, int]:
    """Bot hits of each of ``pages`` over the days (0 for a page without any)."""
    f = fields.daily
    path = f"{f.props}.{key}"
    flt = site_filter(f, site, None, datetime(*first.timetuple()[:3]), datetime(*last.timetuple()[:3]))
    flt[f"{f.metadata}.{f.page}"] = {"$in": pages}
    out = dict.fromkeys(pages, 0)
    async for doc in db[f.collection].find(flt, {path: 1, f"{f.metadata}.{f.page}": 1, "_id": 0}):
        page = doc[f.metadata][f.page]
        out[page] = out.get(page, 0) + _count(doc, path)
    return out


async def top_human_pages(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    first: date,
    last: date,
    limit: int = 10,
    fields: HitsFields | None = None,
) -> list[tuple[str, int]]:
    """:func:`query.top_pages` without bot hits: exact, reading the bots of the likely pages only.

    ``(other)`` (pages past the top-pages budget, or the day's page cap) has no page
    documents: it is listed with its bots, if any, counted as humans.
    """
    fields = fields or hits_fields()
    ranked = await top_pages(db, site, first, last, 0, fields)
    key = await bot_key(db, site, fields)
    if key is None:
        return ranked[:limit]
    bots: dict[str, int] = {}
    done = 0
    while True:
        settled = settled_top(ranked, bots, limit)
        if settled is not None:
            return settled
        batch = [p for p, _ in ranked[done : done + PAGES_PER_READ]]
        done += len(batch)
        named = [p for p in batch if p != OTHER_LABEL]
        bots.update(dict.fromkeys(batch, 0))  # (other) has no page documents
        if named:
            bots.update(await bot_pages(db, site, named, first, last, key, fields))
