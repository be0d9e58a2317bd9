"""Source offsets stored in MongoDB next to the aggregates: the fences of exactly-once.

One document per (consumer group, topic, partition) in ``preagg_offsets``, the
partition's ledger::

    {_id: "<group>|<topic>|<partition>", group, topic, partition,
     next: <first offset not counted>, flush: <id of the flush that set it>,
     at: <unix time>, worker: <last writer>,
     events: <n>, rejected: {<reason>: <n>}, docs: <n>, flushes: <n>}

With idempotent writes (the default of kinds without read-modify-write updates) a
flush records its intent first, ``pending: {flush, end}`` with the partition's next
flush sequence ``seq`` (fenced on ``next``), writes its documents marked with ``seq``
(:mod:`pipeline.core.marks`), then moves ``next`` to ``end`` and clears ``pending``.
A ledger found with ``pending`` is a flush cut short: the partition's new owner
writes the same range again, with the same sequence, before anything else.

With transactions, a flush's transaction reads these documents, checks each still holds the position
the batch started from (:func:`check_fences`), writes the aggregates, moves
``next`` past the batch and adds the batch's figures, all or nothing: the ledger's
counts are exact too. Only the partition's owner writes its ledger, so workers never
contend on a shared operations document. See docs/exactly-once.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bson import Binary

from pipeline.core.commit import Fence, LedgerView, Pending

OFFSETS_COLLECTION = "preagg_offsets"


#: A ledger's field naming a permanent write error that stops its partition's flushes:
#: ``{reason, worker, at}`` (``preagg status`` shows it as a PROBLEM).
STUCK = "stuck"
#: A ledger's field saying Kafka deleted offsets ``[from, to)`` before they were counted:
#: ``{from, to, worker, at}`` (a PROBLEM in ``preagg status`` until ``positions acknowledge``).
LOST = "lost"
#: A ledger's field saying its documents hold marks it does not account for (``LedgerBehind``):
#: the partition is held back until ``preagg positions rebuild`` (``{reason, worker, at}``).
BEHIND = "behind"


def ledger_view(doc: Mapping[str, Any]) -> LedgerView:
    """A stored ledger document in the commit port's words."""
    behind, diverged = doc.get(BEHIND), doc.get("diverged")
    return LedgerView(
        None if doc.get("next") is None else int(doc["next"]),
        doc.get("last"),
        str(behind.get("reason", "its ledger is behind its documents"))
        if isinstance(behind, Mapping)
        else None,
        float(doc.get("at") or 0.0),
        None
        if diverged is None
        else str(diverged.get("reason", "held back") if isinstance(diverged, Mapping) else diverged),
        tuple(str(f) for f in doc.get("families") or ()),
    )


def offset_id(group: str, topic: str, partition: int) -> str:
    """``_id`` of the offsets document of one partition for one group."""
    return f"{group}|{topic}|{partition}"


def token_id(group: str, stream: str) -> str:
    """``_id`` of a stream's commit token (in the ledger collection; it has no ``group`` field,
    so ledger reads by group never see it)."""
    return f"commit-token|{group}|{stream}"


def pending_of(doc: Mapping[str, Any] | None) -> Pending | None:
    """The unfinished flush a ledger document records, if any."""
    p = (doc or {}).get("pending")
    if not p:
        return None
    assert doc is not None
    start = doc.get("next")
    clock = p.get("clock")
    decisions = p.get("decisions")
    return Pending(
        p["flush"],
        int(doc.get("seq", 0)),
        start if start is not None else p.get("begin"),
        int(p["end"]),
        float(clock) if isinstance(clock, int | float) else None,
        bytes(decisions) if isinstance(decisions, bytes) else None,
        bool(p.get("ranged")),
        start is None,
    )


def intent_update(
    group: str, fence: Fence, flush_id: str, now: float, worker: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Filter and update recording a flush's intent: the ledger still at the batch's start, nothing pending.

    The partition's ``seq`` goes up by one: the flush's marks are that value.
    """
    at: dict[str, Any] = {"next": fence.expected if fence.expected is not None else {"$exists": False}}
    return (
        {"_id": offset_id(group, fence.topic, fence.partition), **at, "pending": {"$exists": False}},
        {
            "$set": {
                "group": group,
                "topic": fence.topic,
                "partition": fence.partition,
                **({"families": list(fence.families)} if fence.families else {}),
                "pending": {
                    "flush": flush_id,
                    "end": fence.next,
                    "begin": fence.begin,
                    # Its documents' marks carry the range's end (pipeline.core.marks.mark_value).
                    "ranged": True,
                    "at": now,
                    "worker": worker,
                    **({"clock": fence.decided_at} if fence.decided_at is not None else {}),
                    **({"decisions": Binary(fence.decisions)} if fence.decisions else {}),
                },
            },
            "$inc": {"seq": 1},
        },
    )


def finish_update(
    group: str, fence: Fence, flush_id: str, now: float, worker: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Filter and update ending a flush's intent: ``next`` past the range, its figures added."""
    flt, update = offset_doc_update(group, fence, flush_id, now, worker)
    return {**flt, "pending.flush": flush_id}, {**update, "$unset": {"pending": "", STUCK: ""}}


def offset_doc_update(
    group: str, fence: Fence, flush_id: str, now: float, worker: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Filter and update that move one partition's stored position past a flush and add its figures."""
    inc: dict[str, int] = {"events": fence.events, "docs": fence.docs, "flushes": fence.flushes}
    inc.update({f"rejected.{reason}": n for reason, n in fence.rejected.items()})
    return (
        {"_id": offset_id(group, fence.topic, fence.partition)},
        {
            "$set": {
                "group": group,
                "topic": fence.topic,
                "partition": fence.partition,
                "next": fence.next,
                "flush": flush_id,
                "at": now,
                "worker": worker,
                **({"last": dict(fence.last)} if fence.last is not None else {}),
                **({"rss": fence.rss} if fence.rss is not None else {}),
            },
            "$inc": inc,
            # A flush that went through ends any permanent error a worker recorded here.
            "$unset": {STUCK: ""},
        },
    )
