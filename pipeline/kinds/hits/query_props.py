"""Custom property counts of a site (or one page) over a range of days, with readable names.

One indexed read of the daily documents sums ``props.<name>.<value>`` counters; in
compact mode the tokens are then turned back into text with one read of the site's
names namespace and one of the values namespaces involved.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import date, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kinds.hits.layout import HitsFields, hits_fields, read_fields, site_filter
from pipeline.store.names.layout import (
    OTHER,
    READABLE_OTHER,
    escape_key,
    names_namespace,
    unescape_key,
    values_namespace,
)
from pipeline.store.names.store import NameStore, read_namespaces

#: How a name or value past its namespace's limit is shown (and a page past the top pages' budget).
OTHER_LABEL = "(other)"


@dataclass(frozen=True)
class PropCount:
    """Hits that carried ``name = value``."""

    name: str
    value: str
    count: int


async def _texts(store: NameStore, namespaces: list[str]) -> dict[str, dict[str, str]]:
    """Per namespace, token (as stored in keys) → text."""
    spaces = await read_namespaces(store, namespaces)
    return {ns: {str(tok): text for text, tok in spaces[ns].tokens.items()} for ns in namespaces}


async def prop_counts(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    page: str | None,
    start: date,
    end: date,
    name: str | None = None,
    fields: HitsFields | None = None,
) -> list[PropCount]:
    """Counts of each property value of ``site`` (``page``) from ``start`` to ``end`` (UTC days, inclusive).

    ``name`` keeps one property. Sorted by name, then count (most first).
    """
    fields = fields or hits_fields()
    f = read_fields(fields, page).daily  # a whole site: its daily rollups, one document a day
    compact = fields.mode == "compact"
    store = NameStore(db, fields.mode)
    name_key: str | None = None
    tokens: dict[str, str] = {}
    names_ns = names_namespace(site)
    if compact:
        tokens = (await _texts(store, [names_ns]))[names_ns]
        if name is not None:
            name_key = next((tok for tok, text in tokens.items() if text == name), None)
            if name_key is None:
                return []
    elif name is not None:
        name_key = escape_key(name)
    flt = site_filter(
        f, site, page, datetime(start.year, start.month, start.day), datetime(end.year, end.month, end.day)
    )
    path = f.props if name_key is None else f"{f.props}.{name_key}"
    sums: dict[tuple[str, str], int] = {}
    async for doc in db[f.collection].find(flt, {path: 1, "_id": 0}):
        for nk, values in (doc.get(f.props) or {}).items():
            for vk, n in values.items():
                sums[(nk, vk)] = sums.get((nk, vk), 0) + int(n)
    merged: dict[tuple[str, str], int] = {}  # (name, value) as shown → count
    if compact:
        value_ns = {nk: values_namespace(site, tokens[nk]) for nk, _ in sums if nk in tokens}
        texts = await _texts(store, sorted(set(value_ns.values())))

        def shown(nk: str, vk: str) -> tuple[str, str]:
            if nk == OTHER or nk not in tokens:
                return OTHER_LABEL, OTHER_LABEL
            return tokens[nk], OTHER_LABEL if vk == OTHER else texts[value_ns[nk]].get(vk, f"#{vk}")
    else:

        def shown(nk: str, vk: str) -> tuple[str, str]:
            return (
                OTHER_LABEL if nk == READABLE_OTHER else unescape_key(nk),
                OTHER_LABEL if vk == READABLE_OTHER else unescape_key(vk),
            )

    for (nk, vk), n in sums.items():
        key = shown(nk, vk)
        merged[key] = merged.get(key, 0) + n
    out = [PropCount(a, b, n) for (a, b), n in merged.items()]
    out.sort(key=lambda r: (r.name, -r.count, r.value))
    return out


def prop_rows(rows: list[PropCount]) -> list[dict[str, Any]]:
    """``{"name", "value", "count"}`` per row: the CLI's ``--json`` and ``/api/props``."""
    return [asdict(r) for r in rows]
