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
from pipeline.core.updates import get_path
from pipeline.kinds.hits.bots import AGENT, BOT, humans_series, settled_top
from pipeline.kinds.hits.layout import HitsFields, daily_id, hits_fields, read_fields, site_filter
from pipeline.kinds.hits.query import Series, TopPages, by_ids, top_pages
from pipeline.store.names.layout import escape_key, names_namespace, values_namespace
from pipeline.store.names.store import NameStore, read_namespaces

#: Pages whose bot counters one round reads (the likeliest first: most answers settle in one).
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
    node = get_path(doc, path)
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
    """Bot hits of each of ``pages`` over the days (0 for a page without any).

    Read by ``_id`` (site, page and day make it): ``$in`` on the page field made the
    embedded store scan the site's days (:func:`query.page_totals`).
    """
    f = fields.daily
    path = f"{f.props}.{key}"
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    ids = [daily_id(d, site, p) for p in pages for d in days]
    out = dict.fromkeys(pages, 0)
    proj = {path: 1, f"{f.metadata}.{f.page}": 1, "_id": 0}
    async for doc in by_ids(db[f.collection], ids, f"{f.metadata}.{f.site}", site, proj):
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
) -> TopPages:
    """:func:`query.top_pages` without bot hits: exact, reading the bots of the likely pages only.

    Ranks by all hits first (the proven rows of :func:`query.top_pages`), reads the bots
    of those rows in order, and asks for more rows (four times as many) until the
    ``limit``-th human count beats every page not read; when the lists cannot prove
    more rows, the answer says so with its bound.
    """
    fields = fields or hits_fields()
    key = await bot_key(db, site, fields)
    ask = limit
    bots: dict[str, int] = {}
    while True:
        ranked = await top_pages(db, site, first, last, ask, fields)
        if key is None:
            return ranked
        proven = list(ranked[: ranked.proven])
        after = ranked[ranked.proven][1] if len(ranked) > ranked.proven else 0
        # every page past the proven rows has at most this many hits
        beyond = max(after, 0 if ranked.exact else ranked.bound)
        if ranked.exact and ask and len(ranked) == ask:
            beyond = ranked[-1][1]
        rows = [*proven, (BEYOND, beyond)] if beyond else proven
        while True:
            settled = settled_top(rows, bots, limit)
            if settled is not None:
                return _human(settled, limit, True, 0, len(settled))
            batch = [p for p, _ in rows if p not in bots and p != BEYOND][:PAGES_PER_READ]
            if not batch:
                break  # the next page to settle is past the proven rows: ask for more
            bots.update(await bot_pages(db, site, batch, first, last, key, fields))
        if not ask or ask >= MAX_ASK or (not ranked.exact and len(proven) < ask):
            humans = sorted(((p, n - bots.get(p, 0)) for p, n in proven), key=lambda r: (-r[1], r[0]))
            return _human(humans, limit, False, beyond, 0)
        ask *= 4


#: Stands for every page past the rows asked for (never a page: pages start with ``/``).
BEYOND = "\x00beyond"
#: Most pages asked for before the answer is given with its bound.
MAX_ASK = 2_000


def _human(rows: list[tuple[str, int]], limit: int, exact: bool, bound: int, proven: int) -> TopPages:
    kept = [r for r in rows if r[1] > 0]
    out = TopPages(kept[:limit] if limit else kept)
    out.exact, out.bound, out.proven = exact, bound, min(proven, len(out))
    return out
