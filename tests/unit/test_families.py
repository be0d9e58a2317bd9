"""Site rollups flushed ahead of the pages: the two families add up to one flush of both, each
with its own ledger and marks; records are acked once both committed them; both decide alike."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from pipeline.core.clock import DecisionClock
from pipeline.core.commit import Fence, LedgerView
from pipeline.core.families import FamilySink, base_topic, family_of, family_topic
from pipeline.core.marks import MARKS
from pipeline.core.rejection import Rejection
from pipeline.kinds.hits.aggregate import PAGES_ONLY, HitCounts
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.families import PAGES, SITES, Family
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.sites.caps import PageCaps
from pipeline.worker.batch import new_batch
from pipeline.worker.flusher import Flusher
from pipeline.worker.joint import JointAck
from pipeline.worker.policy import FlushPolicy

from .test_marks import P0, P1
from .test_marks import MarkStore as Marks


class MarkStore(Marks):
    """The unit tests' marked store, with the one-ledger read and the families a main ledger records."""

    async def ledger(self, tp: tuple[str, int]) -> LedgerView | None:
        led = self.stored_ledgers.get(tp)
        return None if led is None else LedgerView(led.get("next"), families=tuple(led.get("families", ())))

    async def commit(
        self, updates: Sequence[Any], fences: Sequence[Fence], flush_id: str, *a: Any, **kw: Any
    ) -> Any:
        for f in fences:
            if f.families:
                self.stored_ledgers.setdefault((f.topic, f.partition), {"seq": 0})["families"] = f.families
        return await super().commit(updates, fences, flush_id, *a, **kw)


F = hits_fields("readable")
NOW = 2_000_000_000


def hit(page: str, ts: int, visitor: str = "v") -> bytes:
    return b'{"site":"s","page":"%s","ts":%d,"visitor":"%s"}' % (page.encode(), ts, visitor.encode())


