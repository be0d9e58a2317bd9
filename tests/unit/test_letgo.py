"""A reader that lets go of records at its memory bound and reads them again: its bookkeeping, and
two readers of one consumer that count what one reader of everything counts, each record acked once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pipeline.core.families import FamilySink
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.families import PAGES, SITES, Family
from pipeline.kinds.hits.sites.caps import PageCaps
from pipeline.worker.flusher import Flusher
from pipeline.worker.joint import Ack, JointAck
from pipeline.worker.letgo import Handle, LetGo
from pipeline.worker.policy import FlushPolicy

from .test_families import NOW, F, MarkStore, counters, hit
from .test_marks import P0, P1


def test_ranges_let_go_of_are_read_again_in_order_and_bounded() -> None:
    lg = LetGo(bound=100)
    assert not lg.holds(P0, 5)
    lg.add(P0, 10, 19, 10)
    lg.add(P0, 20, 59, 40)  # a later list of the same partition: the range grows
    lg.add(P1, 3, 12, 10)
    assert lg.holds(P0, 60) and lg.behind() == 60 and not lg.full()
    assert lg.next_range(25) == (P0, 10, 35)  # the partition furthest behind, a chunk at a time
    assert lg.advance(P0, 10, 35) and lg.start[P0] == 35
    assert not lg.advance(P0, 10, 40)  # read before the range moved: not taken
    assert lg.advance(P0, 35, 60) and P0 not in lg.start  # caught up
    lg.add(P0, 70, 169, 100)
    assert lg.full()
    assert not lg.holds(P0, 70) and P0 not in lg.start  # the consumer went back: the range goes
    assert lg.release() == {P1: 3} and lg.behind() == 0 and lg.generation == 1
    assert (lg.let_go, lg.reread) == (160, 0)


def reader(
    sink: Any, family: Family, bound: int, ack: Ack, log: dict[Any, list[Any]], let_go: bool
) -> Flusher[Any]:
    dec = HitDecoder(1000, 300, clock=lambda: NOW)

    async def read_range(tp: tuple[str, int], start: int | None, end: int) -> list[Any]:
        return [(o, v, 0) for o, v in log[tp] if (start is None or o >= start) and o < end]

    return Flusher(
        "hits",
        lambda: HitCounts(dec, F, caps=PageCaps(1000), visitor_keys=lambda _: b"k" * 16, family=family),
        sink,
        None,
        ack,
        FlushPolicy(max_pending_keys=bound, max_backoff=0.01, marked=True),
        read_range=read_range,
        let_go=let_go,
    )


def test_two_readers_of_one_consumer_count_once_when_the_pages_reader_lets_go() -> None:
    log = {
        tp: [(o, hit(f"/p{(o * 13 + tp[1]) % 97}", NOW - 80_000 + o * 37, f"v{o % 9}")) for o in range(300)]
        for tp in (P0, P1)
    }
    acked: list[Any] = []

    async def ack(handles: Sequence[object]) -> None:
        acked.extend((h.topic, h.partition, h.offset) for h in handles)  # type: ignore[attr-defined]

    async def scenario() -> tuple[MarkStore, MarkStore, int]:
        split, whole = MarkStore(), MarkStore()
        joint = JointAck(ack)
        sites = reader(FamilySink(split, "sites"), SITES, 10_000, joint.party(1), log, False)
        pages = reader(FamilySink(split, None, ("sites",)), PAGES, 40, joint.party(0), log, True)
        one = reader(whole, None, 10_000, lambda _: asyncio.sleep(0), log, False)
        for start in range(0, 300, 20):  # the consumer's lists, partition by partition, as fetched
            for tp, recs in log.items():
                taken = [(o, v, Handle(*tp, o), 0) for o, v in recs[start : start + 20]]
                for f in (sites, pages, one):
                    assert await f.receive_many(tp, taken)
        assert pages.let_go is not None
        let_go = pages.let_go.ranges
        assert let_go.let_go > 0
        while let_go.start:
            await asyncio.sleep(0.01)
        for f in (sites, pages, one):
            await f.flush()
        return split, whole, let_go.reread

    split, whole, reread = asyncio.run(scenario())
    assert counters(split) == counters(whole)
    assert reread > 0 and sorted(acked) == sorted({(*tp, o) for tp in log for o in range(300)})


def test_a_list_waiting_for_room_to_be_let_go_of_is_not_taken_once_released() -> None:
    """A rebalance or a stop releases what was let go of: a list waiting past the bound is left
    to be read again after it, not let go of (nothing would read it again)."""
    log = {P0: [(o, hit(f"/p{o}", NOW - 5000 + o)) for o in range(100)]}

    async def nothing(_: Sequence[object]) -> None:
        return None

    async def scenario() -> tuple[bool, dict[tuple[str, int], int]]:
        pages = reader(FamilySink(MarkStore(), None, ("sites",)), PAGES, 10, nothing, log, True)
        assert pages.let_go is not None
        pages.let_go.ranges.add(P0, 0, 9, 10)  # as if let go of, and the bound reached
        pages.let_go.start = lambda: None  # type: ignore[method-assign]  # nothing reads again
        waiting = asyncio.ensure_future(pages.receive_many(P0, [(o, v, None, 0) for o, v in log[P0][10:20]]))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        released = pages.release()
        return await waiting, released

    taken, released = asyncio.run(scenario())
    assert taken is False and released == {P0: 0}


def test_a_list_handed_over_after_a_release_is_not_taken_past_the_records_let_go_of() -> None:
    """A list delivered before a rebalance can reach the pages' reader after its ranges were released
    (it waited behind the rollups' reader). Taken, it would be counted past the records let go of and
    its flush would move the ledger over them: it is refused until the partition is read again from
    the released range's start, and an assignment without the partition lifts the fence."""
    log = {P0: [(o, hit(f"/p{o}", NOW - 5000 + o)) for o in range(100)]}
    store, whole = MarkStore(), MarkStore()

    async def nothing(_: Sequence[object]) -> None:
        return None

    def listed(lo: int, hi: int) -> list[Any]:
        return [(o, v, None, 0) for o, v in log[P0][lo:hi]]

    async def scenario() -> tuple[bool, bool, bool, Flusher[Any]]:
        one = reader(FamilySink(whole, None, ("sites",)), PAGES, 1_000, nothing, log, False)
        assert await one.receive_many(P0, listed(0, 60))
        await one.flush()
        pages = reader(FamilySink(store, None, ("sites",)), PAGES, 1_000, nothing, log, True)
        assert pages.let_go is not None
        assert await pages.receive_many(P0, listed(0, 30))
        pages.let_go.start = lambda: None  # type: ignore[method-assign]  # nothing reads again
        pages.let_go.ranges.add(P0, 30, 49, 20)  # let go of at the bound
        assert pages.release() == {P0: 30}
        late = await pages.receive_many(P0, listed(50, 60))  # delivered before the rebalance
        again = await pages.receive_many(P0, listed(30, 60))  # the consumer sought back to 30
        await pages.flush()
        pages.let_go.ranges.add(P0, 60, 69, 10)
        pages.release()
        pages.forget_positions([], held=[P1])  # assigned elsewhere: the fence goes
        elsewhere = P0 not in pages.let_go.ranges.fenced
        return late, again, elsewhere, pages

    late, again, elsewhere, pages = asyncio.run(scenario())
    assert late is False and again is True and elsewhere
    assert pages.let_go is not None and pages.let_go.ranges.fenced_records == 10
    assert counters(store) == counters(whole)  # offsets 0 to 59, each once
