"""Flush protocol without servers: order, retries, backpressure bound, replay skipping, fences.

The store is an in-memory model of MongoDB's side of the protocol (counters plus
offsets documents, all-or-nothing commits); the real store is exercised by the
integration and chaos tests.
"""

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from pymongo.errors import BulkWriteError, ExecutionTimeout, OperationFailure, PyMongoError

from pipeline.core.commit import Committed, Fence, FenceConflict, Ledgers, check_fences
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.aggregate import HitCounts
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import hits_fields
from pipeline.settings import Settings
from pipeline.store.errors import mongo_failure
from pipeline.worker.bounds import CommitBound
from pipeline.worker.deadletter import DeadLetter
from pipeline.worker.flusher import Flusher
from pipeline.worker.policy import FlushHooks, FlushPolicy

from .checks import Checks

TP0 = ("hits", 0)


class ModelStore:
    """Counters and offsets documents with atomic commits, like one MongoDB transaction."""

    exactly_once = True
    #: Failures read as MongoDB's adapter reads them (these stores raise PyMongo's errors).
    failure = staticmethod(mongo_failure)

    def __init__(self, log: list[str], fail_commits: int = 0, too_large_above: int = 0) -> None:
        self.log = log
        self.fail_commits = fail_commits
        #: Commits of more documents than this fail as MongoDB's TransactionTooLargeForCache (0: never).
        self.too_large_above = too_large_above
        #: Documents of every commit attempt, and the fences of every successful one.
        self.attempts: list[int] = []
        self.committed_fences: list[list[Fence]] = []
        self.counters: dict[str, Counter[str]] = {}
        self.offsets: dict[tuple[str, int], dict[str, Any]] = {}
        self.lose_ack_once = False
        #: Commits that apply, then fail as too slow (outcome unknown to the worker).
        self.time_out_after_commit = 0
        #: The commit token each commit attempt asked for.
        self.tokens: list[str | None] = []

    async def ledgers(self, tps: Sequence[tuple[str, int]]) -> Ledgers:
        return Ledgers({tp: self.offsets.get(tp, {}).get("next") for tp in tps}, {})

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked: bool = False,
        forward: Any = None,
    ) -> Committed:
        docs = len({u.id for u in updates})
        self.tokens.append(token)
        self.attempts.append(docs)
        if self.fail_commits > 0:
            self.fail_commits -= 1
            self.log.append("commit-failed")
            raise ConnectionError("store down")
        if self.too_large_above and docs > self.too_large_above:
            self.log.append("too-large")
            raise OperationFailure("transaction too large for cache", code=388)
        if check_fences(fences, self.offsets, flush_id):
            self.log.append("already")
            return Committed(already=True)
        for u in updates:
            self.counters.setdefault(u.id, Counter()).update(u.inc)
        for f in fences:
            self.offsets[(f.topic, f.partition)] = {"next": f.next, "flush": flush_id}
        self.committed_fences.append(list(fences))
        self.log.append(f"commit:{sum(1 for u in updates if u.collection != 'preagg_ops')}")
        if self.lose_ack_once:
            self.lose_ack_once = False
            raise ConnectionError("commit acknowledgement lost")
        if self.time_out_after_commit:
            self.time_out_after_commit -= 1
            # The commit applied, then its answer came too late: MaxTimeMSExpired during
            # commitTransaction, labelled UnknownTransactionCommitResult by the driver.
            raise ExecutionTimeout("operation exceeded time limit", code=50)
        return Committed(False, 100 * docs)

    async def outcome(self, fences: Sequence[Fence], flush_id: str) -> bool:
        self.log.append("outcome")
        return check_fences(fences, self.offsets, flush_id)

    def total(self) -> int:
        return sum(
            c["total"] for k, c in self.counters.items() if k.count("/") >= 2 and len(k.split("/")[0]) == 8
        )


def hit(ts: int = 1, page: str = "/") -> bytes:
    return b'{"site":"s","page":"%s","ts":%d}' % (page.encode(), ts)


