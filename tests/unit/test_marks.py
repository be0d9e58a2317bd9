"""Idempotent writes without servers: marks, merged plans, and a cut-short flush written again.

The store is an in-memory model of MongoDB's side of the protocol with idempotent
writes (intent, marked single-document upserts, finish: docs/exactly-once.md); the
real store is exercised by the integration and chaos tests.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from typing import Any

import pytest
from bson import Binary
from pymongo import UpdateOne

from pipeline.core.clock import DecisionClock
from pipeline.core.commit import Committed, Fence, FenceConflict, Ledgers, Pending
from pipeline.core.incarnation import Verdict
from pipeline.core.marks import MARKS, mark_key, marked, missing_sources
from pipeline.core.updates import DocUpdate, merge_sources, split_wide
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.sites.caps import PageCaps
from pipeline.store.errors import mongo_failure
from pipeline.store.statements import marked_statements, statement_chunks
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.flusher import Flusher
from pipeline.worker.policy import FlushPolicy

from .checks import Checks

P0, P1 = ("hits", 0), ("hits", 1)


class Died(BaseException):
    """The worker dies mid-flush (not an error its retry loop would catch)."""


class MarkStore:
    """Documents with marks and ledgers with intents, each update atomic on one document."""

    exactly_once = True
    #: Failures read as MongoDB's adapter reads them (these stores raise PyMongo's errors).
    failure = staticmethod(mongo_failure)

    def __init__(self) -> None:
        self.docs: dict[Any, dict[str, Any]] = {}
        self.stored_ledgers: dict[tuple[str, int], dict[str, Any]] = {}
        #: Upserts applied before the worker dies (``None``: never).
        self.die_after: int | None = None
        #: Upserts applied before the store stops answering, once (``None``: never).
        self.down_after: int | None = None
        self.duplicates = 0

    async def ledgers(self, tps: Sequence[tuple[str, int]]) -> Ledgers:
        out = Ledgers({tp: self.stored_ledgers.get(tp, {}).get("next") for tp in tps}, {})
        for tp in tps:
            led = self.stored_ledgers.get(tp, {})
            if "pending" in led:
                p = led["pending"]
                start = led.get("next", p["begin"])
                out.pending[tp] = Pending(
                    p["flush"], led["seq"], start, p["end"], p.get("clock"), p.get("decisions")
                )
        return out

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked_writes: bool = False,
        **kw: Any,
    ) -> Committed:
        assert kw.get("marked", marked_writes), "hits flushes are idempotent writes"
        seqs = {}
        for f in fences:
            tp = (f.topic, f.partition)
            led = self.stored_ledgers.setdefault(tp, {"seq": 0})
            if "pending" in led and led["pending"]["flush"] == flush_id:
                seqs[tp] = led["seq"]
            elif "pending" not in led and led.get("next") == f.expected:
                led["seq"] += 1
                led["pending"] = {
                    "flush": flush_id,
                    "end": f.next,
                    "begin": f.begin,
                    "clock": f.decided_at,
                    "decisions": f.decisions,
                }
                seqs[tp] = led["seq"]
            else:
                raise FenceConflict([(f, led.get("next"))])
        for n, u in enumerate(updates):
            if self.die_after is not None and n >= self.die_after:
                self.die_after = None
                raise Died
            if self.down_after is not None and n >= self.down_after:
                self.down_after = None
                raise ConnectionError("store down")
            flt, update = marked(u, {"$inc": u.inc}, seqs)
            doc = self.docs.setdefault((u.collection, u.id), {MARKS: {}, "inc": Counter()})
            applied = any(
                doc[MARKS].get(path.split(".", 1)[1], 0) >= cond["$not"]["$gte"]
                for path, cond in flt.items()
                if path.startswith(MARKS + ".")
            )
            if applied:
                self.duplicates += 1
                continue
            doc["inc"].update(update["$inc"])
            for path, seq in update["$set"].items():
                doc[MARKS][path.split(".", 1)[1]] = seq
        for f in fences:
            led = self.stored_ledgers[(f.topic, f.partition)]
            led.pop("pending")
            led.update(next=f.next, flush=flush_id)
        return Committed(False, 10 * len(updates))

    async def outcome(self, fences: Sequence[Fence], flush_id: str) -> bool:
        raise AssertionError("idempotent writes never ask for a commit's outcome")

    def total(self) -> int:
        # pages' daily documents, not the sites' rollups
        return sum(d["inc"]["total"] for (coll, _), d in self.docs.items() if coll == "hits_daily")


def hit(ts: int, page: str = "/") -> bytes:
    return b'{"site":"s","page":"%s","ts":%d}' % (page.encode(), ts)


def flusher(
    store: MarkStore,
    log: list[Any],
    records: dict[tuple[str, int], list[Any]],
    check_incarnation: Any = None,
    clock: DecisionClock | None = None,
    lateness: float = 0.0,
    caps: PageCaps | None = None,
) -> Flusher[HitCounts]:
    async def send_dead(letters: Sequence[DeadLetter]) -> None:
        log.append(("dead", len(letters)))

    async def ack(handles: Sequence[object]) -> None:
        log.extend(("ack", h) for h in handles)

    async def read_range(tp: tuple[str, int], start: int | None, end: int) -> list[Any]:
        log.append(("read", tp, start, end))
        return [(o, v, 0) for o, v in records[tp] if (start is None or o >= start) and o < end]

    dec = HitDecoder(1000, 300, clock=clock or (lambda: 2e9))
    dec.lateness = lateness
    return Flusher(
        "hits",
        lambda: HitCounts(dec, hits_fields("readable"), caps=caps),
        store,  # type: ignore[arg-type]
        send_dead,
        ack,
        FlushPolicy(max_pending_keys=10_000, max_backoff=0.01, marked=True),
        checks=Checks(check_incarnation) if check_incarnation is not None else None,
        read_range=read_range,
        clock=clock,
    )


def test_a_document_of_two_partitions_is_one_update_with_both_marks() -> None:
    a = DocUpdate("c", "d", {"m": 1}, {"t": 2}, sources=(P0,))
    b = DocUpdate("c", "d", {"m": 1}, {"t": 3, "h.1": 3}, sources=(P1,))
    other = DocUpdate("c", "e", {}, {"t": 1}, sources=(P1,))
    merged = merge_sources([a, b, other])
    assert [(u.id, u.inc, u.sources) for u in merged] == [
        ("d", {"t": 5, "h.1": 3}, (P0, P1)),
        ("e", {"t": 1}, (P1,)),
    ]
    flt, update = marked(merged[0], {"$inc": merged[0].inc}, {P0: 7, P1: 3})
    assert flt == {
        "_id": "d",
        f"{MARKS}.hits|0": {"$not": {"$gte": 7}},
        f"{MARKS}.hits|1": {"$not": {"$gte": 3}},
    }
    assert update["$set"] == {f"{MARKS}.hits|0": 7, f"{MARKS}.hits|1": 3}


def test_wide_merged_documents_stay_apart_and_split_parts_have_marks_of_their_own() -> None:
    a = DocUpdate("c", "d", {}, {f"n.{i}": 1 for i in range(3)}, sources=(P0,))
    b = DocUpdate("c", "d", {}, {f"n.{i}": 1 for i in range(3, 6)}, sources=(P1,))
    kept = merge_sources([a, b], max_fields=4)  # merged it would be 6 fields: split differently
    assert [u.sources for u in kept] == [(P0,), (P1,)]
    parts = split_wide([DocUpdate("c", "d", {}, {f"n.{i}": 1 for i in range(5)}, sources=(P0,))], 2)
    assert [u.part for u in parts] == [0, 1, 2]
    keys = {next(k for k in marked(u, {}, {P0: 1})[0] if k.startswith(MARKS)) for u in parts}
    assert keys == {f"{MARKS}.hits|0", f"{MARKS}.hits|0~1", f"{MARKS}.hits|0~2"}


def test_the_parts_of_a_new_split_document_go_as_one_insert_holding_every_parts_marks() -> None:
    wide = DocUpdate("c", "d", {"m.s": "x"}, {f"n.{i}": i + 1 for i in range(5)}, sources=(P0,))
    parts = split_wide([wide, DocUpdate("c", "e", {}, {"t": 1}, sources=(P0,))], 2)
    ops, owners, _ = marked_statements(parts, {P0: 9}, True, frozenset({("c", "d"), ("c", "e")}))
    assert [len(o) for o in owners] == [3, 1]  # one statement stands for the three parts
    assert ops[0]._doc == {  # type: ignore[union-attr]
        "_id": "d",
        "m": {"s": "x"},
        "n": {str(i): i + 1 for i in range(5)},
        MARKS: {"hits|0": 9, "hits|0~1": 9, "hits|0~2": 9},
    }
    # Found existing (not absent), each part is its own upsert on its own mark.
    ops, owners, _ = marked_statements(parts, {P0: 9}, True, frozenset())
    assert [len(o) for o in owners] == [1, 1, 1, 1]
    # A bulk write never separates the updates of one document.
    assert [len(c) for c in statement_chunks(parts, 2)] == [3, 1]
    assert [len(c) for c in statement_chunks(parts, 1)] == [3, 1]


def test_the_updates_a_merge_left_apart_go_as_one_insert_of_their_sum_on_a_new_document() -> None:
    a = DocUpdate("c", "d", {"m.s": "x"}, {"t": 2, "n.1": 1}, sources=(P0,), max={"w": 3})
    b = DocUpdate("c", "d", {"m.s": "x"}, {"t": 3, "n.2": 1}, sources=(P1,), max={"w": 5})
    other = DocUpdate("c", "e", {}, {"t": 1}, sources=(P1,))
    ups = [a, other, b]
    ops, owners, _ = marked_statements(ups, {P0: 4, P1: 6}, True, frozenset({("c", "d")}))
    assert [len(o) for o in owners] == [2, 1]
    assert ops[0]._doc == {  # type: ignore[union-attr]
        "_id": "d",
        "m": {"s": "x"},
        "t": 5,
        "n": {"1": 1, "2": 1},
        "w": 5,
        MARKS: {"hits|0": 4, "hits|1": 6},
    }
    assert isinstance(ops[1], UpdateOne)  # "e" exists: its upsert
    # A shard key set on insert, not matched (an unsharded store): the new document holds it.
    keyed = [replace(u, key={"k": 1}) for u in (a, b)]
    ops, _, _ = marked_statements(keyed, {P0: 4, P1: 6}, False, frozenset({("c", "d")}))
    assert ops[0]._doc["k"] == 1 and ops[0]._doc["t"] == 5  # type: ignore[union-attr]
    # Not the same metadata, or one path $set twice: the order would decide, so each its upsert.
    c = DocUpdate("c", "d", {"m.s": "y"}, {"t": 1}, sources=(P1,))
    _, owners, _ = marked_statements([a, c], {P0: 4, P1: 6}, True, frozenset({("c", "d")}))
    assert [len(o) for o in owners] == [1, 1]
    assert [[u.id for u in c] for c in statement_chunks(ups, 1)] == [["d", "d"], ["e"]]
    # $max of binaries: BSON orders them by length first, Python by bytes; not folded.
    wide, short = replace(a, max={"w": Binary(b"\x01\x00")}), replace(b, max={"w": Binary(b"\x02")})
    _, owners, _ = marked_statements([wide, short], {P0: 4, P1: 6}, True, frozenset({("c", "d")}))
    assert [len(o) for o in owners] == [1, 1]


def test_a_duplicate_key_is_applied_only_where_the_document_holds_the_marks() -> None:
    """E11000 says someone inserted the _id, not that our share is there."""
    a = DocUpdate("c", "d", {"m": 1}, {"t": 2}, sources=(P0,))
    b = DocUpdate("c", "d", {"m": 1}, {"t": 3}, sources=(P1,))
    (merged,) = merge_sources([a, b])
    assert merged.shares == (a, b)  # each partition's own share, to send apart
    seqs = {P0: 7, P1: 3}
    rival = {"_id": "d", "m": 1}  # another worker's insert: no marks of ours
    assert missing_sources(merged, rival, seqs) == (P0, P1)
    assert missing_sources(merged, None, seqs) == (P0, P1)
    redone = {"_id": "d", MARKS: {"hits|0": 7}}  # P0's range was written apart (a redo)
    assert missing_sources(merged, redone, seqs) == (P1,)
    older = {"_id": "d", MARKS: {"hits|0": 6, "hits|1": 3}}
    assert missing_sources(merged, older, seqs) == (P0,)
    assert missing_sources(merged, {"_id": "d", MARKS: {"hits|0": 9, "hits|1": 3}}, seqs) == ()
    part = DocUpdate("c", "d", {}, {"t": 1}, sources=(P0,), part=2)
    assert missing_sources(part, {MARKS: {"hits|0": 7}}, seqs) == (P0,)  # the part's own mark
    assert missing_sources(part, {MARKS: {"hits|0~2": 7}}, seqs) == ()


def test_mark_keys_escape_dots_of_topic_names() -> None:
    assert mark_key("web.hits", 3) == "web%2Ehits|3"
    assert mark_key("hits", 0, part=2) == "hits|0~2"


def test_a_flush_cut_short_is_written_again_by_the_next_owner_exactly_once() -> None:
    """Keyless: one page's hits on two partitions. The worker dies after one upsert of its
    flush; the next owner finds the intents, reads both ranges again and counts each hit once."""
    records = {
        P0: [(o, hit(60 * o, f"/p{o % 3}")) for o in range(6)],
        P1: [(o, hit(60 * o + 1, f"/p{o % 3}")) for o in range(5)],
    }
    store, log = MarkStore(), []

    async def first() -> None:
        f = flusher(store, log, records)
        for tp, recs in records.items():
            await f.receive_many(tp, [(o, v, f"{tp[1]}:{o}", 0) for o, v in recs])
        store.die_after = 1
        with pytest.raises(Died):
            await f.flush()

    asyncio.run(first())
    assert all("pending" in store.stored_ledgers[tp] for tp in records), "the intents stay"
    assert 0 < store.total() < 11, "part of the flush was written"
    assert not [e for e in log if e[0] == "ack"], "nothing acked"

    async def successor() -> None:
        f = flusher(store, log, records)
        await f.load_positions([P0, P1])
        # Redelivered messages below the ledgers' new positions are skipped, not counted.
        for tp, recs in records.items():
            await f.receive_many(tp, [(o, v, f"again-{tp[1]}:{o}", 0) for o, v in recs])
        await f.flush()
        assert f.stats.redone == 2

    asyncio.run(successor())
    assert store.total() == 11
    assert store.duplicates > 0, "documents written before the death answered 'already applied'"
    assert {tp: led["next"] for tp, led in store.stored_ledgers.items()} == {P0: 6, P1: 5}
    assert not any("pending" in led for led in store.stored_ledgers.values())
    assert ("read", P0, 0, 6) in log and ("read", P1, 0, 5) in log  # from each intent's first offset


def test_a_recreated_topic_is_checked_before_a_cut_short_flush_is_redone() -> None:
    """The intent's range names offsets of the old log; a recreated topic holds
    other records there. The check comes first: the partition is held back, nothing is redone."""
    records = {P0: [(o, hit(60 * o, f"/p{o % 3}")) for o in range(6)]}
    store, log = MarkStore(), []

    async def first() -> None:
        f = flusher(store, log, records)
        await f.receive_many(P0, [(o, v, o, 0) for o, v in records[P0]])
        store.die_after = 1
        with pytest.raises(Died):
            await f.flush()

    asyncio.run(first())
    written = store.total()
    checked: list[Any] = []

    async def diverged(tp: tuple[str, int]) -> Verdict:
        checked.append(tp)
        return Verdict("diverged", "the topic was recreated")

    records[P0] = [(o, hit(60 * o + 7, "/new")) for o in range(6)]  # the new log's records

    async def successor() -> Flusher[HitCounts]:
        f = flusher(store, log, records, check_incarnation=diverged)
        await f.load_positions([P0])
        return f

    f = asyncio.run(successor())
    assert checked == [P0] and P0 in f.diverged
    assert not [e for e in log if e[0] == "read"], "nothing of the new log was read as the old range"
    assert f.stats.redone == 0 and store.total() == written
    assert "pending" in store.stored_ledgers[P0], "the intent stays for the operator's reset"


def test_a_redo_decides_lateness_as_the_flush_did_not_by_the_clock_of_its_run() -> None:
    """A flush counted events 50 minutes old (lateness 1 h) and was cut short;
    its range is redone 2 hours later. Read at the redo's clock they would be late: refused,
    dead-lettered, and counted twice by a later `deadletters replay`."""
    t0 = 2e9
    wall = [t0]
    clock = DecisionClock(lambda: wall[0])
    records = {P0: [(o, hit(int(t0) - 3000 + o, f"/p{o}")) for o in range(6)]}
    store, log = MarkStore(), []

    async def first() -> None:
        f = flusher(store, log, records, clock=clock, lateness=3600)
        await f.receive_many(P0, [(o, v, o, 0) for o, v in records[P0]])
        store.die_after = 2
        with pytest.raises(Died):
            await f.flush()

    asyncio.run(first())
    assert not [e for e in log if e[0] == "dead"], "the flush counted every event"
    assert store.stored_ledgers[P0]["pending"]
    wall[0] = t0 + 7200

    async def successor() -> None:
        f = flusher(store, log, records, clock=clock, lateness=3600)
        await f.load_positions([P0])
        assert f.stats.redone == 1

    asyncio.run(successor())
    assert not [e for e in log if e[0] == "dead"], "the redo refused what the flush had counted"
    assert store.total() == 6


def test_a_redo_admits_the_pages_its_flush_admitted_whatever_its_own_caps_say() -> None:
    """Page caps are per worker. The flush admitted /a (the day's one page) and
    refused /b; the worker redoing it knows another page of that day and would refuse /a too,
    losing /a's page counts. The intent records the refusals; the redo refuses exactly those."""
    records = {P0: [(o, hit(60 * o, "/a" if o % 2 == 0 else "/b")) for o in range(4)]}
    store, log = MarkStore(), []

    async def first() -> None:
        f = flusher(store, log, records, caps=PageCaps(1, 4096))
        await f.receive_many(P0, [(o, v, o, 0) for o, v in records[P0]])
        store.die_after = 0  # the intent is recorded, nothing written
        with pytest.raises(Died):
            await f.flush()

    asyncio.run(first())
    assert store.stored_ledgers[P0]["pending"]["decisions"], "the refusal of /b is recorded"
    elsewhere = PageCaps(1, 4096)
    elsewhere.seed_pages("s", date(1970, 1, 1).toordinal(), ["/c"])  # this worker's day is full

    async def successor() -> None:
        f = flusher(store, log, records, caps=elsewhere)
        await f.load_positions([P0])
        assert f.stats.redone == 1

    asyncio.run(successor())
    daily = {i: d["inc"]["total"] for (c, i), d in store.docs.items() if c == "hits_daily"}
    assert [(i.split("/", 2)[-1], n) for i, n in daily.items()] == [("/a", 2)], daily


def test_a_retried_flush_writes_nothing_twice() -> None:
    """A failed flush retried as it was (same id, same sequence): applied documents are skipped."""
    records = {P0: [(o, hit(60 * o, f"/p{o}")) for o in range(4)]}
    store, log = MarkStore(), []

    store.down_after = 3  # three upserts, then the store stops answering; the flusher retries

    async def go() -> None:
        f = flusher(store, log, records)
        await f.receive_many(P0, [(o, v, o, 0) for o, v in records[P0]])
        await f.flush()

    asyncio.run(go())
    assert store.total() == 4 and store.duplicates == 3
