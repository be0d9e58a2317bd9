"""``preagg positions``: show the ledgers' positions against Kafka's logs, reset them, adopt another group's.

A reset is the operator's decision after a worker held a partition back (its log is
not the one the ledger describes) or after restoring a topic: ``earliest`` counts
the whole log Kafka holds now, ``latest`` counts only what arrives from now on, an
offset counts from there. Without ``--apply`` it only prints what would change.
Applying it moves the ledger (``next``, the fingerprint of the record before it, a
new flush id that fences any batch still in flight) and clears ``diverged``; the
workers holding the partition notice and restart from the new position.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from pipeline.core.families import base_topic, family_of
from pipeline.core.incarnation import Fingerprint
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import PartitionProbe, commit_group_offsets
from pipeline.settings import Settings
from pipeline.store.offsets import BEHIND, LOST, OFFSETS_COLLECTION, offset_id


@dataclass(frozen=True)
class PositionRow:
    """One partition: its ledger, Kafka's log bounds, and (for a reset) the new position."""

    topic: str
    partition: int
    ledger_next: int | None
    log_start: int
    log_end: int
    diverged: str | None
    new_next: int | None = None
    #: Fingerprint of the record before ``new_next`` (``None``: none there).
    new_last: Fingerprint | None = None

    def text(self) -> str:
        """One line for the terminal."""
        line = (
            f"{self.topic}[{self.partition}] ledger next={self.ledger_next} "
            f"kafka log={self.log_start}..{self.log_end}"
        )
        if self.new_next is not None:
            line += f"  -> next={self.new_next}"
        if self.diverged:
            line += f"  DIVERGED: {self.diverged}"
        return line


async def record_before(
    probe: PartitionProbe, topic: str, partition: int, position: int
) -> Fingerprint | None:
    """The fingerprint of the record just before ``position`` (``None``: none there), which a ledger
    moved to ``position`` keeps as its ``last`` for the incarnation check."""
    if position <= 0:
        return None
    before = await probe.look(topic, partition, position - 1)
    if before.first is not None and before.first[0] == position - 1:
        return Fingerprint(*before.first)
    return None


def target(to: str, start: int, end: int) -> int:
    """The new ``next`` for ``--to earliest|latest|OFFSET`` within the log ``start..end``."""
    if to == "earliest":
        return start
    if to == "latest":
        return end
    try:
        offset = int(to)
    except ValueError:
        raise ValueError(f"--to {to!r}: expected earliest, latest or an offset") from None
    if not start <= offset <= end:
        raise ValueError(f"offset {offset} is outside Kafka's log {start}..{end}")
    return offset


async def show(
    settings: Settings,
    db: AsyncDatabase[dict[str, Any]],
    topic: str,
    partition: int | None = None,
    to: str | None = None,
) -> list[PositionRow]:
    """Each partition's ledger and log, with the position ``to`` would set."""
    rows = []
    async with PartitionProbe(KafkaConnection.of(settings)) as probe:
        parts = await probe.partitions(topic)
        if partition is not None:
            if partition not in parts:
                raise ValueError(f"topic {topic!r} has no partition {partition} (partitions: {parts})")
            parts = [partition]
        for p in parts:
            doc = await db[OFFSETS_COLLECTION].find_one({"_id": offset_id(settings.group_id, topic, p)}) or {}
            bounds = await probe.look(topic, p, 0)
            new_next = new_last = None
            if to is not None:
                new_next = target(to, bounds.log_start, bounds.log_end)
                if new_next > bounds.log_start:
                    new_last = await record_before(probe, topic, p, new_next)
            rows.append(
                PositionRow(
                    topic,
                    p,
                    doc.get("next"),
                    bounds.log_start,
                    bounds.log_end,
                    (doc.get("diverged") or {}).get("reason"),
                    new_next,
                    new_last,
                )
            )
    return rows


async def move_ledger(
    settings: Settings,
    db: AsyncDatabase[dict[str, Any]],
    tp: tuple[str, int],
    position: int,
    last: Fingerprint | None,
    by: str,
    changes: dict[str, Any],
    expect: Mapping[str, Any] | None = None,
) -> bool:
    """An operator's move of a partition's ledger to ``position`` (``by``: the command, ``changes``:
    what else it sets). A flush cut short there is given up with the old position, and a hold
    (diverged, behind) is cleared: the new position is counted with a sequence above every mark
    the cut-short flush may have left. ``expect``: the ledger's fields as the move was planned
    from; a ledger that no longer holds them (a worker flushed it meanwhile) is left as it is,
    and ``False`` says so."""
    now = time.time()
    update: dict[str, Any] = {
        "$set": {
            "group": settings.group_id,
            "topic": tp[0],
            "partition": tp[1],
            "next": position,
            "flush": f"{by}-{uuid.uuid4().hex}",
            "at": now,
            "worker": f"preagg positions {by}",
            **changes,
        },
        "$unset": {"diverged": "", "pending": "", BEHIND: ""},
    }
    if last is not None:
        update["$set"]["last"] = last.as_doc()
    else:
        update["$unset"]["last"] = ""
    try:
        done = await db[OFFSETS_COLLECTION].update_one(
            {"_id": offset_id(settings.group_id, *tp), **(expect or {})}, update, upsert=True
        )
    except DuplicateKeyError:  # the ledger exists and differs from ``expect``
        return False
    return done.matched_count > 0 or done.upserted_id is not None