def make(
    store: ModelStore | None = None,
    bound: int = 1000,
    own_log: bool = False,
    commit: CommitBound | None = None,
) -> tuple[Flusher[HitCounts], list[str], ModelStore]:
    """A flusher on ``store``; its log is the store's unless ``own_log``."""
    log: list[str] = [] if own_log or store is None else store.log
    store = store or ModelStore(log)

    async def send_dead(letters: Sequence[DeadLetter]) -> None:
        log.append(f"dead:{len(letters)}")

    async def ack(handles: Sequence[object]) -> None:
        log.extend(f"ack:{handle}" for handle in handles)

    def fenced(conflict: FenceConflict) -> None:
        log.append("fenced")

    dec = HitDecoder(1000, 300, clock=lambda: 2e9)
    f: Flusher[HitCounts] = Flusher(
        "hits",
        lambda: HitCounts(dec, hits_fields("readable")),
        store,
        send_dead,
        ack,
        FlushPolicy(max_pending_keys=bound, max_backoff=0.01),
        commit,
        FlushHooks(on_fenced=fenced),
    )
    return f, log, store


async def feed(f: Flusher[HitCounts], offsets: range, tp: tuple[str, int] = TP0) -> None:
    for o in offsets:
        await f.receive(tp, o, hit(ts=60 * o), f"m{o}")


def test_order_is_deadletters_commit_then_ack() -> None:
    f, log, store = make()

    async def go() -> None:
        await f.receive(TP0, 10, hit() + b"\nbad", "m10")
        await f.receive(TP0, 11, hit(2), "m11")
        assert f.batch.offsets == {TP0: (10, 11)}
        await f.flush()
        await f.flush()  # nothing pending: nothing written

    asyncio.run(go())
    assert log == ["dead:1", "commit:6", "ack:m10", "ack:m11"]
    assert store.offsets[TP0]["next"] == 12
    assert f.stats.events == 3 and f.stats.rejected == {"invalid_json": 1}


def test_failed_commit_is_retried_and_nothing_acked_before_success() -> None:
    f, log, _ = make(ModelStore([], fail_commits=2))

    async def go() -> None:
        await f.receive(("hits", 1), 5, hit(), "m5")
        await f.flush()

    asyncio.run(go())
    assert log == ["commit-failed", "commit-failed", "commit:6", "ack:m5"]
    assert f.stats.retries == 2


def test_replayed_messages_below_the_stored_position_are_skipped() -> None:
    """A crash after MongoDB's commit and before Kafka's: the new worker skips what is counted."""
    store = ModelStore([])
    first, _, _ = make(store)

    async def go() -> None:
        await feed(first, range(0, 5))
        await first.flush()
        # Kafka's committed offset is lost with the crash: everything is delivered again.
        second, _, _ = make(store)
        await feed(second, range(0, 8))
        assert second.batch.skipped == 5 and second.batch.events == 3
        await second.flush()

    asyncio.run(go())
    assert store.total() == 8
    assert store.offsets[TP0]["next"] == 8


def test_zombie_batch_fails_its_fence_and_changes_nothing() -> None:
    store = ModelStore([])
    zombie, zlog, _ = make(store, own_log=True)
    owner, _, _ = make(store, own_log=True)

    async def go() -> None:
        await feed(zombie, range(0, 4))
        await feed(owner, range(0, 6))  # the partition moved; the new owner counts first
        await owner.flush()
        await zombie.flush()

    asyncio.run(go())
    assert "fenced" in zlog and not any(e.startswith("ack") for e in zlog)
    assert store.total() == 6


def test_lost_commit_acknowledgement_is_not_applied_twice() -> None:
    f, log, store = make()
    store.lose_ack_once = True

    async def go() -> None:
        await feed(f, range(0, 3))
        await f.flush()

    asyncio.run(go())
    assert log[:2] == ["commit:6", "already"]
    assert store.total() == 3 and f.stats.replayed_commits == 1


def test_backpressure_flushes_before_passing_the_bound() -> None:
    f, log, _ = make(bound=2)

    async def go() -> None:
        for i, page in enumerate(["/a", "/b", "/c", "/d", "/e"]):
            await f.receive(TP0, i, hit(page=page), f"m{i}")
            assert f.pending_keys() <= 2

    asyncio.run(go())
    assert f.stats.backpressure_pauses == 2
    assert log.count("ack:m0") == 1


