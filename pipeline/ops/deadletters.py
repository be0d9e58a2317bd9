"""``preagg deadletters show|replay``: read the dead-letter topic, re-send what the operator decides belongs.

Replay sends each chosen dead letter back to the topic it came from inside a small
wrapper (:mod:`pipeline.core.replay`): workers decode the original and, for a ``late``
one, skip the lateness horizon that refused it. Each replay remembers how far it read
per dead-letter partition (in ``preagg_meta``) and starts there next time, so replaying
twice does not count an event twice; ``--since`` only narrows what a run sends.
A run killed between its sends and that record is finished by the next one, which
first reads back what reached the topics and sends only the rest
(:mod:`pipeline.ops.replay_recovery`): no event is sent twice, none is lost.

Dead letters are at least once: a worker that dies between sending a batch's dead
letters and committing the batch sends them again after its restart. Positions in
the dead-letter topic do not see that (the copies sit at other positions), so each
replayed event is also claimed by its natural key (source topic, partition, offset,
line: :func:`pipeline.core.replay.natural_key`) in ``preagg_replayed`` before it is
sent: a copy, in the same run or a later one, finds the claim and is not sent again.
Claims of a run cut short whose sends the read-back did not find are released, so
the next run sends those.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from aiokafka import ConsumerRecord, TopicPartition
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from pipeline.core.replay import natural_key, origin, wrap
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import groupless_consumer, read_to_end, start_or_close, topic_partitions
from pipeline.kafka.producer import EventProducer
from pipeline.ops.lease import Lease
from pipeline.ops.replay_recovery import (
    KEY_PREFIX,
    Marks,
    end_marks,
    marks_from_doc,
    marks_to_doc,
    merge_marks,
    sent_since,
)
from pipeline.settings import Settings
from pipeline.store.errors import check_durable
from pipeline.store.meta import META_COLLECTION
from pipeline.store.reads import find_in

log = logging.getLogger("preagg.deadletters")

T = TypeVar("T")

#: Seconds without a new record after which a partition whose end is unknown counts as read.
IDLE_SECONDS = 10.0


#: Natural keys of replayed dead letters (one small document each): ``{_id: "<reason>|<key>", run, at}``.
REPLAYED_COLLECTION = "preagg_replayed"


@dataclass
class Replay:
    """What one run read and sent."""

    read: int = 0
    #: Copies of a dead letter already replayed (same natural key): not sent again.
    duplicates: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)
    positions: dict[int, int] = field(default_factory=dict)
    #: Dead letters a run cut short had already sent: found in their topics, not sent again.
    already_sent: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


def progress_id(dlq: str, reason: str) -> str:
    """``preagg_meta`` ``_id`` of a reason's replay progress on a dead-letter topic."""
    return f"replay/{dlq}/{reason}"


@dataclass(frozen=True)
class Progress:
    """How far replays of one reason read per dead-letter partition, and the marks of runs cut short."""

    next: dict[int, int]
    pending: Marks
    #: Ids of the runs cut short (their claims not found sent are released).
    runs: tuple[str, ...] = ()


async def load_progress(db: AsyncDatabase[dict[str, Any]], dlq: str, reason: str) -> Progress:
    """The last replay of ``reason``'s progress; ``pending`` is empty unless it was cut short."""
    doc = await db[META_COLLECTION].find_one({"_id": progress_id(dlq, reason)}) or {}
    nxt = {int(p): int(n) for p, n in (doc.get("next") or {}).items()}
    return Progress(nxt, marks_from_doc(doc.get("pending") or []), tuple(doc.get("pending_runs") or ()))


async def save_pending(
    db: AsyncDatabase[dict[str, Any]],
    dlq: str,
    reason: str,
    marks: Marks,
    run: str = "",
    session: AsyncClientSession | None = None,
) -> None:
    """Before sending: where the target topics end, for a next run to read back from."""
    update: dict[str, Any] = {"$set": {"pending": marks_to_doc(marks)}}
    if run:
        update["$addToSet"] = {"pending_runs": run}
    await db[META_COLLECTION].update_one(
        {"_id": progress_id(dlq, reason)}, update, upsert=True, session=session
    )


def claim_id(reason: str, key: str) -> str:
    """``_id`` of the claim of one replayed event."""
    return f"{reason}|{key}"


