"""MongoDB sink: commits a flush's :class:`DocUpdate` list with its source offsets, in its mode.

The commit port's ``WorkerSink`` over one database: ``commit`` dispatches to the mode
(``Settings.commit_mode``, docs/exactly-once.md), each a small strategy over the shared
statements (pipeline/store/statements.py):

* ``exactly_once`` (default), in a transaction (pipeline/store/transaction_commit.py): the
  offset fences check, every aggregate write and the new offsets, all or nothing. Needs a
  replica set, a sharded cluster or the embedded SecantusDB.
* ``exactly_once`` with ``marked`` (idempotent writes, the default of kinds without
  read-modify-write updates; pipeline/store/idempotent_commit.py): intent, marked writes,
  finish, each safe to run again; no statement spans shards.
* ``at_least_once``: plain bulk writes, offsets recorded after them for status; a crash
  between the write and the Kafka commit counts a range twice. For standalone servers only.

Besides commits: the ledgers' reads and moves the worker's checks make, and the reading
of MongoDB's failures as the port's verdicts (pipeline/store/errors.py).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import pymongo
from pymongo import AsyncMongoClient
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import PyMongoError

from pipeline.core.commit import (
    TP,
    Committed,
    CommitTooLarge,
    Failure,
    Fence,
    Forward,
    Ledgers,
    LedgerView,
    check_fences,
)
from pipeline.core.updates import DocUpdate, key_on_insert
from pipeline.settings import CommitMode
from pipeline.store.client import primary, reach
from pipeline.store.errors import (
    StoreUnreachable,
    mongo_failure,
)
from pipeline.store.idempotent_commit import IdempotentCommit
from pipeline.store.meta import is_sharded_cluster
from pipeline.store.offsets import (
    LOST,
    OFFSETS_COLLECTION,
    STUCK,
    ledger_view,
    offset_id,
    pending_of,
)
from pipeline.store.reads import READ_CHUNK, find_in
from pipeline.store.statements import REACH_TIMEOUT, Operation, group_operations
from pipeline.store.transaction_commit import TransactionCommit

log = logging.getLogger(__name__)

#: Values of ``Settings.commit_mode``.
EXACTLY_ONCE: CommitMode = "exactly_once"
AT_LEAST_ONCE: CommitMode = "at_least_once"


class MongoSink:
    """Commits flushes to one database, with their offsets, in the chosen mode."""

    def __init__(
        self,
        client: AsyncMongoClient[dict[str, Any]],
        db: str,
        group: str,
        worker: str,
        mode: CommitMode = EXACTLY_ONCE,
        statement_ops: int = 2000,
        fault: Callable[[str], None] | None = None,
        max_bytes: int = 8_000_000,
        commit_timeout: float = 30.0,
        read_chunk: int = READ_CHUNK,
    ) -> None:
        if mode not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise ValueError(f"unknown commit mode {mode!r} (use {EXACTLY_ONCE} or {AT_LEAST_ONCE})")
        self.client = client
        #: Majority writes whatever the URL says (:func:`~pipeline.store.client.primary`).
        self.db = primary(client, db, majority=True)
        #: The same, read with majority read concern: what decides "already applied" or "this
        #: flush committed" (marks, intents, ledgers) must be what survives a failover, not a
        #: primary's writes that a majority does not have yet.
        self.durable = primary(client, db, majority=True, read_majority=True)
        self.group = group
        self.worker = worker
        self.mode = mode
        self.statement_ops = statement_ops
        #: Called at each named point of a commit (the fault layer kills the process there).
        self.fault_point = fault or (lambda point: None)
        #: A commit whose statements exceed this many bytes is refused unsent (the flusher splits it).
        self.max_bytes = max_bytes
        #: Deadline of one whole commit, seconds (PyMongo's ``timeout()`` around the transaction).
        self.commit_timeout = commit_timeout
        self.read_chunk = read_chunk
        #: ``commitTransaction`` calls run again because their outcome was unknown.
        self.unknown_commits = 0
        #: Marked upserts a document had already applied (a flush written again): its marks seen.
        self.already_applied = 0
        #: Marked upserts refused with a duplicate key whose document lacked their marks
        #: (another writer inserted it first): sent again.
        self.raced_inserts = 0
        #: Merged upserts refused because some of their partitions were applied: the other
        #: partitions' shares sent apart.
        self.split_shares = 0
        #: Marked writes of documents found absent go as inserts (:meth:`_absent`).
        self.first_inserts = True
        #: Documents so inserted.
        self.first_inserted = 0
        #: Whether the server is a mongos (asked once, at the first commit): ``None`` until then.
        self.sharded: bool | None = None
        #: The commit modes over this sink's connections and counters.
        self.idempotent = IdempotentCommit(self)
        self.transactional = TransactionCommit(self)

    @property
    def exactly_once(self) -> bool:
        """True when flushes are committed in a transaction with their offset fences."""
        return self.mode == EXACTLY_ONCE

    def failure(self, exc: BaseException) -> Failure:
        """What a failed MongoDB call means to a flusher (pipeline/store/errors.py)."""
        return mongo_failure(exc)

    async def load_positions(self, tps: Sequence[TP]) -> dict[TP, int | None]:
        """Stored next offset of each partition for this group (``None``: none stored)."""
        return (await self.ledgers(tps)).positions

    async def ledgers(self, tps: Sequence[TP]) -> Ledgers:
        """Each partition's stored position and the flush its ledger records as unfinished, in one read.

        A worker asks both when it is assigned partitions: one read of the ledgers, not two.
        """
        ids = {offset_id(self.group, t, p): (t, p) for t, p in tps}
        out = Ledgers(dict.fromkeys(tps), {})
        async for d in find_in(self.durable[OFFSETS_COLLECTION], ids, chunk=self.read_chunk):
            tp = ids[d["_id"]]
            out.positions[tp] = d.get("next")
            found = pending_of(d)
            if found is not None:
                out.pending[tp] = found
        return out

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked: bool = False,
        forward: Forward | None = None,
    ) -> Committed:
        """Write one flush within :attr:`commit_timeout`; report whether it had already committed.

        ``token`` (a stream's name): the transaction's first statement writes that stream's
        commit token, so that of two workers committing the same documents at once one aborts
        on its first statement (WriteConflict) instead of after its upserts. The flusher
        asks for it after it met write conflicts (keyless streams: docs/ingest.md).

        Raises :class:`~pipeline.store.offsets.FenceConflict` in exactly-once mode
        when another worker moved a partition's stored offset under this batch, and
        :class:`~pipeline.store.errors.CommitTooLarge`, before writing anything, when
        the statements exceed :attr:`max_bytes`.

        ``forward``: sent once the flush's intent is recorded, before its documents; only
        marked writes record an intent, so another mode refuses it.
        """
        if forward is not None and not (marked and self.exactly_once):
            raise ValueError("forwarding a flush's records needs exactly-once marked writes")
        try:
            await reach(self.client, min(REACH_TIMEOUT, self.commit_timeout))
        except PyMongoError as exc:
            raise StoreUnreachable(f"the store did not answer a ping ({type(exc).__name__}: {exc})") from exc
        if self.sharded is None:
            with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
                self.sharded = await is_sharded_cluster(self.client)
        if marked and self.exactly_once:
            return await self.idempotent.commit(updates, fences, flush_id, forward)
        if not self.shard_keys_matched():
            updates = [key_on_insert(u) for u in updates]
        with pymongo.timeout(self.commit_timeout):
            return await self.transactional.commit(updates, fences, flush_id, token)

    def shard_keys_matched(self) -> bool:
        """Whether upserts must match their shard key's equalities: on a sharded cluster, an upsert
        on a sharded collection needs the whole shard key in its filter; elsewhere ``_id`` alone is
        matched, which costs the store less (:func:`~pipeline.core.updates.key_on_insert`).

        A sharded cluster is what the server says (``hello``'s ``isdbgrid``, the rule ``preagg
        setup`` shards by), not the driver's topology type: behind a load balancer
        (``loadBalanced=true``) or through one mongos with ``directConnection=true`` the driver's
        type is not ``Sharded``, and upserts without the key failed with ShardKeyNotFound for ever.
        Unknown before the first commit: matched then, which is right everywhere."""
        return self.sharded is not False

    async def note_stuck(self, tps: Sequence[TP], reason: str | None) -> None:
        """Record on the partitions' ledgers that their flush fails for good (``None``: it went through)."""
        ids = [offset_id(self.group, t, p) for t, p in tps]
        update: dict[str, Any] = (
            {"$unset": {STUCK: ""}}
            if reason is None
            else {"$set": {STUCK: {"reason": reason, "worker": self.worker, "at": time.time()}}}
        )
        with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
            await self.db[OFFSETS_COLLECTION].update_many({"_id": {"$in": ids}}, update)

    async def ledger(self, tp: TP) -> LedgerView | None:
        """One partition's ledger (the commit port's ``LedgerPort``)."""
        with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
            doc = await self.db[OFFSETS_COLLECTION].find_one({"_id": offset_id(self.group, *tp)})
        return None if doc is None else ledger_view(doc)

    async def ledgers_of(self, topics: Sequence[str]) -> dict[TP, LedgerView]:
        """Every stored ledger of this group's partitions of ``topics``."""
        with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
            found = self.db[OFFSETS_COLLECTION].find({"group": self.group, "topic": {"$in": list(topics)}})
            return {(d["topic"], d["partition"]): ledger_view(d) async for d in found}

    async def mark_diverged(self, tp: TP, worker: str, reason: str) -> None:
        """Write the verdict into the partition's ledger, for ``preagg status`` and operators."""
        with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
            await self.db[OFFSETS_COLLECTION].update_one(
                {"_id": offset_id(self.group, *tp)},
                {"$set": {"diverged": {"at": time.time(), "worker": worker, "reason": reason}}},
            )

    async def note_lost(self, tp: TP, stored: int, start: int) -> None:
        """Record on the partition's ledger that Kafka deleted ``[stored, start)`` before it was
        counted (``preagg status`` shows it until ``preagg positions acknowledge`` clears it)."""
        lost = {"from": stored, "to": start, "worker": self.worker, "at": time.time()}
        with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
            await self.db[OFFSETS_COLLECTION].update_one(
                {"_id": offset_id(self.group, *tp), "lost.to": {"$ne": start}},
                {"$set": {LOST: lost}, "$inc": {"offsets_lost": start - stored}},
            )

    async def outcome(self, fences: Sequence[Fence], flush_id: str) -> bool:
        """Did flush ``flush_id`` commit? Read from the ledgers on the primary.

        ``True``: every fence's ledger names this flush; ``False``: every ledger still holds
        the batch's start (nothing was applied, the batch may be split); anything else
        raises :class:`~pipeline.store.offsets.FenceConflict`. Asked after a commit failed
        in a way that may have applied it, before the batch is split under new flush ids.
        """
        with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
            ids = [offset_id(self.group, f.topic, f.partition) for f in fences]
            stored = {
                (d["topic"], d["partition"]): d
                async for d in find_in(self.durable[OFFSETS_COLLECTION], ids, chunk=self.read_chunk)
            }
        return check_fences(fences, stored, flush_id)

    def operations(self, updates: Sequence[DocUpdate]) -> tuple[dict[str, list[Operation]], int]:
        ops, size = group_operations(updates)
        if size > self.max_bytes:
            raise CommitTooLarge(size, self.max_bytes)
        return ops, size

    async def stored(
        self,
        updates: Sequence[DocUpdate],
        session: AsyncClientSession | None = None,
        durable: bool = False,
    ) -> dict[tuple[str, Any], dict[str, Any]]:
        """The stored documents of ``updates``, by (collection, ``_id``): each read once (several
        partitions' updates of one document, a keyless rollup's), in chunks by ``_id``;
        ``durable``: majority committed (outside transactions)."""
        db = self.durable if durable and session is None else self.db
        ids: dict[str, dict[Any, None]] = defaultdict(dict)
        for u in updates:
            ids[u.collection][u.id] = None
        stored: dict[tuple[str, Any], dict[str, Any]] = {}
        for name, keys in ids.items():
            with pymongo.timeout(self.commit_timeout):
                async for d in find_in(db[name], keys, chunk=self.read_chunk, session=session):
                    stored[(name, d["_id"])] = d
        return stored