def test_fence_checks() -> None:
    fences = [Fence("t", 0, 10, 20)]
    assert check_fences(fences, {("t", 0): {"next": 10}}, "f1") is False
    assert check_fences(fences, {("t", 0): {"next": 20, "flush": "f1"}}, "f1") is True
    with pytest.raises(FenceConflict, match=r"t\[0\] expected 10 found 20"):
        check_fences(fences, {("t", 0): {"next": 20, "flush": "other"}}, "f1")
    assert check_fences([Fence("t", 1, None, 5)], {}, "f1") is False
    with pytest.raises(FenceConflict):
        check_fences([Fence("t", 1, None, 5)], {("t", 1): {"next": 3}}, "f1")


def test_first_message_beyond_the_stored_position_reports_a_gap() -> None:
    """Kafka's committed offset ahead of MongoDB's: the worker must not count from there."""
    store = ModelStore([])
    store.offsets[TP0] = {"next": 5, "flush": "x"}
    gaps: list[tuple[tuple[str, int], int, int]] = []

    async def on_gap(tp: tuple[str, int], stored: int, offset: int) -> None:
        gaps.append((tp, stored, offset))

    f, _, _ = make(store)
    f.gate.checks = Checks(on_gap_fn=on_gap)

    async def go() -> None:
        await f.receive(TP0, 9, hit(), "m9")
        await f.receive(TP0, 10, hit(), "m10")  # only the first message after a load is checked
        f.forget_positions([TP0])
        await f.receive(TP0, 5, hit(), "m5")  # at the stored position: no gap

    asyncio.run(go())
    assert gaps == [(TP0, 5, 9)]


def test_a_failing_gap_probe_is_retried_and_counted_not_raised_into_the_fetcher() -> None:
    store = ModelStore([])
    store.offsets[TP0] = {"next": 5, "flush": "x"}
    calls: list[int] = []

    async def on_gap(tp: tuple[str, int], stored: int, offset: int) -> None:
        calls.append(offset)
        if len(calls) < 3:
            raise TimeoutError("hits[0]: no record read within 5s")

    f, _, _ = make(store)
    f.gate.checks = Checks(on_gap_fn=on_gap)
    asyncio.run(f.receive(TP0, 9, hit(), "m9"))
    assert calls == [9, 9, 9] and f.stats.retries == 2 and f.uncommitted_events() == 1


def test_a_probe_that_runs_out_of_time_is_an_error_not_an_empty_range() -> None:
    """A timed-out look read as "records in between" restarted the worker in a loop."""
    from aiokafka import TopicPartition

    from pipeline.kafka.options import KafkaConnection
    from pipeline.kafka.probe import PartitionProbe

    class Slow:
        async def getmany(self, *a: Any, **k: Any) -> dict[Any, Any]:
            await asyncio.sleep(0.01)
            return {}

        def highwater(self, tp: Any) -> None:
            return None

    probe = PartitionProbe(KafkaConnection.of(Settings(kafka_url="127.0.0.1:1")), timeout=0.1)
    with pytest.raises(TimeoutError):
        asyncio.run(probe._first(Slow(), TopicPartition("hits", 0), 0, 10))  # type: ignore[arg-type]


def test_name_store_failures_are_retried_before_the_commit_and_nothing_is_lost() -> None:
    """The batch's tokens are resolved first; a name-store outage holds the batch, it never drops it."""
    store = ModelStore([])
    log = store.log
    calls = {"n": 0}

    class Keys:
        def keys(self, site: str, name: str, value: str) -> tuple[str, str]:
            return "0", "0"

    async def prepare(agg: HitCounts) -> None:
        calls["n"] += 1
        if calls["n"] <= 2:
            log.append("names-failed")
            raise ConnectionError("name store down")
        log.append(f"names:{sorted(agg.prop_pairs()['s'])}")

    async def noop(*_: object) -> None:
        return None

    async def ack(handles: Sequence[object]) -> None:
        log.extend(f"ack:{handle}" for handle in handles)

    dec = HitDecoder(1000, 300, clock=lambda: 2e9)
    f: Flusher[HitCounts] = Flusher(
        "hits",
        lambda: HitCounts(dec, hits_fields("readable"), Keys()),
        store,
        noop,
        ack,
        FlushPolicy(max_pending_keys=100, max_backoff=0.01),
        hooks=FlushHooks(before_plan=prepare, before_plan_label="name store"),
    )

    async def go() -> None:
        await f.receive(TP0, 0, b'{"site":"s","page":"/","ts":60,"props":{"k":"v"}}', "m0")
        await f.flush()

    asyncio.run(go())
    assert log == ["names-failed", "names-failed", "names:[('k', 'v')]", "commit:6", "ack:m0"]
    assert f.stats.retries == 2


