"""The name store's MongoDB documents: bulk read, atomic create, guarded append.

Every write is a single-document atomic operation, so workers need no lock and no
transaction to agree: the append is guarded by "none of these names is in the
list" and "the list has room for all of them"; the next document is created by an
upsert on its deterministic ``_id``. These writes happen outside the flush's
transaction: a token, once given, is valid whether or not that flush commits.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from pymongo import ReturnDocument, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError, DuplicateKeyError

from pipeline.core.errors import PreaggError
from pipeline.core.fields import STORE_SCHEMAS, FieldMode, Index, field_names
from pipeline.store.errors import check_durable
from pipeline.store.names.layout import Namespace, Registration, doc_id, learn
from pipeline.store.reads import READ_CHUNK, find_in


def names_indexes(mode: FieldMode) -> list[Index]:
    """Namespace reads are one indexed range."""
    f = names_fields(mode)
    return [Index(f["collection"], ((f["namespace"], 1), (f["least_value"], 1)), "ns")]


def names_fields(mode: FieldMode) -> dict[str, str]:
    """Stored names of the name store's documents (``schemas/store/fields.json``) in ``mode``."""
    return field_names(STORE_SCHEMAS, "names", mode)


class NameStore:
    """The name-store collection of one database, in one schema mode."""

    def __init__(
        self, db: AsyncDatabase[dict[str, Any]], mode: FieldMode = "compact", read_chunk: int = READ_CHUNK
    ) -> None:
        self.mode = mode
        self.f = names_fields(mode)
        self.coll = db[self.f["collection"]]
        self.read_chunk = read_chunk
        #: Round trips, for metrics and the benchmark.
        self.reads = 0
        self.writes = 0

    async def read(self, namespaces: Collection[str]) -> dict[str, list[dict[str, Any]]]:
        """Every document of ``namespaces``: one bulk read, in chunks of ``read_chunk`` namespaces."""
        f = self.f
        out: dict[str, list[dict[str, Any]]] = {ns: [] for ns in namespaces}
        if not namespaces:
            return out
        self.reads += 1
        async for d in find_in(self.coll, namespaces, key=f["namespace"], chunk=self.read_chunk):
            out[d[f["namespace"]]].append(d)
        return out

    async def create(self, namespace: str, seq: int, least: int, cap: int) -> dict[str, Any]:
        """The namespace's ``seq``-th document, created if absent (atomic: one upsert on its ``_id``)."""
        f = self.f
        self.writes += 1
        _id = doc_id(namespace, seq)
        new = {f["namespace"]: namespace, f["least_value"]: least, f["cap"]: cap, f["list"]: []}
        doc: dict[str, Any] | None
        try:
            doc = await self.coll.find_one_and_update(
                {"_id": _id}, {"$setOnInsert": new}, upsert=True, return_document=ReturnDocument.AFTER
            )
        except DuplicateKeyError:  # two upserts raced on the same _id: the other one inserted it
            doc = None
        if doc is None:  # a lost upsert race may also answer with no document: read the winner's
            doc = await self.coll.find_one({"_id": _id})
        if doc is None:
            raise RuntimeError(f"name store: document {_id!r} neither created nor found")
        return doc

    async def append(
        self, namespace: str, seq: int, bound: int, names: Sequence[str]
    ) -> dict[str, Any] | None:
        """Append ``names`` to a document if none is there and the list stays within ``bound``.

        Returns the document after the append (its list gives the positions), or
        ``None`` if the guard failed: another worker appended first, read again.
        """
        f = self.f
        self.writes += 1
        return await self.coll.find_one_and_update(
            {
                "_id": doc_id(namespace, seq),
                f["list"]: {"$nin": list(names)},
                f"{f['list']}.{bound - len(names)}": {"$exists": False},
            },
            {"$push": {f["list"]: {"$each": list(names)}}},
            return_document=ReturnDocument.AFTER,
        )

    async def register(self, writes: Sequence[Registration]) -> None:
        """Every write in one unordered bulk write (the caller reads the namespaces back after).

        A guard that fails (another worker appended first) or a create that finds the
        document there changes nothing; the read back shows what happened and the
        caller registers what is still missing one namespace at a time.
        """
        if not writes:
            return
        f = self.f
        ops: list[UpdateOne] = []
        for w in writes:
            _id = doc_id(w.namespace, w.seq)
            if w.create:
                new = {f["namespace"]: w.namespace, f["least_value"]: w.least, f["cap"]: w.cap}
                ops.append(
                    UpdateOne({"_id": _id}, {"$setOnInsert": {**new, f["list"]: list(w.names)}}, upsert=True)
                )
            else:
                guard = {
                    "_id": _id,
                    f["list"]: {"$nin": list(w.names)},
                    f"{f['list']}.{w.bound - len(w.names)}": {"$exists": False},
                }
                ops.append(UpdateOne(guard, {"$push": {f["list"]: {"$each": list(w.names)}}}))
        self.writes += 1
        try:
            await self.coll.bulk_write(ops, ordered=False)
        except BulkWriteError as exc:  # raced upserts (duplicate _id): the read back sorts it out
            check_durable(exc, "a name store append")  # a name a failover may take back is no name yet
            if any(e.get("code") != 11000 for e in exc.details.get("writeErrors", [])):
                raise


#: Torn reads in a row before giving up (a namespace filling faster than it can be read).
MAX_TORN_READS = 100


class NameStoreContention(PreaggError, RuntimeError):
    """A namespace kept changing under this reader; the caller retries later."""


async def read_namespaces(store: NameStore, namespaces: Collection[str]) -> dict[str, Namespace]:
    """A consistent state of each namespace: bulk reads, again for the ones read torn."""
    out: dict[str, Namespace] = {}
    pending = set(namespaces)
    for _ in range(MAX_TORN_READS):
        docs = await store.read(pending)
        for namespace in list(pending):
            ns = learn(namespace, docs[namespace], store.f)
            if ns is not None:
                out[namespace] = ns
                pending.discard(namespace)
        if not pending:
            return out
    raise NameStoreContention(f"name store: torn reads of {sorted(pending)[:3]}")
