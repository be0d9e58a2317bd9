"""Rules of real MongoDB clusters the embedded store does not enforce, checked on what we emit.

* An upsert on a sharded collection carries the collection's full shard key as
  equalities in its filter, and its insert part does not also set those fields (or a
  parent of them): MongoDB 6.0 refuses the first, every version the second.
* No flush creates a collection: every collection a plan writes is one ``preagg setup``
  creates (collection creation is refused inside cross-shard transactions).
* Workers read from the primary whatever the URL says (transactions require it).
* A read-modify-write that found no document is sent as an insert of the document the
  upsert would have created: it holds the full shard key (MongoDB routes an insert by it).
* Off a sharded cluster an upsert matches ``_id`` alone (its shard key's fields set on
  insert, never twice): the same stored document, a cheaper write.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, InsertOne, ReadPreference

from pipeline.core.updates import DocUpdate, key_on_insert, new_document
from pipeline.kinds import REGISTRY, StreamContext, kind_named
from pipeline.ops.setup import collections, shard_keys
from pipeline.settings import Settings
from pipeline.store.client import primary
from pipeline.store.offsets import OFFSETS_COLLECTION
from pipeline.store.sink import MongoSink
from pipeline.store.statements import group_operations

EVENTS = {
    "hits": [
        b'{"site": "s.example", "page": "/a", "ts": 1700000000}',
        b'{"site": "t", "page": "/", "ts": 1700090000}',
    ],
    "impressions": [
        b'{"user": 1, "item": 2, "ts": 1700000000}',
        b'{"user": "u", "item": 2, "ts": 1700090000}',
    ],
    "relations": [b'{"user": 1, "item": 2}', b'{"user": "u", "item": "i"}'],
    "listens": [b'{"user": 1, "tag": 2, "song": 3, "ts": 1700000000}'],
}


def client(url: str = "mongodb://127.0.0.1:1/") -> AsyncMongoClient[dict[str, Any]]:
    return AsyncMongoClient(url, connect=False)


def planned(name: str, mode: str) -> list[DocUpdate]:
    """Every update one batch of the kind emits, read-modify-writes resolved against no document."""
    kind = kind_named(name)
    s = Settings(schema=mode)  # type: ignore[arg-type]
    stream = kind.stream(StreamContext(s, s.schema, client()["x"]), s.of(kind))
    agg = stream.factory()
    for raw in EVENTS[name]:
        assert agg.ingest(raw) is None
    out = []
    for u in agg.plan():
        if u.compute is not None:
            u = DocUpdate(
                u.collection, u.id, u.set_on_insert, u.inc, {**u.set, **u.compute(None)}, u.bit_or, key=u.key
            )
        out.append(u)
    return out


def overlaps(a: str, b: str) -> bool:
    """Same path, or one the parent of the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


@pytest.mark.parametrize("mode", ["compact", "readable"])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_upsert_carries_its_full_shard_key_and_does_not_set_it(name: str, mode: str) -> None:
    s = Settings(schema=mode)  # type: ignore[arg-type]
    keys = {k.collection: [f for f, _ in k.keys] for k in shard_keys(s, s.schema)}
    ops, _ = group_operations(planned(name, mode))
    assert ops
    for coll, updates in ops.items():
        assert coll in keys, f"{coll} has no shard key"
        for op in updates:
            flt, doc = op._filter, op._doc
            for field in keys[coll]:
                assert field in flt and not isinstance(flt[field], dict), (coll, field, flt)
                written = [p for operator in doc.values() for p in operator]
                assert not any(overlaps(field, p) for p in written if field != "_id"), (coll, field, written)
            assert op._upsert


@pytest.mark.parametrize("mode", ["compact", "readable"])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_documents_found_absent_are_inserted_whole_with_their_shard_key(name: str, mode: str) -> None:
    s = Settings(schema=mode)  # type: ignore[arg-type]
    keys = {k.collection: [f for f, _ in k.keys] for k in shard_keys(s, s.schema)}
    fresh = [
        DocUpdate(u.collection, u.id, u.set_on_insert, set=u.set, key=u.key, insert=True)
        for u in planned(name, mode)
        if not u.merging
    ]
    ops, _ = group_operations(fresh)
    for coll, inserts in ops.items():
        for op in inserts:
            assert isinstance(op, InsertOne)
            doc = op._doc
            for field in keys[coll]:
                assert field in doc and not isinstance(doc[field], dict), (coll, field, doc)


