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

A mark's value is the flush's sequence in its high bits and the low :data:`RANGE_BITS` bits of
the flush's range end in its low bits (:func:`mark_value`): a write again of the same flush (a
retry, a redo, a zombie) carries the very same value, while another range written under the
same sequence (a ledger deleted, or restored older than the documents, starts its sequence
again) does not. A stored mark of the same or a later sequence that is not this flush's is
therefore never read as "applied": it is this partition's ledger being behind its documents,
or a zombie's late write, and the ledger tells which (:func:`ahead_sources`). Marks written
before they carried a range (values up to :data:`RANGE_MASK`) are plain sequences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.updates import DocUpdate

#: The marks' field in every document written with idempotent writes (both schema modes).
MARKS = "_a"
#: MongoDB's duplicate key error: an upsert whose marks say "already applied".
DUPLICATE_KEY = 11000
#: Low bits of a mark: its flush's range end modulo ``2**RANGE_BITS`` (a flush never spans that
#: many offsets); the high bits hold the sequence (up to 2**35 flushes a partition in an Int64).
RANGE_BITS = 28
RANGE_MASK = (1 << RANGE_BITS) - 1


def mark_value(seq: int, end: int) -> int:
    """The mark of a partition's flush ``seq`` whose range ends before offset ``end``."""
    return (seq << RANGE_BITS) | (end & RANGE_MASK)


def sequence_of(value: int) -> int:
    """The flush sequence a mark holds (a mark without a range: the value itself)."""
    return value >> RANGE_BITS if value > RANGE_MASK else value


def range_end_of(value: int) -> int | None:
    """The low :data:`RANGE_BITS` bits of the flush's range end a mark holds (``None``: no range)."""
    return value & RANGE_MASK if value > RANGE_MASK else None


def floor_of(value: int) -> int:
    """The lowest mark of ``value``'s sequence: a document whose mark is below it lacks the flush."""
    return value & ~RANGE_MASK if value > RANGE_MASK else value


def parse_mark_key(key: str) -> tuple[str, int, int] | None:
    """``(topic, partition, part)`` of a mark's name (:func:`mark_key`), ``None`` for anything else."""
    name, _, part = key.partition("~")
    topic, sep, partition = name.rpartition("|")
    if not sep or not partition.isdigit() or (part and not part.isdigit()):
        return None
    return topic.replace("%2E", "."), int(partition), int(part or 0)


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
    """The source partitions of ``u`` whose share the stored ``doc`` does not hold yet (its mark is
    below the flush's sequence, :func:`floor_of`); ``seqs``: each partition's mark value.

    Empty: every share is there, or a mark of the same or a later sequence stands in its place
    (:func:`ahead_sources` tells this flush's own from another's). Not empty after a duplicate
    key: another writer inserted the document first, or one source of a merged update had
    been written apart (a redo of its range); those shares still have to be written.
    """
    return tuple(tp for tp in u.sources if applied_seq(doc, tp[0], tp[1], u.part) < floor_of(seqs[tp]))


def ahead_sources(
    u: DocUpdate, doc: Mapping[str, Any] | None, seqs: Mapping[tuple[str, int], int]
) -> tuple[tuple[tuple[str, int], int], ...]:
    """The source partitions of ``u`` whose mark in ``doc`` is of this flush's sequence or a later
    one but not this flush's own, with the stored mark: a later flush of the partition (this one
    is a zombie's) or the partition's ledger behind its documents; only the ledger can tell."""
    out = []
    for tp in u.sources:
        stored = applied_seq(doc, tp[0], tp[1], u.part)
        if stored >= floor_of(seqs[tp]) and stored != seqs[tp]:
            out.append((tp, stored))
    return tuple(out)


def marked(
    u: DocUpdate, update: dict[str, Any], seqs: Mapping[tuple[str, int], int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The filter and update of ``u`` with its marks (``seqs``: each source partition's mark value,
    :func:`mark_value`): skip the document if any source holds this sequence or a later one."""
    flt = u.filter()
    marks: dict[str, int] = {}
    for tp in u.sources:
        path = f"{MARKS}.{mark_key(tp[0], tp[1], u.part)}"
        value = seqs[tp]
        flt[path] = {"$not": {"$gte": floor_of(value)}}  # below the flush's sequence, or no mark yet
        marks[path] = value
    if marks:
        update = {**update, "$set": {**update.get("$set", {}), **marks}}
    return flt, update