async def drain(f: Flusher[HitCounts]) -> None:
    """Flush as the flush loop does, tick after tick, until nothing is pending.

    While sealed batches wait, a flush commits them and leaves the batch being filled
    to grow; the next tick seals it.
    """
    while f.pending_keys():
        await f.flush()


def day_hit(day: int, page: str = "/") -> bytes:
    """A hit on ``page`` on day ``day`` (one new daily and monthly document per day and page)."""
    return hit(ts=86_400 * (20_000 + day), page=page)


def assert_contiguous(store: ModelStore, tp: tuple[str, int], first: int, end: int) -> None:
    """The committed fences of ``tp`` chain from ``first`` to ``end`` with neither gap nor overlap."""
    fences = [f for fs in store.committed_fences for f in fs if (f.topic, f.partition) == tp]
    assert fences, "nothing committed"
    assert fences[0].expected in (None, first)
    for a, b in itertools.pairwise(fences):
        assert b.expected == a.next
    assert fences[-1].next == end


def test_batch_is_sealed_at_the_document_bound_and_fences_stay_contiguous() -> None:
    """A backlog of many documents becomes several bounded commits, one after another per partition."""
    f, _, store = make(commit=CommitBound(max_docs=20, max_bytes=10**9, target_seconds=60))
    tp1 = ("hits", 1)

    async def go() -> None:
        for o in range(100):  # each message touches a new daily + monthly document
            await f.receive(TP0 if o % 3 else tp1, o, day_hit(o), f"m{o}")
        await drain(f)

    asyncio.run(go())
    assert f.stats.sealed >= 4
    assert max(store.attempts) <= 20, store.attempts
    assert store.total() == 100 and f.stats.events == 100
    assert_contiguous(store, TP0, 1, 99)
    assert_contiguous(store, tp1, 0, 100)


def test_batch_is_sealed_at_the_byte_bound_once_bytes_per_item_are_known() -> None:
    bound = CommitBound(max_docs=10**6, max_bytes=1_000, target_seconds=60)
    f, _, store = make(commit=bound)

    async def go() -> None:
        await feed(f, range(0, 3))
        await f.flush()  # learns the bytes per document from the commit's reported size
        assert bound.bytes_per_doc > 0
        for o in range(3, 60):
            await f.receive(TP0, o, day_hit(o), f"m{o}")
        await drain(f)

    asyncio.run(go())
    # the model store reports 100 bytes per document: sealed at 10 documents (+ one message's 2)
    assert max(store.attempts[1:]) <= 1_000 // 100 + 2, store.attempts
    assert f.stats.sealed >= 2 and store.total() == 60
    assert_contiguous(store, TP0, 0, 60)


def test_too_large_commit_is_split_not_resent_and_the_bound_shrinks() -> None:
    """TransactionTooLargeForCache: the next attempts are halves, never the same batch again."""
    store = ModelStore([], too_large_above=12)
    f, log, _ = make(store, commit=CommitBound(max_docs=10_000, max_bytes=10**9, target_seconds=60))

    async def go() -> None:
        for o in range(40):
            await f.receive(TP0, o, day_hit(o), f"m{o}")
        await drain(f)

    asyncio.run(go())
    first = store.attempts[0]
    assert first > 12 and store.attempts.count(first) == 1  # never resent as it was
    # each too-large batch was tried once and replaced by its two halves, which fit or split again
    failed = [a for a in store.attempts if a > 12]
    assert len(store.attempts) == 2 * len(failed) + 1 and len(failed) == f.stats.splits
    assert f.stats.splits >= 1 and f.bound.docs_limit <= 40
    assert store.total() == 40 and [e for e in log if e.startswith("ack")] == [f"ack:m{o}" for o in range(40)]
    assert_contiguous(store, TP0, 0, 40)


