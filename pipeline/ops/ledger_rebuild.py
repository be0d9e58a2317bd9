"""``preagg positions rebuild``: a partition's ledger rebuilt from the marks its documents hold.

A ledger behind its documents (deleted, restored from an older backup, or the documents
restored from a newer one) is an impossible state the workers refuse to count through: they
hold the partition back (docs/exactly-once.md, "The ledger and the documents"). The way out is
here. Every mark a document holds for a partition is the flush's sequence and the low bits of
its range's end (:func:`pipeline.core.marks.mark_value`), so the highest mark stored for a
partition names the last flush any document took and where it ended: the ledger's sequence
goes to it (the next flush's marks are above every stored one) and its position to that end
(what the documents hold is not counted again, what they lack is counted). The end's high
bits are taken from Kafka's committed offset, which follows the ledgers within a commit
interval. What the marks cannot decide is refused, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.commit import TP
from pipeline.core.families import base_topic
from pipeline.core.marks import MARKS, RANGE_BITS, RANGE_MASK, parse_mark_key, range_end_of, sequence_of
from pipeline.kafka.options import KafkaConnection
from pipeline.kafka.probe import PartitionProbe, group_positions
from pipeline.ops.positions import move_ledger, record_before
from pipeline.settings import Settings
from pipeline.store.offsets import BEHIND, OFFSETS_COLLECTION, offset_id, pending_of

#: Why a row planned was not written: a worker moved its ledger after the plan read it.
MOVED = "its ledger moved while the rebuild was planned (a worker flushed it): plan again"

#: Half the span a mark's range bits cover: the end is the one closest to Kafka's committed offset.
HALF_SPAN = 1 << (RANGE_BITS - 1)


@dataclass
class MarksSeen:
    """What the documents hold for one partition: the highest mark, and the ranges of each sequence."""

    highest: int = 0
    documents: int = 0
    #: Per sequence, the range ends (low bits) its marks carry: two for one sequence means a flush
    #: was written over the documents under a sequence another flush had used.
    ranges: dict[int, set[int]] = field(default_factory=dict)

    def add(self, value: int) -> None:
        self.highest = max(self.highest, value)
        self.documents += 1
        end = range_end_of(value)
        if end is not None:
            self.ranges.setdefault(sequence_of(value), set()).add(end)


def scan_marks(marks: Iterable[Mapping[str, Any]], topic: str) -> dict[TP, MarksSeen]:
    """Per partition of ``topic`` and of its families (``<topic>@<family>``), what the documents'
    ``_a`` fields (``marks``) hold."""
    out: dict[TP, MarksSeen] = {}
    for doc_marks in marks:
        for key, value in doc_marks.items():
            parsed = parse_mark_key(key)
            if parsed is None or base_topic(parsed[0]) != topic or not isinstance(value, int):
                continue
            out.setdefault((parsed[0], parsed[1]), MarksSeen()).add(value)
    return out


@dataclass(frozen=True)
class RebuildRow:
    """One partition: its ledger, the highest mark stored for it, and the ledger it rebuilds to."""

    topic: str
    partition: int
    ledger_next: int | None
    ledger_seq: int | None
    highest_seq: int
    documents: int
    new_next: int | None
    new_seq: int | None
    #: Why nothing is rebuilt (``None``: it can be).
    refused: str | None = None
    #: Why nothing needs rebuilding: the ledger accounts for every mark (a partition counted on).
    settled: str | None = None
    #: A ledger that accounts for its marks but holds its partition back because another ledger of
    #: it (its kind's or a family's) was behind: the rebuild lifts that hold.
    release: bool = False

    def text(self) -> str:
        """One line for the terminal."""
        line = (
            f"{self.topic}[{self.partition}] ledger next={self.ledger_next} seq={self.ledger_seq}; "
            f"documents hold flushes up to {self.highest_seq} ({self.documents} marks)"
        )
        if self.refused:
            return f"{line}  REFUSED: {self.refused}"
        if self.settled:
            return f"{line}  unchanged: {self.settled}" + ("; its hold lifted" if self.release else "")
        return f"{line}  -> next={self.new_next} seq={self.new_seq}"


def accounts_for(ledger: Mapping[str, Any] | None, seen: MarksSeen) -> bool:
    """Whether a ledger gave out every flush its documents hold (pure): a sequence above the highest
    mark's, or that very flush (finished at its end, or in progress towards it), and no hold for
    being behind. A ledger an operator moved (``positions reset``) keeps its sequence: at the
    highest mark's, it is taken as it stands."""
    if ledger is None or BEHIND in ledger or ledger.get("seq") is None:
        return False
    seq, top, end = int(ledger["seq"]), sequence_of(seen.highest), range_end_of(seen.highest)
    if seq != top or end is None:
        return seq >= top
    cut = pending_of(ledger)
    if cut is None and str(ledger.get("flush", "")).startswith("reset-"):
        return True
    at = cut.end if cut is not None else ledger.get("next")
    return isinstance(at, int) and at & RANGE_MASK == end


