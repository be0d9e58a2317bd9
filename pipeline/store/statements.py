"""The statements a flush sends, built the same way in every commit mode: one update document
per touched document, grouped per collection into bulk writes within the byte bound, and
the marked form the idempotent mode sends; with the bounds every mode's calls keep."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import bson
from bson import Int64
from pymongo import InsertOne, UpdateOne

from pipeline.core.collector import paused
from pipeline.core.commit import TP
from pipeline.core.marks import marked
from pipeline.core.updates import DocUpdate, key_on_insert, new_document
from pipeline.store.upsert_insert import created_by_upserts

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


def statement_chunks(updates: Sequence[DocUpdate], size: int) -> list[list[DocUpdate]]:
    """``updates`` (of one collection) cut into bulk writes of about ``size`` statements, each
    document's updates in one (a new document's are inserted together), in the order of their
    documents' first update."""
    of_doc: dict[Any, list[DocUpdate]] = {}
    for u in updates:
        of_doc.setdefault(u.id, []).append(u)
    chunks: list[list[DocUpdate]] = []
    chunk: list[DocUpdate] = []
    for group in of_doc.values():
        if chunk and len(chunk) + len(group) > size:
            chunks.append(chunk)
            chunk = []
        chunk.extend(group)
    if chunk:
        chunks.append(chunk)
    return chunks


def marked_statements(
    updates: Sequence[DocUpdate],
    seqs: Mapping[TP, int],
    keyed: bool,
    absent: frozenset[tuple[str, Any]] = frozenset(),
) -> tuple[list[Operation], list[tuple[DocUpdate, ...]], int]:
    """The marked upserts of ``updates`` (:func:`~pipeline.core.marks.marked`) and their size in
    BSON bytes; ``keyed`` ``False``: the shard key set on insert, not matched
    (:func:`~pipeline.core.updates.key_on_insert`). A document found ``absent`` (collection,
    ``_id``) is sent as the one insert its upserts would make together (its parts when split,
    its partitions' updates when kept apart: :mod:`pipeline.store.upsert_insert`). With the
    statements, the updates each carries (what a statement refused by a bulk write stands for).
    Pure, so that it can run on a thread; the collector is paused meanwhile
    (:mod:`pipeline.core.collector`)."""
    with paused():
        return _marked_statements(updates, seqs, keyed, absent)


def _marked_statements(
    updates: Sequence[DocUpdate],
    seqs: Mapping[TP, int],
    keyed: bool,
    absent: frozenset[tuple[str, Any]],
) -> tuple[list[Operation], list[tuple[DocUpdate, ...]], int]:
    statements = []
    of_doc: dict[tuple[str, Any], list[int]] = defaultdict(list)
    for i, u in enumerate(updates):
        sent = u if keyed else key_on_insert(u)
        statements.append(marked(sent, update_document(sent), seqs))
        if (u.collection, u.id) in absent:
            of_doc[(u.collection, u.id)].append(i)
    ops: list[Operation] = []
    owners: list[tuple[DocUpdate, ...]] = []
    size = 0
    folded: set[int] = set()  # statements already in a document's insert
    for i, u in enumerate(updates):
        if i in folded:
            continue
        group = of_doc.get((u.collection, u.id))
        doc = created_by_upserts([statements[j] for j in group]) if group and group[0] == i else None
        if doc is not None and group is not None:
            folded.update(group)
            size += len(bson.encode(doc)) + 16
            ops.append(InsertOne(doc))
            owners.append(tuple(updates[j] for j in group))
            continue
        flt, update = statements[i]
        size += len(bson.encode({"q": flt, "u": update})) + 16
        ops.append(UpdateOne(flt, update, upsert=True))
        owners.append((u,))
    return ops, owners, size