def test_a_message_too_large_alone_is_logged_counted_and_retried() -> None:
    """One message cannot be split: a clear, counted condition, retried with backoff, never dropped."""
    store = ModelStore([], too_large_above=3)
    f, _, _ = make(store, commit=CommitBound(max_docs=10_000, max_bytes=10**9, target_seconds=60))
    packed = b"\n".join(day_hit(d) for d in range(4))  # 8 documents in one message

    async def go() -> None:
        await f.receive(TP0, 0, packed, "m0")
        task = asyncio.create_task(f.flush())
        while f.stats.unsplittable < 3:
            await asyncio.sleep(0.01)
        store.too_large_above = 0  # the operator raised the store's limit
        await task

    asyncio.run(go())
    assert f.stats.unsplittable >= 3 and f.stats.retries >= 3 and f.stats.splits == 0
    assert store.total() == 4


def test_a_message_too_large_alone_is_escalated_after_a_bound_then_clears() -> None:
    """Retried for ever with liveness green. Now escalated after 5 attempts."""
    store = ModelStore([], too_large_above=3)
    f, _, _ = make(store, commit=CommitBound(max_docs=10_000, max_bytes=10**9, target_seconds=60))
    noted: list[str | None] = []

    async def on_stuck(tps: Sequence[tuple[str, int]], reason: str | None) -> None:
        noted.append(reason)

    f.retry.on_stuck = on_stuck
    packed = b"\n".join(day_hit(d) for d in range(4))

    async def go() -> None:
        await f.receive(TP0, 0, packed, "m0")
        task = asyncio.create_task(f.flush())
        while f.stuck is None:
            await asyncio.sleep(0.01)
        assert "too large or too slow" in f.stuck and f.stats.permanent_errors == 1
        store.too_large_above = 0  # the operator raised the store's limit
        await task

    asyncio.run(go())
    assert f.stuck is None and noted[0] and noted[-1] is None and store.total() == 4


def test_a_programming_error_inside_a_commit_is_escalated_not_retried_unseen() -> None:
    """A TypeError in the commit step (a bug: the same call fails again) is retried, and
    escalated after the permanent errors' bound like one; fixed, the flush goes through."""
    store = ModelStore([])
    f, _, _ = make(store)
    real = store.commit
    broken = True

    async def commit(*args: object, **kwargs: object) -> object:
        if broken:
            raise TypeError("commit() got an unexpected keyword argument 'forward'")
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    store.commit = commit  # type: ignore[method-assign]
    f.retry.max_backoff = 0.01

    async def go() -> None:
        nonlocal broken
        await f.receive(TP0, 0, day_hit(0), "m0")
        task = asyncio.create_task(f.flush())
        while f.stuck is None:
            await asyncio.sleep(0.01)
        assert f.stuck.startswith("a bug, TypeError") and f.stats.permanent_errors == 1
        broken = False
        await task

    asyncio.run(go())
    assert f.stuck is None and store.total() == 1


def test_slow_commits_lower_the_document_bound_and_fast_ones_raise_it() -> None:
    b = CommitBound(max_docs=2000, max_bytes=10**9, target_seconds=5.0)
    b.committed(docs=2000, size=10**6, seconds=10.0)
    assert b.docs_limit == 900
    for _ in range(20):
        b.committed(docs=b.docs_limit, size=10**5, seconds=0.5)
    assert b.docs_limit == 2000
    b.failed(docs=1000)
    assert b.docs_limit == 500


def test_a_diverged_partition_is_held_back_and_reported_others_are_counted() -> None:
    """Its messages are acked for Kafka only; the ledger keeps saying 'not counted'."""
    from pipeline.core.incarnation import Verdict

    f, _log, store = make()
    store.offsets[TP0] = {"next": 40, "flush": "old"}
    tp1 = ("hits", 1)
    checked: list[tuple[str, int]] = []
    reported: list[tuple[str, int]] = []

    async def check(tp: tuple[str, int]) -> Verdict:
        checked.append(tp)
        return Verdict("diverged", "log ends at 3") if tp == TP0 else Verdict("same", "")

    async def on_diverged(tp: tuple[str, int], verdict: Verdict) -> None:
        reported.append(tp)

    f.gate.checks = Checks(check, on_diverged)

    async def run() -> None:
        await feed(f, range(3))  # a recreated log: offsets below the ledger's 40
        await feed(f, range(2), tp1)
        await f.flush()

    asyncio.run(run())
    assert f.diverged == {TP0: "log ends at 3"} and reported == [TP0]
    assert checked == [TP0, tp1]  # once per partition, not per message
    assert f.stats.held_back == 3 and f.positions.skipped == 0
    assert store.offsets[TP0]["next"] == 40 and store.offsets[tp1]["next"] == 2
    assert store.total() == 2
    f.forget_positions([TP0])
    assert not f.diverged  # checked again on its next assignment


