"""MongoDB sink: commits a flush's :class:`DocUpdate` list with its source offsets.

One unordered ``bulk_write`` per collection per flush, one ``UpdateOne`` per
document. Two commit modes (``Settings.commit_mode``, docs/exactly-once.md):

* ``exactly_once`` (default): one transaction holds the offset fences check, every
  aggregate write and the new offsets; a replayed or zombie flush changes nothing.
  Needs a replica set, a sharded cluster or the embedded SecantusDB.
  With ``marked`` (idempotent writes, the default of kinds without read-modify-write
  updates) a flush is no transaction: the ledger records its intent, plain unordered
  bulk writes carry per-document marks (:mod:`pipeline.core.marks`) that make any
  second write of the same range a no-op, and the ledger then moves past the range.
  So a flush may hold any number of documents, no statement spans shards, and
  workers writing one document never abort each other (docs/exactly-once.md).
* ``at_least_once``: plain bulk writes, offsets recorded after them for status; a
  crash between the write and the Kafka commit counts a range twice. For
  standalone servers only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import bson
import pymongo
from bson import Int64
from pymongo import AsyncMongoClient, InsertOne, ReturnDocument, UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import BulkWriteError, DuplicateKeyError, PyMongoError

from pipeline.core.commit import (
    TP,
    Behind,
    Committed,
    CommitTooLarge,
    Failure,
    Fence,
    FenceConflict,
    LedgerBehind,
    Ledgers,
    LedgerView,
    check_fences,
)
from pipeline.core.marks import (
    DUPLICATE_KEY,
    MARKS,
    ahead_sources,
    mark_value,
    marked,
    missing_sources,
    sequence_of,
)
from pipeline.core.updates import DocUpdate, key_on_insert, new_document
from pipeline.settings import CommitMode
from pipeline.store.client import primary, reach, start_transaction
from pipeline.store.errors import (
    DuplicateKeyUnresolved,
    StoreUnreachable,
    check_durable,
    mongo_failure,
)
from pipeline.store.meta import is_sharded_cluster
from pipeline.store.offsets import (
    BEHIND,
    LOST,
    OFFSETS_COLLECTION,
    STUCK,
    finish_update,
    intent_update,
    ledger_view,
    offset_doc_update,
    offset_id,
    pending_of,
    token_id,
)
from pipeline.store.reads import READ_CHUNK, find_in
from pipeline.store.upsert_insert import created_by_upsert

#: Seconds a commit waits to reach the primary before it fails (and is retried, logged). Under a
#: client-side timeout PyMongo selects a server for as long as the whole deadline allows
#: (``get_server_selection_timeout``), so without this check an unreachable store would be
#: a silent ``commit_timeout``-long wait per attempt instead of a logged failure.
REACH_TIMEOUT = 10.0

#: ``commitTransaction`` attempts while its outcome is unknown (the label below).
COMMIT_RETRIES = 3
#: Rounds of "read the refused documents, send what they lack" after duplicate keys. A
#: round's upserts meet existing documents, so only a document deleted and inserted again
#: in between (or a writer racing every round) needs another; past the bound the flush fails,
#: logged, and the flusher's retry runs it again (idempotent).
RACE_ROUNDS = 4
#: The error label of a ``commitTransaction`` that may or may not have applied.
UNKNOWN_COMMIT = "UnknownTransactionCommitResult"

log = logging.getLogger(__name__)

#: Values of ``Settings.commit_mode``.
EXACTLY_ONCE: CommitMode = "exactly_once"
AT_LEAST_ONCE: CommitMode = "at_least_once"


def update_document(u: DocUpdate) -> dict[str, Any]:
    """The update operators of one planned document update."""
    if u.compute is not None:
        raise ValueError("read-modify-write updates must be resolved before they are sent")
    update: dict[str, Any] = {}
    if u.inc:
        update["$inc"] = u.inc
    if u.bit_or:
        update["$bit"] = {path: {"or": Int64(mask)} for path, mask in u.bit_or.items()}
    if u.set_on_insert:
        update["$setOnInsert"] = u.set_on_insert
    if u.set:
        update["$set"] = u.set
    if u.max:
        update["$max"] = u.max
    if u.add_to_set:
        update["$addToSet"] = {path: {"$each": values} for path, values in u.add_to_set.items()}
    return update


#: One statement of a flush: an upsert, or the insert of a document found absent.
Operation = UpdateOne | InsertOne[dict[str, Any]]


def group_operations(updates: Sequence[DocUpdate]) -> tuple[dict[str, list[Operation]], int]:
    """Upserts (and inserts of documents found absent) grouped by collection, in plan order,
    and their size in BSON bytes."""
    by_collection: dict[str, list[Operation]] = defaultdict(list)
    size = 0
    for u in updates:
        if u.insert:
            doc = new_document(u)
            size += len(bson.encode(doc)) + 16
            by_collection[u.collection].append(InsertOne(doc))
            continue
        update = update_document(u)
        # q, u and the statement's own framing (upsert flag, keys): what the server receives.
        flt = u.filter()
        size += len(bson.encode({"q": flt, "u": update})) + 16
        by_collection[u.collection].append(UpdateOne(flt, update, upsert=True))
    return by_collection, size


def phases(updates: Sequence[DocUpdate]) -> list[Sequence[DocUpdate]]:
    """The updates to write before the others (:attr:`DocUpdate.before`), then the others: two
    unordered bulks, the second sent once the first is acknowledged (one, when none is ``before``)."""
    first = [u for u in updates if u.before]
    if not first:
        return [updates]
    return [first, [u for u in updates if not u.before]]


def marked_statements(
    updates: Sequence[DocUpdate],
    seqs: Mapping[TP, int],
    keyed: bool,
    absent: frozenset[tuple[str, Any]] = frozenset(),
) -> tuple[list[Operation], int]:
    """The marked upserts of ``updates`` (:func:`~pipeline.core.marks.marked`) and their size in
    BSON bytes; ``keyed`` ``False``: the shard key set on insert, not matched
    (:func:`~pipeline.core.updates.key_on_insert`). A document found ``absent`` (collection,
    ``_id``) is sent as the insert its upsert would make (:mod:`pipeline.store.upsert_insert`).
    Pure, so that it can run on a thread."""
    ops: list[Operation] = []
    size = 0
    for u in updates:
        if not keyed:
            u = key_on_insert(u)
        flt, update = marked(u, update_document(u), seqs)
        doc = created_by_upsert(flt, update) if (u.collection, u.id) in absent else None
        if doc is not None:
            size += len(bson.encode(doc)) + 16
            ops.append(InsertOne(doc))
            continue
        size += len(bson.encode({"q": flt, "u": update})) + 16
        ops.append(UpdateOne(flt, update, upsert=True))
    return ops, size


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
        self._fault = fault or (lambda point: None)
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
        """
        try:
            await reach(self.client, min(REACH_TIMEOUT, self.commit_timeout))
        except PyMongoError as exc:
            raise StoreUnreachable(f"the store did not answer a ping ({type(exc).__name__}: {exc})") from exc
        if self.sharded is None:
            with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
                self.sharded = await is_sharded_cluster(self.client)
        if marked and self.exactly_once:
            return await self._commit_marked(updates, fences, flush_id)
        if not self.shard_keys_matched():
            updates = [key_on_insert(u) for u in updates]
        with pymongo.timeout(self.commit_timeout):
            return await self._commit(updates, fences, flush_id, token)

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

    async def _commit_marked(
        self, updates: Sequence[DocUpdate], fences: Sequence[Fence], flush_id: str
    ) -> Committed:
        """Intent, marked writes, finish: each step idempotent, each statement with its own deadline.

        Run again after any failure (by the flusher's retry loop, or by the partition's next
        owner from the recorded intent), it writes nothing twice: the intent is found as this
        flush's, documents already holding a mark answer "duplicate key", a finished ledger
        says the flush is done.
        """
        seqs, done = await self._intent(fences, flush_id)
        if fences and len(done) == len(fences):
            return Committed(already=True)
        absent: set[tuple[str, Any]] = set()
        # The read-modify-writes' documents are read whole by ``_read_modified``, which says
        # which are absent: the existence probe leaves them out.
        read = {(u.collection, u.id) for u in updates if u.compute is not None}
        if read:
            updates = await self._read_modified(updates, absent, seqs)
        absent |= await self._absent(updates, read, seqs)
        applied, raced, split = self.already_applied, self.raced_inserts, self.split_shares
        size = 0
        parts = phases(updates)
        for i, phase in enumerate(parts):
            size += await self._marked_writes(phase, seqs, frozenset(absent), fault=i == len(parts) - 1)
        await self._finish([f for f in fences if (f.topic, f.partition) not in done], flush_id)
        return Committed(
            False,
            size,
            self.already_applied - applied,
            self.raced_inserts - raced,
            self.split_shares - split,
        )

    async def _intent(self, fences: Sequence[Fence], flush_id: str) -> tuple[dict[TP, int], set[TP]]:
        """Record the flush on each partition's ledger; its sequence per partition, and those already done.

        The partitions' ledgers are separate documents: their intents are written at once,
        not one round trip after another. Every partition is tried; the conflicts found
        are raised together, after the others recorded theirs (as one at a time would).
        """
        now = time.time()
        found = await asyncio.gather(
            *(self._intent_one(f, flush_id, now) for f in fences), return_exceptions=True
        )
        seqs: dict[TP, int] = {}
        done: set[TP] = set()
        conflicts: list[tuple[Fence, int | None]] = []
        for f, got in zip(fences, found, strict=True):
            if isinstance(got, FenceConflict):
                conflicts.extend(got.conflicts)
            elif isinstance(got, BaseException):
                raise got
            else:
                seq, finished = got
                seqs[(f.topic, f.partition)] = seq
                if finished:
                    done.add((f.topic, f.partition))
        if conflicts:
            raise FenceConflict(conflicts)
        return seqs, done

    async def _intent_one(self, f: Fence, flush_id: str, now: float) -> tuple[int, bool]:
        """One partition's intent: its mark (:func:`~pipeline.core.marks.mark_value`: the sequence and
        the range's end), and whether this flush had already finished there."""
        offsets = self.db[OFFSETS_COLLECTION]
        flt, upd = intent_update(self.group, f, flush_id, now, self.worker)
        doc: dict[str, Any] | None = None
        with pymongo.timeout(self.commit_timeout):
            # Created when no ledger exists yet; an existing one that differs is no match.
            # (A write concern error raises even beside a duplicate key: findAndModify's is read first.)
            try:
                doc = await offsets.find_one_and_update(
                    flt, upd, upsert=f.expected is None, return_document=ReturnDocument.AFTER
                )
            except DuplicateKeyError as exc:
                check_durable(exc, f"the intent of {f.topic}[{f.partition}]")
        if doc is not None:
            return mark_value(int(doc["seq"]), f.next), False
        with pymongo.timeout(self.commit_timeout):
            current = await self.durable[OFFSETS_COLLECTION].find_one({"_id": flt["_id"]})
        found = pending_of(current)
        if found is not None and found.flush == flush_id:  # this flush's intent: a retry or a redo
            # An intent recorded before marks carried their range is written as it began.
            return (mark_value(found.seq, found.end) if found.ranged else found.seq), False
        if current is not None and found is None and current.get("flush") == flush_id:
            return mark_value(int(current.get("seq", 0)), f.next), True  # finished before its answer was lost
        raise FenceConflict([(f, (current or {}).get("next"))])

    async def _absent(
        self, updates: Sequence[DocUpdate], known: set[tuple[str, Any]], seqs: dict[TP, int]
    ) -> set[tuple[str, Any]]:
        """The documents of ``updates`` that do not exist yet, by (collection, ``_id``), read by
        ``_id`` when a flush looks like a first touch: the first :attr:`read_chunk` of each
        collection are read, and the rest only if at least half of those are new (a live flush,
        whose documents exist, pays one read per collection). A document with several upserts
        in the flush (the parts of a split one) is left out: its parts go as upserts.

        The documents read are checked against the flush's marks before anything is written
        (:meth:`_check_ahead`): a ledger behind its documents is found before it can lose or
        double anything, whenever the flush's first documents show it.
        """
        if not self.first_inserts:
            return set()
        ids: dict[str, list[Any]] = defaultdict(list)
        seen: Counter[tuple[str, Any]] = Counter((u.collection, u.id) for u in updates)
        for (name, i), n in seen.items():
            if n == 1 and (name, i) not in known:
                ids[name].append(i)
        absent: set[tuple[str, Any]] = set()
        stored: dict[tuple[str, Any], dict[str, Any]] = {}
        for name, keys in ids.items():
            probe, rest = keys[: self.read_chunk], keys[self.read_chunk :]
            for part in (probe, rest):
                with pymongo.timeout(self.commit_timeout):
                    coll = self.db[name]
                    found = {
                        d["_id"]: d
                        async for d in find_in(coll, part, chunk=self.read_chunk, projection={MARKS: 1})
                    }
                absent.update((name, i) for i in part if i not in found)
                stored.update(((name, i), d) for i, d in found.items())
                if 2 * len(found) > len(part):
                    break  # a live flush: its documents exist, the rest are not read
        await self._check_ahead([u for u in updates if (u.collection, u.id) in stored], stored, seqs)
        return absent

    async def _check_ahead(
        self,
        updates: Sequence[DocUpdate],
        stored: Mapping[tuple[str, Any], Mapping[str, Any]],
        seqs: dict[TP, int],
    ) -> None:
        """Raise :class:`~pipeline.core.commit.LedgerBehind` when a stored document holds a mark of
        one of the flush's partitions that the partition's ledger never gave out.

        A mark of this flush's sequence or a later one that is not this flush's own is either a
        later flush's (this one is a zombie: its finish fails the fence) or the ledger is behind
        the documents (deleted, restored older than them). The ledger, read majority-committed,
        tells: a sequence above the ledger's, or this very sequence with another range, is the
        latter. The partitions so found are marked held back on their ledgers first.
        """
        ahead: dict[tuple[TP, int], tuple[DocUpdate, int]] = {}
        for u in updates:
            for tp, mark in ahead_sources(u, stored.get((u.collection, u.id)), seqs):
                ahead.setdefault((tp, mark), (u, mark))
        if not ahead:
            return
        tps = sorted({tp for tp, _ in ahead})
        ids = {offset_id(self.group, t, p): (t, p) for t, p in tps}
        with pymongo.timeout(self.commit_timeout):
            ledgers = {
                ids[d["_id"]]: d
                async for d in find_in(self.durable[OFFSETS_COLLECTION], ids, chunk=self.read_chunk)
            }
        found: dict[TP, Behind] = {}
        for (tp, mark), (u, _) in sorted(ahead.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
            seq = ledgers.get(tp, {}).get("seq")
            ours = seqs[tp]
            stored_seq, ours_seq = sequence_of(mark), sequence_of(ours)
            behind = seq is None or stored_seq > int(seq) or stored_seq == ours_seq
            if behind and tp not in found:
                found[tp] = Behind(
                    tp[0],
                    tp[1],
                    u.collection,
                    u.id,
                    mark,
                    ours,
                    stored_seq,
                    ours_seq,
                    None if seq is None else int(seq),
                )
        if found:
            now = time.time()
            for b in found.values():
                log.error("%s", b.text())
                with pymongo.timeout(min(REACH_TIMEOUT, self.commit_timeout)):
                    await self.db[OFFSETS_COLLECTION].update_one(
                        {"_id": offset_id(self.group, b.topic, b.partition)},
                        {"$set": {BEHIND: {"reason": b.text(), "worker": self.worker, "at": now}}},
                    )
            raise LedgerBehind(list(found.values()))

    async def _read_modified(
        self,
        updates: Sequence[DocUpdate],
        absent: set[tuple[str, Any]] | None = None,
        seqs: dict[TP, int] | None = None,
    ) -> list[DocUpdate]:
        """Resolve the read-modify-write updates of idempotent writes (by ``_id``, chunked reads).

        Only for fields one source partition writes alone (a partition's visitor registers, in a
        document of their own or in a site rollup's ``b.<partition>``,
        :mod:`pipeline.kinds.hits.visits`): their writer is the partition's owner, and a zombie's
        older flush is refused by the marks the result is set under. Read again at every
        attempt (a retry, a redo), so the result holds what is stored then; a maximum, it is
        the same whether or not an earlier attempt applied.
        """
        several = next((u for u in updates if u.compute is not None and len(u.sources) > 1), None)
        if several is not None:
            raise ValueError(
                f"a read-modify-write of {several.collection} {several.id!r} from several partitions"
            )
        stored = await self._stored([u for u in updates if u.compute is not None])
        if seqs is not None:
            await self._check_ahead([u for u in updates if u.compute is not None], stored, seqs)
        out = []
        for u in updates:
            if u.compute is None:
                out.append(u)
                continue
            fields = u.compute(stored.get((u.collection, u.id)))
            out.append(replace(u, set={**u.set, **fields}, compute=None))
            if absent is not None and self.first_inserts and (u.collection, u.id) not in stored:
                absent.add((u.collection, u.id))
        return out

    async def _marked_writes(
        self,
        updates: Sequence[DocUpdate],
        seqs: dict[TP, int],
        absent: frozenset[tuple[str, Any]] = frozenset(),
        fault: bool = True,
    ) -> int:
        """Unordered bulk writes of the marked upserts, then the ones refused with "duplicate key" resolved.

        A duplicate key (E11000) says that a document with the ``_id`` exists, not that it
        holds this flush's marks: another worker may have inserted it first (docs/exactly-once.md,
        "A duplicate key"). Each refused upsert is checked against the stored document's
        marks: all there, it was already applied (counted); none there, it is sent again (the
        document exists now, so the upsert applies or meets its marks); some there (a merged
        update one of whose partitions was written apart), its other partitions' shares are
        sent apart, each on its own mark. Bounded by :data:`RACE_ROUNDS`.
        """
        keyed = self.shard_keys_matched()
        refused, size = await self._bulk(updates, seqs, keyed, fault=fault, absent=absent)
        for _ in range(RACE_ROUNDS):
            if not refused:
                return size
            again = await self._unapplied(refused, seqs)
            refused, _ = await self._bulk(again, seqs, keyed)
        raise DuplicateKeyUnresolved(
            f"{len(refused)} upserts still refused with a duplicate key after {RACE_ROUNDS} rounds "
            f"of reading their documents (first: {refused[0].collection} {refused[0].id!r})"
        )

    async def _bulk(
        self,
        updates: Sequence[DocUpdate],
        seqs: dict[TP, int],
        keyed: bool,
        fault: bool = False,
        absent: frozenset[tuple[str, Any]] = frozenset(),
    ) -> tuple[list[DocUpdate], int]:
        """Unordered bulk writes of :attr:`statement_ops` marked upserts per collection; the updates
        refused with E11000, and the statements' size in BSON bytes.

        Each chunk's statements are built (:func:`marked_statements`) on a thread while the
        store applies the previous chunk: the worker's share of a commit, about a third of a
        millisecond per document in Python, then runs while the store works instead of before
        it (docs/design.md, "Reading while writing"). One chunk is in flight at a time.
        """
        by_collection: dict[str, list[DocUpdate]] = defaultdict(list)
        for u in updates:
            by_collection[u.collection].append(u)
        chunks = [
            (name, ups[i : i + self.statement_ops])
            for name, ups in by_collection.items()
            for i in range(0, len(ups), self.statement_ops)
        ]
        refused: list[DocUpdate] = []
        size = 0
        built: asyncio.Future[tuple[list[Operation], int]] | None = None
        try:
            for n, (name, chunk) in enumerate(chunks):
                if built is None:
                    ops, bytes_ = marked_statements(chunk, seqs, keyed, absent)
                else:
                    ops, bytes_ = await built
                built = None
                if n + 1 < len(chunks):
                    built = asyncio.ensure_future(
                        asyncio.to_thread(marked_statements, chunks[n + 1][1], seqs, keyed, absent)
                    )
                size += bytes_
                with pymongo.timeout(self.commit_timeout):
                    try:
                        done = await self.db[name].bulk_write(ops, ordered=False)
                        self.first_inserted += done.inserted_count
                    except BulkWriteError as exc:
                        # A write concern error, even beside duplicate keys only, means "not
                        # durable": the marks those keys point to may be rolled back.
                        check_durable(exc, f"a bulk write of {len(ops)} statements to {name}")
                        errors = exc.details.get("writeErrors", [])
                        if not errors or any(e.get("code") != DUPLICATE_KEY for e in errors):
                            raise
                        self.first_inserted += int(exc.details.get("nInserted", 0))
                        refused.extend(chunk[e["index"]] for e in errors)
                if fault and n == 0:
                    self._fault("mid-commit")
        finally:
            if built is not None:
                built.cancel()
        return refused, size

    async def _unapplied(self, refused: Sequence[DocUpdate], seqs: dict[TP, int]) -> list[DocUpdate]:
        """What of the refused upserts their documents do not hold yet (read on the primary, majority
        committed: a mark a failover can still roll back is not "applied")."""
        stored = await self._stored(refused, durable=True)
        await self._check_ahead(refused, stored, seqs)
        again: list[DocUpdate] = []
        for u in refused:
            missing = missing_sources(u, stored.get((u.collection, u.id)), seqs)
            if not missing:
                self.already_applied += 1
            elif len(missing) == len(u.sources) or not u.shares:
                self.raced_inserts += 1  # inserted by another writer (or none of it applied): again
                again.append(u)
            else:  # a merged update, part of it applied: the missing partitions' shares apart
                self.split_shares += 1
                again.extend(s for s in u.shares if any(tp in missing for tp in s.sources))
        return again

    async def _finish(self, fences: Sequence[Fence], flush_id: str) -> None:
        """Move each ledger past the range, clear its intent; one no longer this flush's: a conflict."""
        if not fences:
            return
        now = time.time()
        ops = [UpdateOne(*finish_update(self.group, f, flush_id, now, self.worker)) for f in fences]
        with pymongo.timeout(self.commit_timeout):
            try:
                result = await self.db[OFFSETS_COLLECTION].bulk_write(ops, ordered=False)
            except BulkWriteError as exc:
                check_durable(exc, "a ledger move")
                raise
        if result.matched_count == len(fences):
            return
        ids = [offset_id(self.group, f.topic, f.partition) for f in fences]
        with pymongo.timeout(self.commit_timeout):
            stored = {
                d["_id"]: d
                async for d in find_in(self.durable[OFFSETS_COLLECTION], ids, chunk=self.read_chunk)
            }
        lost = [
            (f, stored.get(i, {}).get("next"))
            for f, i in zip(fences, ids, strict=True)
            if stored.get(i, {}).get("flush") != flush_id or "pending" in stored.get(i, {})
        ]
        if lost:
            raise FenceConflict(lost)

    async def _commit(
        self, updates: Sequence[DocUpdate], fences: Sequence[Fence], flush_id: str, token: str | None
    ) -> Committed:
        computed = any(u.compute is not None for u in updates)
        if not self.exactly_once:
            if computed:
                updates = await self._computed(updates, None)
            built = [group_operations(phase) for phase in phases(updates)]
            size = sum(n for _, n in built)
            if size > self.max_bytes:
                raise CommitTooLarge(size, self.max_bytes)
            for ops, _ in built:  # one phase after the other (:func:`phases`)
                await asyncio.gather(*(self.db[n].bulk_write(o, ordered=False) for n, o in ops.items()))
            await self._record_offsets(fences, flush_id)
            return Committed(False, size)
        already = False
        size = 0

        async def body(session: AsyncClientSession) -> None:
            nonlocal already, size
            offsets = self.db[OFFSETS_COLLECTION]
            if token is not None:
                await offsets.update_one(
                    {"_id": token_id(self.group, token)},
                    {"$inc": {"commits": 1}, "$set": {"worker": self.worker, "at": time.time()}},
                    upsert=True,
                    session=session,
                )
            ids = [offset_id(self.group, f.topic, f.partition) for f in fences]
            stored = {
                (d["topic"], d["partition"]): d
                async for d in find_in(offsets, ids, chunk=self.read_chunk, session=session)
            }
            already = check_fences(fences, stored, flush_id)
            if already:
                return
            resolved = await self._computed(updates, session) if computed else updates
            ops, size = self._operations(resolved)
            for name, collection_ops in ops.items():
                for i in range(0, len(collection_ops), self.statement_ops):
                    chunk = collection_ops[i : i + self.statement_ops]
                    await self.db[name].bulk_write(chunk, ordered=False, session=session)
            self._fault("mid-commit")
            now = time.time()
            await offsets.bulk_write(
                [
                    UpdateOne(*offset_doc_update(self.group, f, flush_id, now, self.worker), upsert=True)
                    for f in fences
                ],
                ordered=False,
                session=session,
            )

        # One attempt; the flusher's retry loop (which logs, backs off and splits) does the
        # rest. ``with_transaction`` would retry silently for up to two minutes instead.
        # The deadline (pymongo.timeout in commit) covers every statement and the commit:
        # MongoDB's transactionLifetimeLimitSeconds counts from the transaction's start.
        async with self.client.start_session() as session:
            await start_transaction(session)
            try:
                await body(session)
            except BaseException:
                if session.in_transaction:
                    await session.abort_transaction()  # best effort: it never raises
                raise
            await self._commit_transaction(session)
        return Committed(already, size)

    async def _commit_transaction(self, session: AsyncClientSession) -> None:
        """``commitTransaction``, run again while its outcome is unknown (the drivers' rule).

        A commit that fails with the ``UnknownTransactionCommitResult`` label (network
        error, server selection, MaxTimeMSExpired or a write concern failure during the
        commit) may or may not have applied; running ``commitTransaction`` again is safe
        and learns the outcome. Bounded: past :data:`COMMIT_RETRIES` the error goes up,
        and the flusher reads the ledger before it splits the batch (docs/exactly-once.md).
        """
        for attempt in range(1, COMMIT_RETRIES + 1):
            try:
                await session.commit_transaction()
                return
            except PyMongoError as exc:
                if attempt == COMMIT_RETRIES or not exc.has_error_label(UNKNOWN_COMMIT):
                    raise
                self.unknown_commits += 1
                log.warning(
                    "commitTransaction outcome unknown (%s: %s); running it again (%d/%d)",
                    type(exc).__name__,
                    str(exc)[:200],
                    attempt,
                    COMMIT_RETRIES,
                )

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

    def _operations(self, updates: Sequence[DocUpdate]) -> tuple[dict[str, list[Operation]], int]:
        ops, size = group_operations(updates)
        if size > self.max_bytes:
            raise CommitTooLarge(size, self.max_bytes)
        return ops, size

    async def _stored(
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

    async def _computed(
        self, updates: Sequence[DocUpdate], session: AsyncClientSession | None
    ) -> list[DocUpdate]:
        """Resolve read-modify-write updates against the stored documents (chunked reads by id)."""
        stored = await self._stored([u for u in updates if u.compute is not None], session)
        out = []
        for u in updates:
            if u.compute is None:
                out.append(u)
                continue
            found = stored.get((u.collection, u.id))
            fields = u.compute(found)
            if found is not None and not (fields or u.set or u.inc or u.bit_or):
                continue  # the stored document already holds the result: nothing to write
            merged = {**u.set, **fields}
            new = found is None and not u.merging
            out.append(
                DocUpdate(
                    u.collection,
                    u.id,
                    u.set_on_insert,
                    u.inc,
                    merged,
                    u.bit_or,
                    key=u.key,
                    insert=new,
                    before=u.before,
                )
            )
        return out

    async def _record_offsets(self, fences: Sequence[Fence], flush_id: str) -> None:
        """At-least-once mode: remember positions for status (not a fence)."""
        if not fences:
            return
        now = time.time()
        ops = []
        for f in fences:
            flt, upd = offset_doc_update(self.group, f, flush_id, now, self.worker)
            nxt = upd["$set"].pop("next")
            ops.append(UpdateOne(flt, {**upd, "$max": {"next": nxt}}, upsert=True))
        await self.db[OFFSETS_COLLECTION].bulk_write(ops, ordered=False)
