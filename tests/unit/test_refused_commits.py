"""Offset commits Kafka refused are asked for again (Faust 0.15 records them as committed)."""

from __future__ import annotations

from pipeline.worker.refused import RefusedCommits


def test_a_refused_commit_is_asked_again_until_kafka_takes_it() -> None:
    r: RefusedCommits[str] = RefusedCommits()
    assert r.refused({"t0": 10, "t1": 4}, assigned={"t0", "t1"}) == ["t0", "t1"]
    # the next commit: no new acks on t0, a later one on t1: both are asked for
    assert r.with_refused({"t1": 7}, assigned={"t0", "t1"}) == {"t0": 10, "t1": 7}
    assert r.committed({"t0": 10, "t1": 7}) == ["t0", "t1"]
    assert r.with_refused({}, assigned={"t0", "t1"}) == {}
    assert r.refusals == 1


def test_a_refusal_of_a_partition_no_longer_held_is_its_next_owners() -> None:
    r: RefusedCommits[str] = RefusedCommits()
    assert r.refused({"t0": 10, "t1": 4}, assigned={"t1"}) == ["t1"]
    assert r.with_refused({}, assigned={"t1"}) == {"t1": 4}
    r.revoked({"t1"})
    assert r.with_refused({}, assigned={"t0", "t1"}) == {}


def test_refusals_keep_the_furthest_offset_and_a_smaller_commit_does_not_end_them() -> None:
    r: RefusedCommits[str] = RefusedCommits()
    r.refused({"t0": 10}, assigned={"t0"})
    r.refused({"t0": 8}, assigned={"t0"})
    assert r.with_refused({"t0": 9}, assigned={"t0"}) == {"t0": 10}
    assert r.committed({"t0": 9}) == []
    assert r.with_refused({}, assigned={"t0"}) == {"t0": 10}
    assert r.refusals == 2


def test_the_workers_consumer_puts_back_what_faust_recorded_and_asks_again() -> None:
    """Faust's own ``_commit_offsets`` runs; only Kafka's answer (``_commit``) is made up."""
    import asyncio
    import logging
    from collections import defaultdict
    from types import SimpleNamespace
    from typing import Any

    from faust.types import TP

    from pipeline.worker.consumer import WorkerConsumer

    tp = TP("hits", 1)
    answers = [False, True]  # refused ("already rebalanced"), then taken
    sent: list[dict[Any, int]] = []

    async def commit(offsets: Any) -> bool:
        sent.append(dict(offsets))
        return answers.pop(0)

    async def flush() -> None:
        return None

    class Probe(WorkerConsumer):
        in_transaction = False  # type: ignore[assignment]

    c: Any = object.__new__(Probe)
    c.refused_commits = RefusedCommits()
    c._committed_offset = defaultdict(lambda: None, {tp: 5})
    c._acked = defaultdict(list)
    c._acked_index = defaultdict(set)
    c._gap = defaultdict(lambda: None)
    c.assignment = lambda: {tp}
    c._commit = commit
    c.log = SimpleNamespace(dev=lambda *a: None, info=logging.info)
    c.app = SimpleNamespace(
        producer=SimpleNamespace(flush=flush),
        tables=SimpleNamespace(on_commit=lambda offsets: None),
        monitor=SimpleNamespace(on_tp_commit=lambda offsets: None),
    )

    assert asyncio.run(c._commit_offsets({tp: 9})) is False
    assert c._committed_offset[tp] == 5  # Faust had recorded 9
    assert c._filter_committable_offsets([]) == {tp: 9}  # no new acks: asked again all the same
    assert asyncio.run(c._commit_offsets(c._filter_committable_offsets([]))) is True
    assert c._committed_offset[tp] == 9 and not c.refused_commits.offsets
    assert sent == [{tp: 9}, {tp: 9}]