def test_the_consumer_moving_backwards_is_checked_again() -> None:
    from pipeline.core.incarnation import Verdict

    f, _log, store = make()
    outcomes = iter([Verdict("same", ""), Verdict("diverged", "reset to earliest")])
    calls = []

    async def check(tp: tuple[str, int]) -> Verdict:
        calls.append(tp)
        return next(outcomes)

    f.gate.checks = Checks(check)

    async def run() -> None:
        await feed(f, range(5))
        await f.flush()
        await feed(f, range(2))  # the consumer's position went back (OffsetOutOfRange -> earliest)

    asyncio.run(run())
    assert len(calls) == 2 and TP0 in f.diverged and store.offsets[TP0]["next"] == 5


def test_write_conflicts_are_counted_and_retried() -> None:
    """Two workers' transactions on one document: the loser retries, and the conflict is counted."""
    f, _log, store = make()
    conflicts = iter([True, True])
    original = store.commit

    async def commit(
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked: bool = False,
        forward: Any = None,
    ) -> Committed:
        if next(conflicts, False):
            store.tokens.append(token)
            raise OperationFailure("WriteConflict", code=112)
        return await original(updates, fences, flush_id, token)

    store.commit = commit  # type: ignore[method-assign]

    async def run() -> None:
        await feed(f, range(3))
        await f.flush()

    asyncio.run(run())
    assert f.stats.write_conflicts == 2 and store.offsets[TP0]["next"] == 3
    # The first attempt took no token; after the first conflict every commit takes it.
    assert store.tokens[0] is None and set(store.tokens[1:]) == {"hits"} and f.contended()
    assert store.tokens == [None, "hits", "hits"] and f.stats.token_commits == 2


def test_a_commit_that_applied_but_timed_out_is_not_split_into_fenced_halves() -> None:
    """Unknown outcome: read the ledger before splitting (halves of a committed batch fail their fences)."""
    store = ModelStore([])
    store.time_out_after_commit = 1
    f, log, _ = make(store, commit=CommitBound(max_docs=10_000, max_bytes=10**9, target_seconds=60))

    async def go() -> None:
        for o in range(10):
            await f.receive(TP0, o, day_hit(o), f"m{o}")
        await drain(f)

    asyncio.run(go())
    assert "fenced" not in log and f.stats.splits == 0 and f.stats.unknown_outcomes == 1
    assert log.count("outcome") == 1 and store.total() == 10
    assert [e for e in log if e.startswith("ack")] == [f"ack:m{o}" for o in range(10)]
    assert_contiguous(store, TP0, 0, 10)


def test_a_slow_commit_that_did_not_apply_is_still_split() -> None:
    store = ModelStore([], too_large_above=5)
    f, log, _ = make(store, commit=CommitBound(max_docs=10_000, max_bytes=10**9, target_seconds=60))

    async def go() -> None:
        for o in range(10):
            await f.receive(TP0, o, day_hit(o), f"m{o}")
        await drain(f)

    asyncio.run(go())
    assert f.stats.splits >= 1 and "outcome" in log and "fenced" not in log and store.total() == 10


def test_commit_transaction_is_run_again_while_its_outcome_is_unknown() -> None:
    from pipeline.store.sink import MongoSink
    from pipeline.store.statements import COMMIT_RETRIES, UNKNOWN_COMMIT
    from pipeline.store.transaction_commit import TransactionCommit

    class Session:
        def __init__(self, failures: int) -> None:
            self.failures = failures
            self.calls = 0

        async def commit_transaction(self) -> None:
            self.calls += 1
            if self.calls <= self.failures:
                raise PyMongoError("connection reset during commit", error_labels=[UNKNOWN_COMMIT])

    sink = object.__new__(MongoSink)
    sink.unknown_commits = 0
    txn = TransactionCommit(sink)
    ok = Session(failures=COMMIT_RETRIES - 1)
    asyncio.run(txn.commit_transaction(ok))  # type: ignore[arg-type]
    assert ok.calls == COMMIT_RETRIES and sink.unknown_commits == COMMIT_RETRIES - 1
    down = Session(failures=99)
    with pytest.raises(PyMongoError):
        asyncio.run(txn.commit_transaction(down))  # type: ignore[arg-type]
    assert down.calls == COMMIT_RETRIES  # bounded

    class Refused(Session):
        async def commit_transaction(self) -> None:
            self.calls += 1
            raise OperationFailure("WriteConflict", code=112)

    refused = Refused(0)
    with pytest.raises(OperationFailure):
        asyncio.run(txn.commit_transaction(refused))  # type: ignore[arg-type]
    assert refused.calls == 1  # a certain failure is not retried here


