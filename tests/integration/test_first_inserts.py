"""A first touch sent as inserts stores what the marked upserts would have stored (the real driver
and store), and a redo, a later flush, a rival's insert still count once."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from pipeline.core.commit import Fence
from pipeline.core.uniques import Budget
from pipeline.core.updates import DocUpdate, merge_sources, split_wide
from pipeline.kinds.hits.aggregate import plan_hits
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.visit_log import VisitLog
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.offsets import OFFSETS_COLLECTION
from pipeline.store.sink import MongoSink
from pipeline.store.upsert_insert import created_by_upsert

pytestmark = pytest.mark.integration


def flush(seed: int) -> list[DocUpdate]:
    """Two partitions' plans of the same pages (counters, visitors in both register forms, minutes
    of two days), merged per document as a keyless flush is, and split where wide (a hot page's
    documents, left apart per partition: a new one is inserted as their sum)."""
    rng = random.Random(seed)
    base = 29_000_000
    out: list[DocUpdate] = []
    for partition in (0, 1):
        counts: Counter[tuple[str, str, int]] = Counter()
        visits: dict[tuple[str, str, int], set[int]] = {}
        for _ in range(400):
            # A hot page: its documents are wide, so kept apart per partition and split.
            page = "/hot" if rng.random() < 0.3 else f"/p/{rng.randrange(30)}"
            minute = base + rng.randrange(2 * 1440)
            counts[("s.example", page, minute)] += 1
            visits.setdefault(("s.example", page, minute // 15), set()).add(rng.getrandbits(128))
        plan = plan_hits(
            counts,
            hits_fields(),
            visits=VisitLog.of(visits),
            visitor_keys=lambda o: b"k" * 32,
            budget=Budget(explicit_max=8),
            writer=partition if seed % 2 else None,
        )
        out.extend(replace(u, sources=(("hits", partition),)) for u in plan)
    return split_wide(merge_sources(out, 64), 64)


def normal(doc: Any) -> Any:
    """A stored document with its fields sorted (an insert and an upsert may order them apart)."""
    if isinstance(doc, dict):
        return {k: normal(doc[k]) for k in sorted(doc)}
    if isinstance(doc, list):
        return [normal(v) for v in doc]
    return doc


def test_a_first_touch_inserted_stores_what_the_upserts_would(settings: Settings) -> None:
    """Two databases get the same flushes, one as upserts only, one with inserts of the documents
    found absent: a first touch, then a flush of the same documents told they are all absent (a
    wrong guess, as when a rival inserts them between the read and the insert: duplicate keys,
    resolved as upserts), then that flush again (a redo: applied once). The documents are equal."""

    async def run() -> None:
        client = mongo_client(settings.mongo_url or "", timeout=30)
        try:
            stored: dict[str, dict[str, Any]] = {}
            raced: dict[str, int] = {}
            for label, inserts in (("upserts", False), ("inserts", True)):
                db = client[f"{settings.db}_{label}"]
                sink = MongoSink(client, db.name, settings.group_id, "w", "exactly_once")
                sink.first_inserts = inserts
                for n, seed in enumerate((3, 4)):
                    updates = flush(seed)
                    fences = [Fence("hits", p, n * 400 or None, (n + 1) * 400, begin=n * 400) for p in (0, 1)]
                    if n == 1 and inserts:

                        async def all_absent(
                            ups: Any, known: Any, seqs: Any, whole: Any
                        ) -> set[tuple[str, Any]]:
                            return {(u.collection, u.id) for u in ups}

                        sink.idempotent._absent = all_absent  # type: ignore[method-assign]
                    assert not (await sink.commit(updates, fences, f"f{n}", marked=True)).already
                again = await sink.commit(updates, fences, "f1", marked=True)  # the last flush, redone
                assert again.already
                raced[label] = sink.raced_inserts
                if inserts:  # the first touch went as inserts
                    assert sink.first_inserted > 100, sink.first_inserted
                else:
                    assert sink.first_inserted == 0
                stored[label] = {
                    f"{c}/{d['_id']}": normal(d)
                    for c in await db.list_collection_names()
                    if c != OFFSETS_COLLECTION  # the ledgers: their clock differs
                    async for d in db[c].find({})
                }
            assert stored["inserts"] == stored["upserts"]
            assert len(stored["upserts"]) > 100
            assert raced["inserts"] > 0 == raced["upserts"]  # the wrong guesses met duplicate keys
        finally:
            await client.close()

    asyncio.run(run())


def test_the_insert_of_a_marked_upsert_is_its_base_document_and_updates() -> None:
    """The document an upsert inserts: the filter's equalities (not the marks' ``$not``), then the
    operators on missing fields; ``None`` for what it does not model."""
    flt = {"_id": "k", "m.s": "s", "_a.t|0": {"$not": {"$gte": 3}}}
    update = {
        "$setOnInsert": {"m.d": 1},
        "$inc": {"t": 2, "i.3.4": 1},
        "$set": {"_a.t|0": 3},
        "$max": {"w": 7},
        "$bit": {"b.1": {"or": 5}},
        "$addToSet": {"v.x": {"$each": [3, 1, 3]}},
    }
    assert created_by_upsert(flt, update) == {
        "_id": "k",
        "m": {"s": "s", "d": 1},
        "t": 2,
        "i": {"3": {"4": 1}},
        "_a": {"t|0": 3},
        "w": 7,
        "b": {"1": 5},
        "v": {"x": [3, 1]},
    }
    assert created_by_upsert(flt, {"$push": {"a": 1}}) is None
    assert created_by_upsert(flt, {"$inc": {"t": 1}, "$max": {"t": 2}}) is None  # one path twice
    assert created_by_upsert(flt, {"$bit": {"b": {"and": 5}}}) is None
