"""Per-document idempotency marks: which flush of each source partition a document already holds (pure).

With idempotent writes (docs/exactly-once.md, "Idempotent writes") a flush is not one
transaction: its documents are written by plain unordered bulk writes, and each upsert
carries, per source partition of its events, that partition's flush sequence. The
filter matches only a document whose mark for the partition is below the sequence
(or missing); the update sets the mark. Written twice (a retry, a crash and a redo of
the same range, a zombie racing the new owner), the second upsert finds no match and
its insert fails on the ``_id`` (duplicate key, code 11000): nothing is counted twice.

A duplicate key says only that *some* document has the ``_id``: another worker may have
inserted it first (two workers creating one new document race, and MongoDB retries the
upsert itself only for a filter of equalities on ``_id``, SERVER-14322). So an upsert
refused that way is "already applied" only if the stored document holds its marks
(:func:`missing_sources`); otherwise it is sent again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.updates import DocUpdate

#: The marks' field in every document written with idempotent writes (both schema modes).
MARKS = "_a"
#: MongoDB's duplicate key error: an upsert whose marks say "already applied".
DUPLICATE_KEY = 11000


def mark_key(topic: str, partition: int, part: int = 0) -> str:
    """The mark's name of one source partition (and one part of a split document).

    Kafka topic names are ``[a-zA-Z0-9._-]``; a dot would start a sub-document, so it is
    written ``%2E`` (``%`` cannot appear in a topic name).
    """
    key = f"{topic.replace('.', '%2E')}|{partition}"
    return f"{key}~{part}" if part else key


def applied_seq(doc: Mapping[str, Any] | None, topic: str, partition: int, part: int = 0) -> int:
    """The sequence of the last flush of a partition that ``doc`` holds (0: none)."""
    if doc is None:
        return 0
    marks = doc.get(MARKS)
    if not isinstance(marks, Mapping):
        return 0
    seq = marks.get(mark_key(topic, partition, part))
    return int(seq) if isinstance(seq, int | float) else 0


def missing_sources(
    u: DocUpdate, doc: Mapping[str, Any] | None, seqs: Mapping[tuple[str, int], int]
) -> tuple[tuple[str, int], ...]:
    """The source partitions of ``u`` whose share the stored ``doc`` does not hold yet.

    Empty: every share is applied (a retry, a redo or a zombie's second write). Not
    empty after a duplicate key: another writer inserted the document first, or one
    source of a merged update had been written apart (a redo of its range); those
    shares still have to be written.
    """
    return tuple(tp for tp in u.sources if applied_seq(doc, tp[0], tp[1], u.part) < seqs[tp])


def marked(
    u: DocUpdate, update: dict[str, Any], seqs: Mapping[tuple[str, int], int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter and update of ``u`` with its marks: skip the document if any source is applied."""
    flt = u.filter()
    marks: dict[str, int] = {}
    for tp in u.sources:
        path = f"{MARKS}.{mark_key(tp[0], tp[1], u.part)}"
        seq = seqs[tp]
        flt[path] = {"$not": {"$gte": seq}}  # below the flush's sequence, or no mark yet
        marks[path] = seq
    if marks:
        update = {**update, "$set": {**update.get("$set", {}), **marks}}
    return flt, update