def test_the_split_rule_does_not_read_the_error_message() -> None:
    """A timeout after the ping answered is a slow commit whatever the host name's length."""
    from pymongo.errors import NetworkTimeout

    from pipeline.store.errors import StoreUnreachable, shrinks

    long_host = "a" * 100 + ".example:27017"
    assert shrinks(
        NetworkTimeout(f"{long_host}: timed out (configured timeouts: connectTimeoutMS: 20000.0ms)")
    )
    assert shrinks(NetworkTimeout("h:1: timed out"))
    assert not shrinks(StoreUnreachable(f"{long_host}: connection refused"))


def test_abandon_drops_uncommitted_batches_unacked_and_cancels_the_commit_in_flight() -> None:
    """A rebalance past its drain bound: nothing dropped is acked, later messages commit as usual."""

    class HangingStore(ModelStore):
        def __init__(self, log: list[str]) -> None:
            super().__init__(log)
            self.hang = True
            self.entered = asyncio.Event()

        async def commit(
            self,
            updates: Any,
            fences: Any,
            flush_id: str,
            token: str | None = None,
            marked: bool = False,
            forward: Any = None,
        ) -> Committed:
            if self.hang:
                self.entered.set()
                await asyncio.Event().wait()  # the store does not answer
            return await super().commit(updates, fences, flush_id, token)

    store = HangingStore([])
    f, log, _ = make(store, bound=4)

    async def go() -> tuple[int, bool]:
        for o in range(3):
            await f.receive(TP0, o, hit(ts=60 * o), f"m{o}")
        flushing = asyncio.create_task(f.run_flush())
        await store.entered.wait()
        # A consumer at the memory bound waits for that flush, with a list of 3 more messages.
        waiting = asyncio.create_task(
            f.receive_many(TP0, [(o, hit(ts=60 * o), f"m{o}", 0) for o in (3, 4, 5, 6, 7)])
        )
        await asyncio.sleep(0.05)
        dropped = await f.abandon()
        await flushing  # returns: abandoned, not cancelled itself
        await waiting  # returns without ingesting the rest of its list
        empty = f.uncommitted_events() == 0 and not f.sealed and f.in_flight is None
        store.hang = False
        # After the rebalance the records are read again from Kafka's committed offset (0).
        await feed(f, range(8))
        await drain(f)
        return dropped, empty

    dropped, empty = asyncio.run(go())
    assert dropped >= 3 and empty and f.stats.abandons == 1
    acks = [e for e in log if e.startswith("ack")]
    assert acks == [f"ack:m{o}" for o in range(8)]  # each once, only after the real commit
    assert store.total() == 8
    assert_contiguous(store, TP0, 0, 8)


def test_health_reports_a_flush_running_longer_than_its_bound() -> None:
    """A flush held a minute by the name store read "ok" until it ended."""
    from pipeline.worker.metrics import health

    f, _, _ = make()
    now = 1_000_000.0
    f.stats.last_flush_at = now - 1  # the last one ended a second ago
    assert health([f], 30.0, now - 100, now=now)["ok"]
    f.stats.flush_started_at = now - 31  # the one running now began 31 s ago
    verdict = health([f], 30.0, now - 100, now=now)
    assert not verdict["ok"] and verdict["streams"]["hits"]["flush_running_seconds"] == 31.0


