"""A flush in one transaction (exactly-once), or as plain writes then its offsets (at-least-once).

Exactly-once: the offset fences are checked, every aggregate write and the new offsets
are written, all or nothing; a replayed or zombie flush changes nothing. A commit whose
outcome is unknown (``UnknownTransactionCommitResult``) is asked again, bounded.
At-least-once: plain bulk writes, offsets recorded after them for status; a crash in
between counts a range twice (standalone servers only).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from pymongo import UpdateOne
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import PyMongoError

from pipeline.core.commit import (
    Committed,
    CommitTooLarge,
    Fence,
    check_fences,
)
from pipeline.core.updates import DocUpdate
from pipeline.store.client import start_transaction
from pipeline.store.offsets import (
    OFFSETS_COLLECTION,
    offset_doc_update,
    offset_id,
    token_id,
)
from pipeline.store.reads import find_in
from pipeline.store.sink_state import SinkState
from pipeline.store.statements import (
    COMMIT_RETRIES,
    UNKNOWN_COMMIT,
    group_operations,
    phases,
)

log = logging.getLogger("pipeline.store.sink")


class TransactionCommit:
    """The transactional (and the at-least-once) mode of a :class:`~pipeline.store.sink.MongoSink`."""

    def __init__(self, sink: SinkState) -> None:
        self.sink = sink

    async def commit(
        self, updates: Sequence[DocUpdate], fences: Sequence[Fence], flush_id: str, token: str | None
    ) -> Committed:
        computed = any(u.compute is not None for u in updates)
        if not self.sink.exactly_once:
            if computed:
                updates = await self._computed(updates, None)
            built = [group_operations(phase) for phase in phases(updates)]
            size = sum(n for _, n in built)
            if size > self.sink.max_bytes:
                raise CommitTooLarge(size, self.sink.max_bytes)
            for ops, _ in built:  # one phase after the other (:func:`phases`)
                await asyncio.gather(*(self.sink.db[n].bulk_write(o, ordered=False) for n, o in ops.items()))
            await self._record_offsets(fences, flush_id)
            return Committed(False, size)
        already = False
        size = 0

        async def body(session: AsyncClientSession) -> None:
            nonlocal already, size
            offsets = self.sink.db[OFFSETS_COLLECTION]
            if token is not None:
                await offsets.update_one(
                    {"_id": token_id(self.sink.group, token)},
                    {"$inc": {"commits": 1}, "$set": {"worker": self.sink.worker, "at": time.time()}},
                    upsert=True,
                    session=session,
                )
            ids = [offset_id(self.sink.group, f.topic, f.partition) for f in fences]
            stored = {
                (d["topic"], d["partition"]): d
                async for d in find_in(offsets, ids, chunk=self.sink.read_chunk, session=session)
            }
            already = check_fences(fences, stored, flush_id)
            if already:
                return
            resolved = await self._computed(updates, session) if computed else updates
            ops, size = self.sink.operations(resolved)
            for name, collection_ops in ops.items():
                for i in range(0, len(collection_ops), self.sink.statement_ops):
                    chunk = collection_ops[i : i + self.sink.statement_ops]
                    await self.sink.db[name].bulk_write(chunk, ordered=False, session=session)
            self.sink.fault_point("mid-commit")
            now = time.time()
            await offsets.bulk_write(
                [
                    UpdateOne(
                        *offset_doc_update(self.sink.group, f, flush_id, now, self.sink.worker), upsert=True
                    )
                    for f in fences
                ],
                ordered=False,
                session=session,
            )

        # One attempt; the flusher's retry loop (which logs, backs off and splits) does the
        # rest. ``with_transaction`` would retry silently for up to two minutes instead.
        # The deadline (pymongo.timeout in commit) covers every statement and the commit:
        # MongoDB's transactionLifetimeLimitSeconds counts from the transaction's start.
        async with self.sink.client.start_session() as session:
            await start_transaction(session)
            try:
                await body(session)
            except BaseException:
                if session.in_transaction:
                    await session.abort_transaction()  # best effort: it never raises
                raise
            await self.commit_transaction(session)
        return Committed(already, size)

    async def commit_transaction(self, session: AsyncClientSession) -> None:
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
                self.sink.unknown_commits += 1
                log.warning(
                    "commitTransaction outcome unknown (%s: %s); running it again (%d/%d)",
                    type(exc).__name__,
                    str(exc)[:200],
                    attempt,
                    COMMIT_RETRIES,
                )

    async def _computed(
        self, updates: Sequence[DocUpdate], session: AsyncClientSession | None
    ) -> list[DocUpdate]:
        """Resolve read-modify-write updates against the stored documents (chunked reads by id)."""
        stored = await self.sink.stored([u for u in updates if u.compute is not None], session)
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
            flt, upd = offset_doc_update(self.sink.group, f, flush_id, now, self.sink.worker)
            nxt = upd["$set"].pop("next")
            ops.append(UpdateOne(flt, {**upd, "$max": {"next": nxt}}, upsert=True))
        await self.sink.db[OFFSETS_COLLECTION].bulk_write(ops, ordered=False)