async def apply(settings: Settings, db: AsyncDatabase[dict[str, Any]], rows: list[PositionRow]) -> None:
    """Move each row's ledger to its ``new_next`` and clear its ``diverged`` mark."""
    for r in rows:
        if r.new_next is None:
            continue
        reset = {"reset": {"at": time.time(), "from": r.ledger_next, "to": r.new_next}}
        await move_ledger(settings, db, (r.topic, r.partition), r.new_next, r.new_last, "reset", reset)
        # The partition's families of documents flushed apart (their site rollups) count from
        # there too, each keeping its sequence (pipeline/core/families.py).
        for name in await family_topics(settings, db, r.topic, r.partition):
            await move_ledger(settings, db, (name, r.partition), r.new_next, r.new_last, "reset", reset)


async def family_topics(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], topic: str, partition: int
) -> list[str]:
    """The topic names of ``topic``'s family ledgers of one partition (``<topic>@<family>``)."""
    found = db[OFFSETS_COLLECTION].find({"group": settings.group_id, "partition": partition}, {"topic": 1})
    names = {str(d.get("topic", "")) async for d in found}
    return sorted(n for n in names if family_of(n) is not None and base_topic(n) == topic)


async def follow_in_kafka(settings: Settings, offsets: Mapping[tuple[str, int], int]) -> str:
    """Kafka's committed offsets of the group set to ``offsets``; what happened, in a line.

    So a lag-based autoscaler and a starting worker see the position the ledger holds. Kafka takes a
    commit from outside the group only while the group has no member: with workers running it is
    refused, and the workers point Kafka at the ledgers themselves when they restart on the reset.
    """
    coordinator = logging.getLogger("aiokafka.consumer.group_coordinator")
    level = coordinator.level
    coordinator.setLevel(logging.CRITICAL)  # its own line for a refusal would repeat ours
    try:
        await commit_group_offsets(KafkaConnection.of(settings), settings.group_id, offsets)
    except Exception as exc:  # a live group refuses it; the workers' restart does it then
        return (
            f"Kafka's committed offsets are unchanged ({type(exc).__name__}: {str(exc)[:160]}; workers of "
            "the group running?); they point them at these positions when they restart"
        )
    finally:
        coordinator.setLevel(level)
    return f"Kafka's committed offsets of group {settings.group_id} now equal these positions"


async def acknowledge(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], topic: str, partition: int | None
) -> list[dict[str, Any]]:
    """Clear the "offsets lost before they were counted" mark of the topic's ledgers (one partition,
    or all): the operator has accounted for the loss. The total lost stays (``offsets_lost``)."""
    flt: dict[str, Any] = {"group": settings.group_id, "topic": topic, LOST: {"$exists": True}}
    if partition is not None:
        flt["partition"] = partition
    found = [d async for d in db[OFFSETS_COLLECTION].find(flt)]
    now = time.time()
    for d in found:
        await db[OFFSETS_COLLECTION].update_one(
            {"_id": d["_id"], f"{LOST}.to": d[LOST].get("to")},
            {"$unset": {LOST: ""}, "$set": {"lost_acknowledged": {**d[LOST], "acknowledged": now}}},
        )
    return found


async def rebase_on_empty_broker(db: AsyncDatabase[dict[str, Any]], why: str) -> int:
    """Every ledger of this database back to offset 0 of a new, empty log (the embedded broker only).

    The embedded broker keeps its topics in memory: after ``preagg services down`` and ``up``
    every topic starts empty, and a ledger pointing past the end would hold its partition
    back as diverged (a real broker losing its data must be decided by an operator with
    ``preagg positions reset``; this is never called for one). Figures, counts and the flush
    sequence are kept; a flush cut short is given up with the old log, as a reset does.
    """
    now = time.time()
    done = await db[OFFSETS_COLLECTION].update_many(
        {"next": {"$gt": 0}},
        [
            {
                "$set": {
                    "reset": {"at": now, "from": "$next", "to": 0, "why": why},
                    "next": 0,
                    "flush": f"rebase-{uuid.uuid4().hex}",
                    "at": now,
                    "worker": "preagg services up",
                }
            },
            {"$unset": ["diverged", "pending", "last"]},
        ],
    )
    return int(done.modified_count)