def plan_row(
    tp: TP,
    seen: MarksSeen,
    ledger: Mapping[str, Any] | None,
    committed: int | None,
    log_end: int,
    held: bool = False,
) -> RebuildRow:
    """The ledger a partition rebuilds to from what its documents hold (pure).

    The position is the highest mark's range end: its low bits are stored, its high bits are
    those of the end closest to Kafka's committed offset (or the ledger's position without one).

    Only a ledger behind its documents is rebuilt (:func:`accounts_for`). Any other may be a
    partition being counted, whose worker may be writing a flush this instant: moving its ledger
    would drop that flush's intent while its documents are written, and they would be counted
    again from the rebuilt position. ``held``: another ledger of the same Kafka partition is
    behind, so its worker holds it back and flushes nothing; a hold this ledger records is lifted.
    """
    stored = ledger
    ledger = ledger or {}
    next_, seq = ledger.get("next"), ledger.get("seq")
    top = sequence_of(seen.highest)

    def row(
        new_next: int | None, new_seq: int | None, refused: str | None = None, settled: str | None = None
    ) -> RebuildRow:
        return RebuildRow(
            tp[0],
            tp[1],
            next_,
            None if seq is None else int(seq),
            top,
            seen.documents,
            new_next,
            new_seq,
            refused,
            settled,
            held and settled is not None and "diverged" in ledger,
        )

    if accounts_for(stored, seen):
        return row(None, None, settled=f"its ledger gave out every flush the documents hold (up to {seq})")

    end = rebuilt_position(seen, stored, committed, log_end)
    if isinstance(end, str):
        return row(None, None, end)
    return row(end, max(int(seq or 0), top))


def rebuilt_position(
    seen: MarksSeen, ledger: Mapping[str, Any] | None, committed: int | None, log_end: int
) -> int | str:
    """Where the highest mark's flush ended, or why the marks cannot tell (pure)."""
    twice = sorted(s for s, ends in seen.ranges.items() if len(ends) > 1)
    if twice:
        return (
            f"documents hold two ranges under flush {twice[-1]}: a flush was written over documents a "
            "ledger behind them had already counted, and their counts cannot be told apart; restore the "
            "documents and the ledgers from one backup, or recount (docs/operations.md)"
        )
    low = range_end_of(seen.highest)
    if low is None:
        return (
            "the highest mark was written before marks carried their flush's range: its position "
            "cannot be read from it"
        )
    base = committed if committed is not None else (ledger or {}).get("next")
    if base is None:
        return "neither Kafka nor the ledger holds a position to read the range's end against"
    end = base + ((low - base) % (1 << RANGE_BITS))
    if end - base > HALF_SPAN:
        end -= 1 << RANGE_BITS
    if not 0 <= end <= log_end:
        return f"the documents' position {end} lies outside Kafka's log (ends at {log_end})"
    cut = pending_of(ledger)
    if (
        cut is not None
        and cut.ranged
        and cut.end > end
        and cut.end & RANGE_MASK in seen.ranges.get(cut.seq, ())
    ):
        return (
            f"flush {cut.seq}, cut short, wrote documents up to offset {cut.end}, past the highest flush the "
            f"documents hold ({end}): counting again from there would count them twice; restore the "
            "documents and the ledgers from one backup, or recount (docs/operations.md)"
        )
    return end


