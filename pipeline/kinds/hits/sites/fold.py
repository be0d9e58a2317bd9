"""A settled site period's visitor registers folded into one set in its rollup.

A site rollup's ``visitors`` holder keeps each source partition's registers in itself while
its day (month) is written (``b.<partition>``, :mod:`pipeline.kinds.hits.visits`), so that a
chart reads one document a day; partitions past
:data:`~pipeline.kinds.hits.visits.INLINE_PARTITIONS` and the shared form write documents of
their own, listed in the holder's ``w``. Once a site's day (month) has settled, the holder
takes them all into one:

1. read the holder and the register documents it lists;
2. set ``f`` (the holder's own registers, codec bytes: :func:`~pipeline.core.uniques.folded`)
   to their register-wise maximum with what ``f`` and ``b`` held, and remove ``w`` and ``b``,
   on condition that ``w``, ``f`` and ``b`` are what was read;
3. delete each register document read, on condition that its registers are what was read.

All in one transaction: a flush that writes the holder or one of those documents meanwhile
makes it abort with a write conflict (or a condition unmet), and the fold is tried again
later. A flush writes the register document before it lists it (``DocUpdate.before``), so
a document written after the fold is listed again once its flush ends: a reader never misses
registers, and a maximum taken twice counts nothing twice. A fold run again after an unknown
commit result finds nothing left to fold, or folds the same registers again.

Only the day's (month's) holder is folded: hourly holders keep their register documents (24
more fields of up to 12 KB would weigh on every read of the rollup).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import date, timedelta
from typing import Any, Literal

from bson import Binary
from prometheus_client.core import Metric
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.times import midnight
from pipeline.core.uniques import FOLDED, INLINE, OVERFLOW, WRITERS, folded, pending
from pipeline.core.updates import get_path
from pipeline.kinds.hits.layout import (
    HitsFields,
    RegisterFields,
    register_fields,
    site_daily_id,
    site_monthly_id,
)
from pipeline.kinds.hits.registers import read_registers, register_ids, registers_filter
from pipeline.kinds.hits.sites.caps import Period
from pipeline.kinds.hits.sites.settle import Settler
from pipeline.store.client import transaction

Outcome = Literal["folded", "already", "moving", "missing"]

#: Seconds a period must go unwritten (by this worker) before it is folded.
SETTLE = 3.0


async def fold_period(db: AsyncDatabase[dict[str, Any]], fields: HitsFields, period: Period) -> Outcome:
    """Fold one site period's visitor registers into its rollup (see the module's notes)."""
    site, kind, ordinal = period
    day = date.fromordinal(ordinal)
    f = fields.rollups.monthly if kind == "m" else fields.rollups.daily
    doc_id = site_monthly_id(day, site) if kind == "m" else site_daily_id(day, site)
    return await fold_holder(db, f.collection, doc_id, {f"{f.metadata}.{f.site}": site}, f.visitors, fields)


async def fold_holder(
    db: AsyncDatabase[dict[str, Any]],
    collection: str,
    doc_id: Any,
    shard: Mapping[str, Any],
    path: str,
    fields: HitsFields,
    after_read: Callable[[], Awaitable[None]] | None = None,
) -> Outcome:
    """Fold the registers of holder ``path`` of one document, in one transaction (aborted unless
    it folds).

    ``after_read``: run between the transaction's reads and its writes (the tests' flush
    meanwhile)."""
    rf = register_fields(fields.mode)
    async with transaction(db.client) as session:
        outcome = await _fold(db, session, collection, doc_id, shard, path, rf, after_read)
        if outcome != "folded":
            await session.abort_transaction()
    return outcome


async def _fold(
    db: AsyncDatabase[dict[str, Any]],
    session: AsyncClientSession,
    collection: str,
    doc_id: Any,
    shard: Mapping[str, Any],
    path: str,
    rf: RegisterFields,
    after_read: Callable[[], Awaitable[None]] | None,
) -> Outcome:
    doc = await db[collection].find_one({"_id": doc_id, **shard}, {path: 1}, session=session)
    if doc is None:
        return "missing"
    holder = get_path(doc, path)
    if not pending(holder):
        return "already"
    found = await read_registers(db, rf, register_ids(collection, doc_id, path, holder), session)
    blob = folded(holder, found.values())
    if after_read is not None:
        await after_read()
    unchanged = {f"{path}.{name}": holder.get(name, {"$exists": False}) for name in (WRITERS, FOLDED, INLINE)}
    done = await db[collection].update_one(
        {"_id": doc_id, **shard, **unchanged},
        {
            "$set": {f"{path}.{FOLDED}": Binary(blob)},
            "$unset": {f"{path}.{WRITERS}": "", f"{path}.{INLINE}": ""},
        },
        session=session,
    )
    if not done.matched_count:
        return "moving"
    for rid, registers in found.items():
        gone = await db[rf.collection].delete_one(
            {"_id": rid, **registers_filter(rf, registers)}, session=session
        )
        if not gone.deleted_count:
            return "moving"
    return "folded"


def _pending_filter(visitors: str) -> dict[str, Any]:
    """Holders with registers to fold (:func:`~pipeline.core.uniques.pending`)."""
    return {
        f"{visitors}.{OVERFLOW}": True,
        "$or": [
            {f"{visitors}.{WRITERS}.0": {"$exists": True}},
            {f"{visitors}.{INLINE}": {"$exists": True}},
            {f"{visitors}.{FOLDED}": {"$exists": False}},
        ],
    }


async def unfolded(db: AsyncDatabase[dict[str, Any]], fields: HitsFields) -> list[str]:
    """``_id`` of every site rollup whose visitors still have register documents (tests)."""
    out = []
    for f in (fields.rollups.daily, fields.rollups.monthly):
        out.extend(
            [str(d["_id"]) async for d in db[f.collection].find(_pending_filter(f.visitors), {"_id": 1})]
        )
    return sorted(out)


async def fold_pending(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields, today: date, dry_run: bool = False
) -> int:
    """Fold every site rollup holder with registers pending whose period ended before yesterday
    (UTC: no zone's day is still open): those a worker stopped before it folded them, or
    forgot. ``preagg retention run`` and the workers' periodic runs call it. The rollups
    folded (``dry_run``: that would be); one still being written is left to the next run."""
    yesterday = today - timedelta(days=1)
    ends = {
        "d": midnight(yesterday),
        "m": midnight(date(yesterday.year, yesterday.month, 1)),  # months that ended before it
    }
    n = 0
    for kind, f in (("d", fields.rollups.daily), ("m", fields.rollups.monthly)):
        v = f.visitors
        flt = {f"{f.metadata}.{f.date}": {"$lt": ends[kind]}, **_pending_filter(v)}
        async for doc in db[f.collection].find(flt, {f"{f.metadata}.{f.site}": 1}):
            if dry_run:
                n += 1
                continue
            site = doc[f.metadata][f.site]
            shard = {f"{f.metadata}.{f.site}": site}
            n += await fold_holder(db, f.collection, doc["_id"], shard, v, fields) == "folded"
    return n


class VisitorFolder(Settler):
    """A worker's site periods waiting to be folded, and the loop that folds them once settled.

    Never while a period is written without pause (a live site's day): its next flush would
    write its register documents again. It is folded once it settles, the day after.
    """

    def __init__(
        self, db: AsyncDatabase[dict[str, Any]], fields: HitsFields, settle: float = SETTLE, **kwargs: Any
    ) -> None:
        async def fold(period: Period) -> str:
            return await fold_period(db, fields, period)

        super().__init__(fold, "folding visitor registers", settle, 0.0, **kwargs)


def fold_metrics(folder: VisitorFolder) -> Iterator[Metric]:
    """``preagg_visitor_folds_total{outcome}``."""
    yield folder.metric(
        "preagg_visitor_folds",
        "Site periods whose visitor registers a worker tried to fold into the rollup, by outcome "
        "(folded, already, moving, missing, gave_up, forgotten, failed)",
    )
