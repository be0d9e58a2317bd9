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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import Binary

OFFSETS_COLLECTION = "preagg_offsets"

TP = tuple[str, int]


#: A ledger's field naming a permanent write error that stops its partition's flushes:
#: ``{reason, worker, at}`` (``preagg status`` shows it as a PROBLEM).
STUCK = "stuck"


def offset_id(group: str, topic: str, partition: int) -> str:
    """``_id`` of the offsets document of one partition for one group."""
    return f"{group}|{topic}|{partition}"


def token_id(group: str, stream: str) -> str:
    """``_id`` of a stream's commit token (in the ledger collection; it has no ``group`` field,
    so ledger reads by group never see it)."""
    return f"commit-token|{group}|{stream}"


@dataclass(frozen=True)
class Fence:
    """A batch's claim on one partition: MongoDB holds ``expected``; the flush moves it to ``next``."""

    topic: str
    partition: int
    expected: int | None
    next: int
    #: Events of this partition in the batch, and refused ones by reason.
    events: int = 0
    rejected: Mapping[str, int] = field(default_factory=dict)
    #: Documents written and flushes: attributed to a flush's first partition only,
    #: so that sums over the ledger are exact.
    docs: int = 0
    flushes: int = 0
    #: The last record the batch counted on this partition: ``{offset, ts, digest}``
    #: (see :mod:`pipeline.core.incarnation`); stored as the ledger's ``last``.
    last: Mapping[str, Any] | None = None
    #: The batch's first offset on this partition (an intent records it: with no
    #: ledger yet, ``expected`` is ``None`` and the range to write again starts here).
    begin: int | None = None
    #: The writing worker's resident memory, bytes (stored as the ledger's ``rss``).
    rss: int | None = None
    #: The batch's "now" for its decisions (pipeline.core.clock): an intent records it, so
    #: that a redo of the range refuses and accepts exactly what the flush did.
    decided_at: float | None = None
    #: What the partition's plan decided from the worker's own state (hits: the pages it
    #: refused a document past the day's cap), recorded with the intent for a redo.
    decisions: bytes | None = None


@dataclass(frozen=True)
class Pending:
    """A flush that recorded its intent on a partition and did not finish: its range is written again."""

    flush: str
    #: The flush's sequence on this partition: what its documents' marks hold (or will).
    seq: int
    #: The ledger's position (where the range starts) and the intent's end.
    start: int | None
    end: int
    #: The flush's "now" for its decisions (``None``: an intent written before it was recorded).
    decided_at: float | None = None
    #: The plan's recorded decisions (``Fence.decisions``).
    decisions: bytes | None = None


@dataclass(frozen=True)
class Ledgers:
    """What a set of partitions' ledgers hold: positions (``None``: none stored) and unfinished flushes."""

    positions: dict[TP, int | None]
    pending: dict[TP, Pending]


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
                "pending": {
                    "flush": flush_id,
                    "end": fence.next,
                    "begin": fence.begin,
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


@dataclass(frozen=True)
class Committed:
    """What a commit reports: whether it had committed before (a retried commit), and its size."""

    already: bool = False
    #: BSON bytes of the update statements sent (0 when nothing was written).
    bytes: int = 0
    #: Idempotent writes: upserts refused with a duplicate key whose documents held their marks.
    applied: int = 0
    #: Idempotent writes: upserts refused with a duplicate key whose documents lacked their
    #: marks (another writer inserted them first), sent again.
    raced: int = 0
    #: Idempotent writes: merged upserts some of whose partitions were applied; the others sent apart.
    split: int = 0


class FenceConflict(Exception):
    """MongoDB's position differs from the batch's: another worker counted this range.

    The batch must be dropped unwritten and unacked; the worker is a zombie of an
    older group generation and stops (see :data:`pipeline.worker.exits.EXIT_FENCED`).
    """

    def __init__(self, conflicts: list[tuple[Fence, int | None]]) -> None:
        self.conflicts = conflicts
        detail = ", ".join(
            f"{f.topic}[{f.partition}] expected {f.expected} found {found}" for f, found in conflicts
        )
        super().__init__(f"offset fence conflict: {detail}")


def check_fences(fences: Iterable[Fence], stored: Mapping[TP, Mapping[str, Any]], flush_id: str) -> bool:
    """Decide a flush against the stored offsets documents.

    Returns ``True`` when this very flush already committed (a retry after a lost
    commit acknowledgement), ``False`` when it may be applied; raises
    :class:`FenceConflict` when any partition moved under it.
    """
    fences = list(fences)
    if fences and all(stored.get((f.topic, f.partition), {}).get("flush") == flush_id for f in fences):
        return True
    conflicts = []
    for f in fences:
        found = stored.get((f.topic, f.partition), {}).get("next")
        if found != f.expected:
            conflicts.append((f, found))
    if conflicts:
        raise FenceConflict(conflicts)
    return False


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