async def claim(
    db: AsyncDatabase[dict[str, Any]],
    reason: str,
    keys: Iterable[str],
    run: str,
    session: AsyncClientSession | None = None,
) -> set[str]:
    """Claim each natural key for this run; the keys claimed now (the others were replayed before).

    In a session (the lease's fenced transaction) the existing claims are read first and only the
    others inserted: a duplicate key would abort the transaction. Outside one, the inserts' duplicate
    keys say which were claimed before.
    """
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return set()
    now = time.time()
    coll = db[REPLAYED_COLLECTION]
    taken: set[str] = set()
    if session is not None:
        ids = {claim_id(reason, k): k for k in wanted}
        taken = {ids[d["_id"]] async for d in find_in(coll, ids, session=session, projection={"_id": 1})}
        fresh = [{"_id": claim_id(reason, k), "run": run, "at": now} for k in wanted if k not in taken]
        if fresh:
            await coll.insert_many(fresh, ordered=False, session=session)
        return set(wanted) - taken
    docs = [{"_id": claim_id(reason, k), "run": run, "at": now} for k in wanted]
    try:
        await coll.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        check_durable(exc, "a replay's claims")
        for e in exc.details.get("writeErrors", []):
            if e.get("code") != 11000:
                raise
            taken.add(wanted[e["index"]])
    return set(wanted) - taken


async def release_unsent(
    db: AsyncDatabase[dict[str, Any]],
    reason: str,
    runs: Sequence[str],
    sent_keys: set[str],
    session: AsyncClientSession | None = None,
) -> int:
    """Drop the claims of runs cut short whose events the read-back did not find sent."""
    coll = db[REPLAYED_COLLECTION]
    prefix = f"{reason}|"
    unsent = [
        d["_id"]
        async for d in coll.find({"run": {"$in": list(runs)}}, {"_id": 1}, session=session)
        if d["_id"].startswith(prefix) and d["_id"][len(prefix) :] not in sent_keys
    ]
    if unsent:
        await coll.delete_many({"_id": {"$in": unsent}}, session=session)
    return len(unsent)


async def save_progress(
    db: AsyncDatabase[dict[str, Any]],
    dlq: str,
    reason: str,
    positions: dict[int, int],
    session: AsyncClientSession | None = None,
) -> None:
    """After sending: how far this replay read; nothing is pending any more."""
    update: dict[str, Any] = {"$unset": {"pending": "", "pending_runs": ""}}
    if positions:
        update["$set"] = {f"next.{p}": n for p, n in positions.items()}
    await db[META_COLLECTION].update_one(
        {"_id": progress_id(dlq, reason)}, update, upsert=True, session=session
    )


