"""Idempotent marked writes: a flush as intent, marked upserts and finish, each step safe to run again.

The ledger records the flush's intent (its range and sequence per partition), plain
unordered bulk writes carry per-document marks (:mod:`pipeline.core.marks`) that make any
second write of the same range a no-op, and the ledger then moves past the range. So a
flush may hold any number of documents, no statement spans shards, and workers writing
one document never abort each other (docs/exactly-once.md). A first touch's documents
are inserted rather than upserted (pipeline/store/upsert_insert.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pymongo
from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from pipeline.core.commit import (
    TP,
    Behind,
    Committed,
    Fence,
    FenceConflict,
    Forward,
    LedgerBehind,
)
from pipeline.core.marks import (
    DUPLICATE_KEY,
    MARKS,
    ahead_sources,
    mark_value,
    missing_sources,
    sequence_of,
)
from pipeline.core.updates import DocUpdate, disjoint_fields
from pipeline.store.errors import DuplicateKeyUnresolved, check_durable
from pipeline.store.offsets import (
    BEHIND,
    OFFSETS_COLLECTION,
    finish_update,
    intent_update,
    offset_id,
    pending_of,
)
from pipeline.store.reads import find_in
from pipeline.store.sink_state import SinkState
from pipeline.store.statements import (
    RACE_ROUNDS,
    REACH_TIMEOUT,
    Operation,
    marked_statements,
    phases,
    statement_chunks,
)

log = logging.getLogger("pipeline.store.sink")


class IdempotentCommit:
    """The marked-writes mode of a :class:`~pipeline.store.sink.MongoSink`."""

    def __init__(self, sink: SinkState) -> None:
        self.sink = sink
        #: Per partition, the sequence and position its last flush finished at through this sink.
        #: A flush that follows on from there reads only a probe of its documents; any other (a
        #: worker's first flush of a partition, a redo, a ledger moved by someone else) reads all
        #: of them before writing, so that a ledger behind its documents writes nothing.
        self._finished: dict[TP, tuple[int, int | None]] = {}

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        forward: Forward | None = None,
    ) -> Committed:
        """Intent, marked writes, finish: each step idempotent, each statement with its own deadline.

        Run again after any failure (by the flusher's retry loop, or by the partition's next
        owner from the recorded intent), it writes nothing twice: the intent is found as this
        flush's, documents already holding a mark answer "duplicate key", a finished ledger
        says the flush is done.

        ``forward`` gets the flush's sequence on each partition not finished yet, after the
        intent and before any document: the intent's sequence names one range for good, so a
        flush run again sends what it sent before under the same names.
        """
        seqs, done = await self._intent(fences, flush_id)
        if fences and len(done) == len(fences):
            return Committed(already=True)
        if forward is not None:
            await forward({tp: sequence_of(v) for tp, v in seqs.items() if tp not in done})
        absent: set[tuple[str, Any]] = set()
        # The read-modify-writes' documents are read whole by ``_read_modified``, which says
        # which are absent: the existence probe leaves them out.
        read = {(u.collection, u.id) for u in updates if u.compute is not None}
        if read:
            updates = await self._read_modified(updates, absent, seqs)
        whole = any(
            self._finished.get((f.topic, f.partition))
            != (sequence_of(seqs[(f.topic, f.partition)]) - 1, f.expected)
            for f in fences
            if (f.topic, f.partition) not in done
        )
        absent |= await self._absent(updates, read, seqs, whole)
        applied, raced, split = self.sink.already_applied, self.sink.raced_inserts, self.sink.split_shares
        size = 0
        parts = phases(updates)
        for i, phase in enumerate(parts):
            # A fault point in each phase: the last one's "mid-commit", an earlier one's "early-commit".
            point = "mid-commit" if i == len(parts) - 1 else "early-commit"
            size += await self._marked_writes(phase, seqs, frozenset(absent), fault=point)
        await self._finish([f for f in fences if (f.topic, f.partition) not in done], flush_id)
        self._finished.update(
            ((f.topic, f.partition), (sequence_of(seqs[(f.topic, f.partition)]), f.next)) for f in fences
        )
        return Committed(
            False,
            size,
            self.sink.already_applied - applied,
            self.sink.raced_inserts - raced,
            self.sink.split_shares - split,
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
        offsets = self.sink.db[OFFSETS_COLLECTION]
        flt, upd = intent_update(self.sink.group, f, flush_id, now, self.sink.worker)
        doc: dict[str, Any] | None = None
        with pymongo.timeout(self.sink.commit_timeout):
            # Created when no ledger exists yet; an existing one that differs is no match.
            # (A write concern error raises even beside a duplicate key: findAndModify's is read first.)
            try:
                doc = await offsets.find_one_and_update(
                    flt, upd, upsert=f.expected is None or f.adopt, return_document=ReturnDocument.AFTER
                )
            except DuplicateKeyError as exc:
                check_durable(exc, f"the intent of {f.topic}[{f.partition}]")
        if doc is not None:
            return mark_value(int(doc["seq"]), f.next), False
        with pymongo.timeout(self.sink.commit_timeout):
            current = await self.sink.durable[OFFSETS_COLLECTION].find_one({"_id": flt["_id"]})
        found = pending_of(current)
        if found is not None and found.flush == flush_id:  # this flush's intent: a retry or a redo
            # An intent recorded before marks carried their range is written as it began.
            return (mark_value(found.seq, found.end) if found.ranged else found.seq), False
        if current is not None and found is None and current.get("flush") == flush_id:
            return mark_value(int(current.get("seq", 0)), f.next), True  # finished before its answer was lost
        raise FenceConflict([(f, (current or {}).get("next"))])

    async def _absent(
        self,
        updates: Sequence[DocUpdate],
        known: set[tuple[str, Any]],
        seqs: dict[TP, int],
        whole: bool = False,
    ) -> set[tuple[str, Any]]:
        """The documents of ``updates`` that do not exist yet, by (collection, ``_id``), read by
        ``_id`` when a flush looks like a first touch: the first :attr:`read_chunk` of each
        collection are read, and the rest only if at least half of those are new (a live flush,
        whose documents exist, pays one read per collection). A new document with several
        upserts in the flush (the parts of a split one, partitions' updates left apart) is
        inserted whole, one statement (:func:`~pipeline.store.upsert_insert.created_by_upserts`).

        The documents read are checked against the flush's marks before anything is written
        (:meth:`_check_ahead`). ``whole`` (a flush not following on from this sink's last one on
        some partition) reads every document, whatever the probe finds: a ledger behind its
        documents is then found before anything is written, wherever in the flush the documents
        that show it are. A flush that follows on from the last one has a ledger nobody moved
        since (its intent was fenced on the position that flush left), so its probe is enough.
        """
        if not self.sink.first_inserts and not whole:
            return set()
        ids: dict[str, list[Any]] = defaultdict(list)
        for name, i in dict.fromkeys((u.collection, u.id) for u in updates):
            if (name, i) not in known:
                ids[name].append(i)
        absent: set[tuple[str, Any]] = set()
        stored: dict[tuple[str, Any], dict[str, Any]] = {}
        for name, keys in ids.items():
            probe, rest = keys[: self.sink.read_chunk], keys[self.sink.read_chunk :]
            for part in (probe, rest):
                with pymongo.timeout(self.sink.commit_timeout):
                    coll = self.sink.db[name]
                    found = {
                        d["_id"]: d
                        async for d in find_in(coll, part, chunk=self.sink.read_chunk, projection={MARKS: 1})
                    }
                if self.sink.first_inserts:
                    absent.update((name, i) for i in part if i not in found)
                stored.update(((name, i), d) for i, d in found.items())
                if 2 * len(found) > len(part) and not whole:
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
        ids = {offset_id(self.sink.group, t, p): (t, p) for t, p in tps}
        with pymongo.timeout(self.sink.commit_timeout):
            ledgers = {
                ids[d["_id"]]: d
                async for d in find_in(self.sink.durable[OFFSETS_COLLECTION], ids, chunk=self.sink.read_chunk)
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
                with pymongo.timeout(min(REACH_TIMEOUT, self.sink.commit_timeout)):
                    # Only on the ledger this flush's intent left: one an operator rebuilt
                    # meanwhile is not held again for what it has just accounted for.
                    await self.sink.db[OFFSETS_COLLECTION].update_one(
                        {"_id": offset_id(self.sink.group, b.topic, b.partition), "seq": b.ours_seq},
                        {"$set": {BEHIND: {"reason": b.text(), "worker": self.sink.worker, "at": now}}},
                    )
            raise LedgerBehind(list(found.values()))

    async def _read_modified(
        self,
        updates: Sequence[DocUpdate],
        absent: set[tuple[str, Any]] | None = None,
        seqs: dict[TP, int] | None = None,
    ) -> list[DocUpdate]:
        """Resolve the read-modify-write updates of idempotent writes (by ``_id``, chunked reads).

        Only for fields one source partition writes alone (a partition's visitor registers, in
        the partitions' register document or in a site rollup's ``b.<partition>``,
        :mod:`pipeline.kinds.hits.visits`): their writer is the partition's owner, and a zombie's
        older flush is refused by the marks the result is set under. A merged update of several
        partitions' such fields resolves each share against the same read, so that a share sent
        apart (its document held the others' marks) sets what the merged one would have. Read again at every
        attempt (a retry, a redo), so the result holds what is stored then; a maximum, it is
        the same whether or not an earlier attempt applied.
        """
        several = next(
            (u for u in updates if u.compute is not None and len(u.sources) > 1 and not u.owned), None
        )
        if several is not None:
            raise ValueError(
                f"a read-modify-write of {several.collection} {several.id!r} from several partitions"
            )
        stored = await self.sink.stored([u for u in updates if u.compute is not None])
        if seqs is not None:
            await self._check_ahead([u for u in updates if u.compute is not None], stored, seqs)
        out = []
        for u in updates:
            if u.compute is None:
                out.append(u)
                continue
            out.append(_resolved(u, stored.get((u.collection, u.id))))
            if absent is not None and self.sink.first_inserts and (u.collection, u.id) not in stored:
                absent.add((u.collection, u.id))
        return out

    async def _marked_writes(
        self,
        updates: Sequence[DocUpdate],
        seqs: dict[TP, int],
        absent: frozenset[tuple[str, Any]] = frozenset(),
        fault: str | None = "mid-commit",
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
        keyed = self.sink.shard_keys_matched()
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
        fault: str | None = None,
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
            (name, chunk)
            for name, ups in by_collection.items()
            for chunk in statement_chunks(ups, self.sink.statement_ops)
        ]
        refused: list[DocUpdate] = []
        size = 0
        built: asyncio.Future[tuple[list[Operation], list[tuple[DocUpdate, ...]], int]] | None = None
        try:
            for n, (name, chunk) in enumerate(chunks):
                if built is None:
                    ops, owners, bytes_ = marked_statements(chunk, seqs, keyed, absent)
                else:
                    ops, owners, bytes_ = await built
                built = None
                if n + 1 < len(chunks):
                    built = asyncio.ensure_future(
                        asyncio.to_thread(marked_statements, chunks[n + 1][1], seqs, keyed, absent)
                    )
                size += bytes_
                with pymongo.timeout(self.sink.commit_timeout):
                    try:
                        done = await self.sink.db[name].bulk_write(ops, ordered=False)
                        self.sink.first_inserted += done.inserted_count
                    except BulkWriteError as exc:
                        # A write concern error, even beside duplicate keys only, means "not
                        # durable": the marks those keys point to may be rolled back.
                        check_durable(exc, f"a bulk write of {len(ops)} statements to {name}")
                        errors = exc.details.get("writeErrors", [])
                        if not errors or any(e.get("code") != DUPLICATE_KEY for e in errors):
                            raise
                        self.sink.first_inserted += int(exc.details.get("nInserted", 0))
                        refused.extend(u for e in errors for u in owners[e["index"]])
                if fault is not None and n == 0:
                    self.sink.fault_point(fault)
        finally:
            if built is not None:
                built.cancel()
        return refused, size

    async def _unapplied(self, refused: Sequence[DocUpdate], seqs: dict[TP, int]) -> list[DocUpdate]:
        """What of the refused upserts their documents do not hold yet (read on the primary, majority
        committed: a mark a failover can still roll back is not "applied")."""
        stored = await self.sink.stored(refused, durable=True)
        await self._check_ahead(refused, stored, seqs)
        again: list[DocUpdate] = []
        for u in refused:
            missing = missing_sources(u, stored.get((u.collection, u.id)), seqs)
            if not missing:
                self.sink.already_applied += 1
            elif len(missing) == len(u.sources) or not u.shares:
                self.sink.raced_inserts += 1  # inserted by another writer (or none of it applied): again
                again.append(u)
            else:  # a merged update, part of it applied: the missing partitions' shares apart
                self.sink.split_shares += 1
                again.extend(s for s in u.shares if any(tp in missing for tp in s.sources))
        return again

    async def _finish(self, fences: Sequence[Fence], flush_id: str) -> None:
        """Move each ledger past the range, clear its intent; one no longer this flush's: a conflict."""
        if not fences:
            return
        now = time.time()
        ops = [UpdateOne(*finish_update(self.sink.group, f, flush_id, now, self.sink.worker)) for f in fences]
        with pymongo.timeout(self.sink.commit_timeout):
            try:
                result = await self.sink.db[OFFSETS_COLLECTION].bulk_write(ops, ordered=False)
            except BulkWriteError as exc:
                check_durable(exc, "a ledger move")
                raise
        if result.matched_count == len(fences):
            return
        ids = [offset_id(self.sink.group, f.topic, f.partition) for f in fences]
        with pymongo.timeout(self.sink.commit_timeout):
            stored = {
                d["_id"]: d
                async for d in find_in(self.sink.durable[OFFSETS_COLLECTION], ids, chunk=self.sink.read_chunk)
            }
        lost = [
            (f, stored.get(i, {}).get("next"))
            for f, i in zip(fences, ids, strict=True)
            if stored.get(i, {}).get("flush") != flush_id or "pending" in stored.get(i, {})
        ]
        if lost:
            raise FenceConflict(lost)


def _resolved(u: DocUpdate, found: dict[str, Any] | None) -> DocUpdate:
    """``u`` with its compute's fields set from ``found``; a merged update's shares resolved too."""
    if not u.shares:
        return replace(u, set={**u.set, **(u.compute(found) if u.compute else {})}, compute=None)
    shares = tuple(_resolved(s, found) for s in u.shares)
    fields = disjoint_fields(s.set for s in shares)
    return replace(u, set={**u.set, **fields}, compute=None, shares=shares)
