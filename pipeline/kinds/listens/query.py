"""Listen queries: top tags of a user over the last N days, and "has this user heard that song".

Top tags: one read of the user's summary (:mod:`pipeline.kinds.listens.tops`); a
user without one (written before summaries existed and not yet rebuilt by
``preagg setup``), or a window ending before some tag's latest slot, takes one indexed
read of the user's (user, tag) documents instead: per tag the union of the weekday
slots dated within the last N days, estimated in the query layer.
Heard: one read of the (user, tag) document by ``_id``, answered by its exact
sketch or its filters (:mod:`pipeline.kinds.listens.heard`): no false negatives,
false positives below the configured rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.fields import FieldMode
from pipeline.core.hll import decode, song_hash, union_all
from pipeline.core.ids import Id
from pipeline.core.times import day_text
from pipeline.kinds.listens.heard import HeardSpec, heard_in_filters
from pipeline.kinds.listens.layout import listen_fields, listen_id, top_fields, top_id
from pipeline.kinds.listens.tops import latest as latest_entry
from pipeline.kinds.listens.tops import ranked


def window(days: int, today: date | None = None) -> tuple[str, str]:
    """First and last ``YYYYMMDD`` of the last ``days`` days (today included)."""
    if not 1 <= days <= 7:
        raise ValueError("days must be between 1 and 7 (the seven weekday slots)")
    today = today or datetime.now(UTC).date()
    return day_text(today - timedelta(days=days - 1)), day_text(today)


async def top_tags(
    db: AsyncDatabase[dict[str, Any]],
    user: Id,
    days: int,
    limit: int = 10,
    today: date | None = None,
    mode: FieldMode = "compact",
) -> list[tuple[Id, float]]:
    """Tags of ``user`` ranked by estimated distinct songs over the last ``days`` days."""
    today = today or datetime.now(UTC).date()
    lo, hi = window(days, today)  # checks days before any read
    entries = await summary_entries(db, user, mode)
    got = None if entries is None else ranked(entries, days, today, limit)
    if got is None:
        got = await read_from_slots(db, user, lo, hi, listen_fields(mode))
    got.sort(key=lambda r: (-r[1], isinstance(r[0], str), r[0]))  # ties: ids in order (numbers as numbers)
    return got[:limit]


async def summary_entries(
    db: AsyncDatabase[dict[str, Any]], user: Id, mode: FieldMode = "compact"
) -> dict[str, bytes] | None:
    """The entries of ``user``'s top-tags summary, ``None`` without a usable one."""
    tf = top_fields(mode)
    # No projection: the summary is only its tags (and the user), and projecting costs the store.
    return usable_entries(await db[tf["collection"]].find_one({"_id": top_id(user)}), tf)


def usable_entries(summary: dict[str, Any] | None, tf: dict[str, str]) -> dict[str, bytes] | None:
    """A stored summary's entries; ``None`` without one or when it was given up (too big)."""
    if summary is None or summary.get(tf["full"]):
        return None
    entries: dict[str, bytes] = summary.get(tf["tags"]) or {}
    return entries


async def read_from_slots(
    db: AsyncDatabase[dict[str, Any]], user: Id, lo: str, hi: str, f: dict[str, str]
) -> list[tuple[Id, float]]:
    """The answer without a summary: every (user, tag) document of the user, read."""
    docs = db[f["collection"]].find({f["user"]: user}, {f["tag"]: 1, f["slots"]: 1})
    return from_slots([doc async for doc in docs], lo, hi, f)


def from_slots(docs: Iterable[dict[str, Any]], lo: str, hi: str, f: dict[str, str]) -> list[tuple[Id, float]]:
    """Per tag the estimate of the union of its slots dated ``lo..hi`` (tags without one left out)."""
    out = []
    for doc in docs:
        slots = [
            decode(bytes(s[f["sketch"]]))
            for s in (doc.get(f["slots"]) or {}).values()
            if lo <= s[f["date"]] <= hi
        ]
        if slots:
            out.append((doc[f["tag"]], union_all(slots, slots[0].p).estimate()))
    return out


async def latest_day(db: AsyncDatabase[dict[str, Any]], user: Id, mode: FieldMode = "compact") -> date | None:
    """The latest day ``user`` has listens on (kept in the weekday slots), or ``None``."""
    entries = await summary_entries(db, user, mode)
    if entries is not None:
        return latest_entry(entries)
    f = listen_fields(mode)
    latest = ""
    async for doc in db[f["collection"]].find({f["user"]: user}, {f["slots"]: 1}):
        for slot in (doc.get(f["slots"]) or {}).values():
            latest = max(latest, str(slot[f["date"]]))
    return datetime.strptime(latest, "%Y%m%d").date() if latest else None


#: Column names of top-tags rows (CLI ``--json`` and ``/api/top-tags``).
TOP_TAGS_HEADER = ("tag", "distinct_songs")


def shown_top_tags(ranked: list[tuple[Id, float]]) -> list[tuple[Id, int | float]]:
    """Top tags as shown: an exact count (a small set's explicit sketch) as an integer, an
    estimate (HyperLogLog) rounded to one decimal; `4.0` read as an estimate of an exact 4."""
    return [(tag, int(n) if float(n).is_integer() else round(n, 1)) for tag, n in ranked]


async def heard(
    db: AsyncDatabase[dict[str, Any]],
    user: Id,
    tag: Id,
    song: Id,
    spec: HeardSpec,
    mode: FieldMode = "compact",
) -> bool:
    """Whether ``user`` has heard ``song`` under ``tag``: exact up to 128 songs, then Bloom filters."""
    f = listen_fields(mode)
    proj = {f["whole"]: 1, f["filters"]: 1, f["heard"]: 1, "_id": 0}
    return heard_in(await db[f["collection"]].find_one({"_id": listen_id(user, tag)}, proj), song, f, spec)


def heard_in(doc: dict[str, Any] | None, song: Id, f: dict[str, str], spec: HeardSpec) -> bool:
    """The answer of a stored document: its explicit sketch's hashes, else its filters."""
    if not doc:
        return False
    h = song_hash(song)
    whole = doc.get(f["whole"])
    if whole is not None:
        sketch = decode(bytes(whole))
        if sketch.hashes is not None:
            return h in sketch.hashes
    return heard_in_filters(doc, song, h, f, spec)