@pytest.mark.parametrize("mode", ["compact", "readable"])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_a_first_touch_inserts_the_full_shard_key_on_a_sharded_cluster(name: str, mode: str) -> None:
    """Marked writes of documents found absent go as inserts (MongoDB routes an insert by its
    shard key): on a mongos each holds its collection's whole shard key, as the upsert's
    equalities would have put it there; they also hold the flush's marks."""
    from dataclasses import replace

    from pipeline.core.marks import mark_key
    from pipeline.store.statements import marked_statements

    s = Settings(schema=mode)  # type: ignore[arg-type]
    keys = {k.collection: [f for f, _ in k.keys] for k in shard_keys(s, s.schema)}
    updates = [replace(u, sources=(("t", 0),)) for u in planned(name, mode)]
    absent = frozenset((u.collection, u.id) for u in updates)
    ops, owners, _ = marked_statements(updates, {("t", 0): 3}, True, absent)
    assert ops and all(isinstance(op, InsertOne) for op in ops), ops
    for carried, op in zip(owners, ops, strict=True):
        u = carried[0]
        doc = op._doc
        for field in keys[u.collection]:
            at: Any = doc
            for part in field.split("."):
                at = at[part]
            assert not isinstance(at, dict), (u.collection, field, doc)
        assert doc["_a"] == {mark_key("t", 0, v.part): 3 for v in carried}  # each part's mark


@pytest.mark.parametrize("mode", ["compact", "readable"])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_off_a_sharded_cluster_an_upsert_matches_its_id_alone_and_sets_its_key_on_insert(
    name: str, mode: str
) -> None:
    planned_ = planned(name, mode)
    ops, _ = group_operations([key_on_insert(u) for u in planned_])
    for coll, updates in ops.items():
        for op in updates:
            flt, doc = op._filter, op._doc
            assert set(flt) == {"_id"}, (coll, flt)
            written = [p for operator in doc.values() for p in operator]
            assert not any(overlaps(a, b) for i, a in enumerate(written) for b in written[i + 1 :]), written
    for u in planned_:
        if u.key and not u.merging:  # the document an insert makes is the same either way
            assert new_document(key_on_insert(u)) == new_document(u)
        if u.key:
            moved = key_on_insert(u)
            assert moved.filter() == {"_id": u.id} and moved.set_on_insert == {**u.key, **u.set_on_insert}


def test_the_sink_matches_id_alone_only_once_the_server_said_it_is_no_mongos() -> None:
    """What the server says (hello's isdbgrid), not the driver's topology type: a mongos behind a
    load balancer or a direct connection is no ``Sharded`` topology and still needs the key."""
    sink = MongoSink(client(), "db", "group", "worker")
    assert sink.shard_keys_matched()  # not asked yet: a mongos's rules, right everywhere
    sink.sharded = False
    assert not sink.shard_keys_matched()
    sink.sharded = True
    assert sink.shard_keys_matched()


def test_a_new_document_is_what_the_upsert_would_create() -> None:
    u = DocUpdate("c", "i1|i2", {"u": 1, "t": 2}, set={"w.4": {"d": "20261120"}, "a": b"x"}, key={"k": 3})
    want = {"_id": "i1|i2", "k": 3, "u": 1, "t": 2, "w": {"4": {"d": "20261120"}}, "a": b"x"}
    assert new_document(u) == want
    with pytest.raises(ValueError, match="set twice"):
        new_document(DocUpdate("c", 1, {"a": 1}, set={"a": 2}))
    with pytest.raises(ValueError, match="not a document"):
        new_document(DocUpdate("c", 1, {"a": 1}, set={"a.b": 2}))
    with pytest.raises(ValueError, match=r"\$inc"):
        new_document(DocUpdate("c", 1, {}, {"n": 1}))


def test_the_ledger_is_not_sharded_so_one_flush_touches_one_ledger_shard() -> None:
    """A hashed ledger spread a worker's partitions over every shard: multi-shard transactions."""
    for mode in ("compact", "readable"):
        s = Settings(schema=mode)  # type: ignore[arg-type]
        assert OFFSETS_COLLECTION not in {k.collection for k in shard_keys(s, s.schema)}
        assert OFFSETS_COLLECTION in collections(s)


def test_no_flush_writes_a_collection_setup_does_not_create() -> None:
    for mode in ("compact", "readable"):
        s = Settings(schema=mode)  # type: ignore[arg-type]
        created = set(collections(s))
        for name in REGISTRY:
            assert {u.collection for u in planned(name, mode)} <= created, name


def test_workers_read_from_the_primary_whatever_the_url_says() -> None:
    c = client("mongodb://127.0.0.1:1/?readPreference=secondaryPreferred")
    assert c["db"].read_preference != ReadPreference.PRIMARY  # what the URL asks for
    assert primary(c, "db").read_preference == ReadPreference.PRIMARY
    assert MongoSink(c, "db", "group", "worker").db.read_preference == ReadPreference.PRIMARY


def test_flush_writes_and_ledger_moves_are_majority_writes_whatever_the_url_says() -> None:
    """With w:1 a failover could roll back a flush's documents but keep its ledger."""
    c = client("mongodb://127.0.0.1:1/?w=1")
    assert c["db"].write_concern.document == {"w": 1}  # what the URL asks for
    sink = MongoSink(c, "db", "group", "worker")
    assert sink.db.write_concern.document == {"w": "majority"}
    assert sink.db["hits_daily"].write_concern.document == {"w": "majority"}
    assert sink.db[OFFSETS_COLLECTION].write_concern.document == {"w": "majority"}