async def read_dead_letters(
    settings: Settings, start: dict[int, int], timeout: float = 120.0
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Every dead letter from ``start`` (per partition; else the beginning) to the topic's end."""
    dlq = settings.deadletter_topic
    c = groupless_consumer(KafkaConnection.of(settings), "earliest")
    await start_or_close(c)
    records: list[dict[str, Any]] = []

    def keep(tp: TopicPartition, r: ConsumerRecord[bytes, bytes]) -> None:
        try:
            rec = orjson.loads(r.value or b"")
        except orjson.JSONDecodeError:
            log.warning("%s[%d]@%d is not a dead letter (not JSON): skipped", dlq, tp.partition, r.offset)
            return
        rec["_partition"], rec["_offset"] = tp.partition, r.offset
        records.append(rec)

    try:
        tps = [TopicPartition(dlq, p) for p in await topic_partitions(c, dlq)]
        if not tps:
            return [], {}
        starts = {tp: start.get(tp.partition) for tp in tps}
        positions, complete = await read_to_end(c, starts, keep, timeout, idle=IDLE_SECONDS)
        if not complete:
            log.warning("stopped reading %s after %.0f s: the next run goes on from here", dlq, timeout)
    finally:
        await c.stop()
    return records, {tp.partition: n for tp, n in positions.items()}


def chosen(rec: dict[str, Any], reason: str, since: float | None, topic: str | None) -> bool:
    """Whether a dead letter is one to replay: its reason, dead-lettered since ``since``, its topic."""
    if rec.get("reason") != reason:
        return False
    if since is not None and float(rec.get("at") or 0) < since:
        return False
    return topic is None or rec.get("topic") == topic


async def replay(
    settings: Settings,
    db: AsyncDatabase[dict[str, Any]],
    reason: str,
    since: float | None = None,
    topic: str | None = None,
    dry_run: bool = False,
    fault: Callable[[str], None] | None = None,
) -> Replay:
    """Send the dead letters of ``reason`` (not yet replayed) back to their topics.

    One run at a time per dead-letter topic (:class:`~pipeline.ops.lease.Lease`, renewed before
    each step that writes): a second run refuses at once with
    :class:`~pipeline.ops.lease.LeaseHeld`. A dry run reads only and takes no lease.

    ``fault`` is the chaos tests' hook, called at ``replay-sent`` after each topic's sends.
    """
    if dry_run:
        return await _replay(settings, db, reason, since, topic, True, fault, None)
    lease = Lease(db, f"deadletters replay of {settings.deadletter_topic}")
    await lease.take()
    try:
        return await _replay(settings, db, reason, since, topic, False, fault, lease)
    finally:
        await asyncio.shield(lease.release())


def pick(
    records: list[dict[str, Any]],
    out: Replay,
    dlq: str,
    wanted: Callable[[dict[str, Any]], bool],
    already: set[str],
    sent_keys: set[str],
) -> dict[str, list[dict[str, Any]]]:
    """The dead letters to send, by their topic: wanted, not sent by a run cut short, one copy each."""
    picked: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    for rec in records:
        out.by_reason[str(rec.get("reason"))] += 1
        if not wanted(rec):
            continue
        key = natural_key(rec)
        if origin(dlq, rec["_partition"], rec["_offset"]) in already or key in sent_keys:
            out.already_sent += 1
        elif key in seen:
            out.duplicates += 1  # a copy of a dead letter this run sends already
        else:
            seen.add(key)
            picked.setdefault(str(rec["topic"]), []).append(rec)
    return picked


async def _replay(
    settings: Settings,
    db: AsyncDatabase[dict[str, Any]],
    reason: str,
    since: float | None,
    topic: str | None,
    dry_run: bool,
    fault: Callable[[str], None] | None,
    lease: Lease | None,
) -> Replay:
    async def renew() -> None:
        if lease is not None:
            await lease.take()

    async def fenced(write: Callable[[AsyncClientSession | None], Awaitable[T]]) -> T:
        """A write under the lease (refused once another run took it over); a dry run has none."""
        if lease is None:
            return await write(None)
        return await lease.fenced(write)

    dlq = settings.deadletter_topic
    progress = await load_progress(db, dlq, reason)
    already = await sent_since(settings, progress.pending) if progress.pending else set()
    sent_keys = {s[len(KEY_PREFIX) :] for s in already if s.startswith(KEY_PREFIX)}
    if progress.runs and not dry_run:
        await renew()
        await fenced(lambda s: release_unsent(db, reason, progress.runs, sent_keys, s))
    records, positions = await read_dead_letters(settings, progress.next)
    out = Replay(read=len(records), positions=positions)
    picked = pick(records, out, dlq, lambda rec: chosen(rec, reason, since, topic), already, sent_keys)
    if progress.pending:
        log.warning(
            "the last %s replay was cut short: %d of its events had reached their topics, not sent again",
            reason,
            out.already_sent,
        )
    if dry_run:
        for t, recs in picked.items():
            out.sent[t] = len(recs)
            out.examples += recs[: max(0, 5 - len(out.examples))]
        return out
    if picked:
        run = uuid.uuid4().hex
        await renew()
        marks = merge_marks(progress.pending, await end_marks(settings, picked))
        keys = [natural_key(r) for recs in picked.values() for r in recs]

        async def pend_and_claim(session: AsyncClientSession | None) -> set[str]:
            await save_pending(db, dlq, reason, marks, run, session)
            return await claim(db, reason, keys, run, session)

        claimed = await fenced(pend_and_claim)
        for t in list(picked):
            kept = [r for r in picked[t] if natural_key(r) in claimed]
            out.duplicates += len(picked[t]) - len(kept)  # replayed by an earlier run
            picked[t] = kept
            if not kept:
                del picked[t]
    for t, recs in picked.items():
        await renew()
        async with EventProducer(settings, t, pack_size=1) as p:
            for rec in recs:
                await p.send_raw(wrap(reason, rec, origin(dlq, rec["_partition"], rec["_offset"])), None)
        out.sent[t] = len(recs)
        log.info("replayed %d %s dead letters to %s", len(recs), reason, t)
        if fault is not None:
            fault("replay-sent")
    if positions or progress.pending:
        await asyncio.shield(fenced(lambda s: save_progress(db, dlq, reason, positions, s)))
    return out