def test_health_allows_a_backlog_its_deferred_flushes() -> None:
    """Catching up, a stream flushes every PREAGG_BACKLOG_FLUSH_INTERVAL: not stale for that."""
    from pipeline.worker.metrics import health

    f, _, _ = make()
    asyncio.run(feed(f, range(3)))
    now = 1_000_000.0
    f.stats.last_flush_at = now - 40
    assert not health([f], 30.0, now - 100, now=now, backlog_interval=20.0)["ok"]
    f.deferring = True
    assert health([f], 30.0, now - 100, now=now, backlog_interval=20.0)["ok"]


def test_a_stale_flush_is_one_with_events_waiting_never_a_quiet_stream() -> None:
    """``preagg_flush_stale`` (what the paging alert reads) says what readiness says: an old last
    flush with nothing pending (a quiet night, a worker holding no partition) is not stale."""
    from prometheus_client.parser import text_string_to_metric_families

    from pipeline.worker.metrics import WorkerCollector, exposition

    f, _, _ = make()
    now = time.time()
    f.stats.last_flush_at = now - 3600

    def stale() -> float:
        text = exposition(WorkerCollector([f], dict, now - 7200, max_flush_age=30.0)).decode()
        (family,) = [m for m in text_string_to_metric_families(text) if m.name == "preagg_flush_stale"]
        (sample,) = family.samples
        assert sample.labels == {"stream": "hits"}
        return sample.value

    assert stale() == 0.0  # an hour without a flush, nothing to flush
    asyncio.run(feed(f, range(3)))
    assert stale() == 1.0  # events counted an hour after the last flush, not written


class RefusingStore(ModelStore):
    """A store on which one document cannot be written (a manual edit made its counter a string)."""

    def __init__(self, log: list[str], refused: str) -> None:
        super().__init__(log)
        self.refused = refused

    async def commit(
        self, updates: Sequence[DocUpdate], fences: Sequence[Fence], *a: Any, **k: Any
    ) -> Committed:
        for i, u in enumerate(updates):
            if self.refused in str(u.id):
                self.log.append("refused")
                err = {"index": i, "code": 14, "errmsg": "Cannot apply $inc to a value of non-numeric type"}
                raise BulkWriteError({"writeErrors": [err], "op": {"q": {"_id": u.id}}})
        return await super().commit(updates, fences, *a, **k)


def test_a_message_the_store_refuses_for_good_is_dead_lettered_alone_in_transactions() -> None:
    """A permanent write error halves the batch down to the one message whose
    document is refused; its events are dead-lettered ('unwritable'), every other one counted."""
    store = RefusingStore([], refused="/bad")
    f, log, _ = make(store, commit=CommitBound(max_docs=10_000, max_bytes=10**9, target_seconds=60))
    letters: list[DeadLetter] = []

    async def send_dead(dead: Sequence[DeadLetter]) -> None:
        letters.extend(dead)

    f.committer.send_dead = send_dead

    async def go() -> None:
        for o in range(10):
            await f.receive(TP0, o, hit(ts=60 * o, page="/bad" if o == 5 else f"/p{o}"), f"m{o}")
        await drain(f)

    asyncio.run(go())
    assert [(d.rejection.reason, d.offset) for d in letters] == [("unwritable", 5)]
    assert "TypeMismatch" in letters[0].rejection.detail
    assert store.total() == 9 and f.stats.unwritable == 1
    assert [e for e in log if e.startswith("ack")] == [f"ack:m{o}" for o in range(10)]
    assert_contiguous(store, TP0, 0, 10)


def test_a_stream_is_busy_while_it_writes_and_through_a_backlog_until_it_catches_up() -> None:
    """The hits' stored visitor numbers wait while the stream is busy: counting between two
    commits of a backlog re-read every page the next commit wrote again."""
    f, _, _ = make()
    told: list[bool] = []
    f.hooks = replace(f.hooks, on_busy=told.append)

    async def go() -> None:
        await feed(f, range(3))
        await f.flush()  # a live flush: busy while it writes, then not
        assert told == [True, False]
        f.deferring = True  # the flush loop found the stream far behind its partitions' ends
        await feed(f, range(3, 6))
        await f.flush(sealed_only=True)  # nothing sealed: the batch grows, and the stream is busy
        await f.flush()
        assert told == [True, False, True]
        f.deferring = False  # caught up
        await f.flush()  # nothing to write: told once, not busy
        await f.flush()

    asyncio.run(go())
    assert told == [True, False, True, False]