def records() -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Two partitions of hits over 6 pages (a cap of 3 pages a day leaves some to the rollups only)."""
    return {
        tp: [(o, hit(f"/p{(o * 7 + tp[1]) % 6}", NOW - 5000 + o * 61, f"v{o % 4}")) for o in range(40)]
        for tp in (P0, P1)
    }


def flusher(sink: Any, family: Family, max_pages: int) -> Flusher[HitCounts]:
    dec = HitDecoder(1000, 300, clock=lambda: NOW)
    caps = PageCaps(max_pages)

    async def nothing(_: Sequence[object]) -> None:
        return None

    return Flusher(
        "hits",
        lambda: HitCounts(dec, F, caps=caps, visitor_keys=lambda _: b"k" * 16, family=family),
        sink,
        nothing,
        nothing,
        FlushPolicy(max_pending_keys=10_000, max_backoff=0.01, marked=True),
    )


async def feed(f: Flusher[HitCounts], recs: dict[tuple[str, int], list[tuple[int, bytes]]]) -> None:
    for tp, rs in recs.items():
        await f.receive_many(tp, [(o, v, None, 0) for o, v in rs])
    await f.flush()


def counters(store: MarkStore) -> dict[tuple[str, Any], dict[str, int]]:
    return {k: {p: n for p, n in d["inc"].items() if n} for k, d in store.docs.items()}


def test_the_two_families_add_up_to_one_flush_of_both_with_marks_of_their_own() -> None:
    recs = records()
    whole, split = MarkStore(), MarkStore()
    asyncio.run(feed(flusher(whole, None, 3), recs))
    asyncio.run(feed(flusher(FamilySink(split, "sites"), SITES, 0), recs))
    asyncio.run(feed(flusher(FamilySink(split, None, ("sites",)), PAGES, 3), recs))
    assert counters(split) == counters(whole)
    rollups = {F.rollups.daily.collection, F.rollups.monthly.collection}
    assert any(d["inc"].get(F.rollups.daily.capped) for (c, _), d in split.docs.items() if c in rollups)
    for (coll, _), doc in split.docs.items():
        families = {family_of(k.split("|")[0]) for k in doc[MARKS]}
        if coll not in rollups:
            assert families == {None}, coll  # pages' documents: the pages' marks only
        else:
            assert "sites" in families, coll
    assert set(split.stored_ledgers) == {P0, P1, ("hits@sites", 0), ("hits@sites", 1)}
    assert all(split.stored_ledgers[tp]["families"] == ("sites",) for tp in (P0, P1))


def test_a_family_without_a_ledger_starts_where_the_main_ledger_has_counted() -> None:
    store = MarkStore()
    store.stored_ledgers[P0] = {"seq": 4, "next": 17}
    store.stored_ledgers[P1] = {"seq": 2, "next": 5, "pending": {"flush": "f", "begin": 5, "end": 9}}
    got = asyncio.run(FamilySink(store, "sites").ledgers([P0, P1, ("hits", 2)]))
    assert got.positions == {P0: 17, P1: 9, ("hits", 2): None}  # a cut-short flush is written whole
    store.stored_ledgers[("hits@sites", 0)] = {"seq": 9, "next": 30}
    assert asyncio.run(FamilySink(store, "sites").ledgers([P0])).positions == {P0: 30}


def test_a_family_that_never_committed_starts_with_kafka_whatever_the_main_ledger_holds() -> None:
    """The main flusher committed first (its batch was ready sooner), then the worker died: the
    family's events below the main position were never counted, and Kafka's offset says where."""
    store = MarkStore()
    store.stored_ledgers[P0] = {"seq": 4, "next": 17, "families": ("sites",)}
    assert asyncio.run(FamilySink(store, "sites").ledgers([P0])).positions == {P0: None}


def test_a_redo_of_a_flush_written_before_the_split_writes_every_document() -> None:
    dec = HitDecoder(1000, 300, clock=lambda: NOW)
    for decisions, whole in ((None, True), (b"", True), (PAGES_ONLY, False)):
        agg = HitCounts(dec, F, visitor_keys=lambda _: b"k" * 16, family=PAGES)
        agg.ingest(hit("/a", NOW - 60))
        agg.assume(decisions)
        colls = {u.collection for u in agg.plan()}
        # the pages' family writes a site's hour sketches in its daily rollup, never its month
        assert (F.rollups.monthly.collection in colls) is whole
        assert agg.decisions() == (None if whole else PAGES_ONLY)


def test_names_of_families() -> None:
    assert family_topic("hits", "sites") == "hits@sites"
    assert (base_topic("hits@sites"), family_of("hits@sites")) == ("hits", "sites")
    assert (base_topic("hits"), family_of("hits")) == ("hits", None)


class Rec:
    def __init__(self, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = "hits", partition, offset


def test_a_record_is_acked_once_both_families_committed_it() -> None:
    acked: list[Any] = []

    async def ack(handles: Sequence[object]) -> None:
        acked.extend(handles)

    joint = JointAck(ack)
    pages, sites = joint.party(0), joint.party(1)
    a, b, c = Rec(0, 1), Rec(0, 2), Rec(1, 1)
    asyncio.run(sites([a, b, c, None]))
    assert acked == []
    asyncio.run(sites([a]))  # the same family again: still waits for the other
    asyncio.run(pages([b]))
    assert acked == [b]
    joint.keep([("hits", 0)])  # partition 1 revoked: what was remembered of it goes
    asyncio.run(pages([c]))
    assert acked == [b] and set(joint.waiting) == {("hits", 0, 1), ("hits", 1, 1)}
    asyncio.run(pages([a]))
    assert acked == [b, a]


def test_a_record_is_decided_at_its_kafka_time_whatever_the_batch_instant() -> None:
    """Two flushers of one record open their batches at different instants: both decide alike."""
    wall = [float(NOW)]
    clock = DecisionClock(lambda: wall[0])
    dec = HitDecoder(1000, 300, clock=clock)
    future = hit("/f", NOW + 400)  # 400 s past the wall clock, 100 s past its record's time
    verdicts = []
    for instant in (NOW, NOW + 200):
        wall[0] = instant
        batch = new_batch(lambda: HitCounts(dec, F), True, clock)
        batch.ingest_message(P0, 0, [future], None, None, ts=(NOW + 300) * 1000)
        batch.ingest_message(P0, 1, [future], None, None, ts=0)  # no Kafka time: the batch's instant
        verdicts.append([d.offset for d in batch.dead])
    assert verdicts == [[1], []]


class CountingDecoder(HitDecoder):
    """A hits decoder that counts the lines it really decodes."""

    calls = 0

    def decode_event(self, raw: bytes) -> Any:
        self.calls += 1
        return super().decode_event(raw)


def test_a_decoder_read_by_both_families_decodes_each_record_once_per_decision_instant() -> None:
    now = [float(NOW)]
    dec = CountingDecoder(1000, 300, clock=lambda: now[0])
    dec.share()
    lines = [hit(f"/p{i}", NOW - 10 * i) for i in range(5)] + [b"not json", hit("/soon", NOW + 200)]
    first = [dec.decode_visit(raw) for raw in lines]  # the rollups' reader
    second = [dec.decode_visit(raw) for raw in lines]  # the pages' reader takes its answers
    assert second == first and dec.calls == len(lines)
    assert not isinstance(first[-1], Rejection)
    now[0] = NOW - 200.0  # another instant decides anew: the same line is now too far ahead
    assert isinstance(dec.decode_visit(lines[-1]), Rejection) and dec.calls == len(lines) + 1


def test_a_familys_refusals_are_logged_once_by_the_reader_that_sends_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both readers refuse a bad record alike; the family's reader neither sends nor logs it."""
    caplog.set_level(logging.WARNING, logger="preagg.flush")
    for elsewhere, logged in ((True, 0), (False, 1)):
        caplog.clear()
        f = flusher(MarkStore(), SITES, 10)
        if elsewhere:
            f.committer.send_dead = None
        asyncio.run(feed(f, {P0: [(0, b"not json"), (1, hit("/a", NOW - 60))]}))
        assert sum("rejected" in r.getMessage() for r in caplog.records) == logged