async def collect_marks(db: AsyncDatabase[dict[str, Any]], topic: str) -> dict[TP, MarksSeen]:
    """Every mark of ``topic`` stored in the database's collections (one scan of each)."""

    async def marks() -> list[Mapping[str, Any]]:
        out: list[Mapping[str, Any]] = []
        for name in sorted(await db.list_collection_names()):
            if name.startswith(("preagg_", "system.")):
                continue
            async for d in db[name].find({MARKS: {"$exists": True}}, {MARKS: 1}):
                if isinstance(d.get(MARKS), Mapping):
                    out.append(d[MARKS])
        return out

    return scan_marks(await marks(), topic)


async def plan(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], topic: str, partition: int | None
) -> list[RebuildRow]:
    """Each partition of ``topic`` whose documents hold marks: its ledger and what it rebuilds to;
    and so for each family of its documents flushed apart (``<topic>@<family>``: their own
    ledgers and marks, read against the same Kafka partition)."""
    seen = await collect_marks(db, topic)
    if partition is not None:
        seen = {tp: s for tp, s in seen.items() if tp[1] == partition}
    conn = KafkaConnection.of(settings)
    kafka = await group_positions(conn, settings.group_id, sorted({(base_topic(t), p) for t, p in seen}))
    ids = {offset_id(settings.group_id, *tp): tp for tp in seen}
    ledgers = {ids[d["_id"]]: d async for d in db[OFFSETS_COLLECTION].find({"_id": {"$in": list(ids)}})}
    held = {(base_topic(t), p) for (t, p), d in ledgers.items() if BEHIND in d}
    rows = []
    async with PartitionProbe(conn) as probe:
        for tp, s in sorted(seen.items()):
            kafka_tp = (base_topic(tp[0]), tp[1])
            bounds = await probe.look(*kafka_tp, 0)
            rows.append(
                plan_row(tp, s, ledgers.get(tp), kafka[kafka_tp][0], bounds.log_end, kafka_tp in held)
            )
    return rows


def kafka_positions(rows: list[RebuildRow]) -> dict[TP, int]:
    """Kafka's committed offsets that follow rebuilt ledgers: per Kafka partition with a ledger
    rebuilt, the lowest of its ledgers' positions (its own and its families', rebuilt or not)."""

    def at(r: RebuildRow) -> int | None:
        return r.new_next if r.new_next is not None and not r.refused else r.ledger_next

    rebuilt = {(base_topic(r.topic), r.partition) for r in rows if r.new_next is not None and not r.refused}
    out: dict[TP, int] = {}
    for r in rows:
        tp, position = (base_topic(r.topic), r.partition), at(r)
        if tp in rebuilt and position is not None:
            out[tp] = min(out.get(tp, position), position)
    return out


async def apply(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], rows: list[RebuildRow]
) -> list[RebuildRow]:
    """Write each rebuildable row's ledger: position, sequence, the record before it; the hold and any
    flush cut short dropped (its range is counted from the new position). Each is written only if
    its ledger still holds the position and sequence it was planned from: one a worker moved
    meanwhile is left, and its row comes back refused. The rows, as applied."""
    out = []
    async with PartitionProbe(KafkaConnection.of(settings)) as probe:
        for r in rows:
            if r.release:
                await db[OFFSETS_COLLECTION].update_one(
                    {"_id": offset_id(settings.group_id, r.topic, r.partition)}, {"$unset": {"diverged": ""}}
                )
            if r.refused or r.new_next is None or r.new_seq is None:
                out.append(r)
                continue
            last = await record_before(probe, base_topic(r.topic), r.partition, r.new_next)
            rebuilt = {
                "at": time.time(),
                "from": {"next": r.ledger_next, "seq": r.ledger_seq},
                "to": {"next": r.new_next, "seq": r.new_seq},
            }
            changes = {"seq": r.new_seq, "rebuilt": rebuilt}
            expect = {"next": r.ledger_next, "seq": r.ledger_seq}
            tp = (r.topic, r.partition)
            if await move_ledger(settings, db, tp, r.new_next, last, "rebuild", changes, expect):
                out.append(r)
            else:
                out.append(replace(r, refused=MOVED))
    return out
