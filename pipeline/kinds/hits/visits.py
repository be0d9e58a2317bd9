"""A flush's unique visitors, per quarter hour, into the sketch fields of its documents (pure).

The aggregator logs, per (site, page, UTC quarter hour), the in-memory hashes of the
visitors it saw (:func:`~pipeline.kinds.hits.visitors.ident_hash`,
:mod:`pipeline.kinds.hits.visit_log`). The plan hashes each
with its local day's key (:func:`~pipeline.kinds.hits.visitors.keyed_hash`) and adds the
keyed hashes to every holder the hit's counters go to: the page's day (``visitors``) and
hour of the day (``hourly_visitors.<h>``), the page's month, the site's day, hour and month.
Each holder gets ``$addToSet`` and ``$max`` fields (:mod:`pipeline.core.uniques`): explicit
hashes while small, registers once this worker has written
:data:`~pipeline.core.uniques.EXPLICIT_MAX` to it, a field per partition in a document of their
own, listed in the holder's ``w`` and written before it (``DocUpdate.before``); a site rollup's day
and month keep them in the holder itself (``b.<partition>``), so that a chart reads one
document a day.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from bson import Binary

from pipeline.core.uniques import (
    EXPLICIT,
    INLINE,
    OVERFLOW,
    PARTS,
    SHARED,
    WRITERS,
    Budget,
    PackedInts,
    explicit_fields,
    explicit_hashes,
    holder_key,
    merged_blob,
    register_ranks_of,
    register_words,
)
from pipeline.core.updates import DocUpdate, get_path
from pipeline.kinds.hits.layout import RegisterFields, register_fields, register_id
from pipeline.kinds.hits.visit_log import VisitLog, first_of_runs
from pipeline.kinds.hits.visitors import keyed_hash

#: Partitions whose registers a holder kept in itself may hold (``b.<partition>``, up to 12 KB
#: each): a site rollup stays under 1 MB of registers; higher partitions write documents of
#: their own, listed in ``w``, as a page's holders do.
INLINE_PARTITIONS = 64

#: Where one quarter hour of a page's visitors goes: (document update, holder path) pairs,
#: and the local day whose key hashes them.
Targets = Callable[[str, str, int], tuple[int, Iterable[tuple[DocUpdate, str]]]]


def add_visitors(
    visits: VisitLog,
    targets: Targets,
    key_of: Callable[[int], bytes],
    budget: Budget,
    assumed: frozenset[bytes] | None = None,
    record: set[bytes] | None = None,
    registers: RegisterFields | None = None,
    writer: int | None = None,
    inline: Callable[[DocUpdate, str], bool] | None = None,
) -> list[DocUpdate]:
    """Add the visitors of ``visits`` to their documents' sketch fields (``DocUpdate.max``); the
    upserts of the registers of the holders that have them (documents of their own,
    :func:`~pipeline.kinds.hits.layout.register_id`, kept out of the counters' documents, which
    charts read).

    ``writer``: the one source partition of these visits (an idempotent-writes batch plans each
    partition apart): each holder's registers are then that partition's field of the partitions'
    document, codec bytes read, maxed and set (:func:`~pipeline.core.uniques.merged_blob`), an
    update the flush merges with its other partitions' (``owned``: one write per holder, not
    one per partition), and the holder lists the document (``w``:
    :data:`~pipeline.core.uniques.PARTS`) so that a reader finds it by ``_id``. ``None``
    (several partitions in one aggregate): the shared document, ``$bit or`` of its words.

    ``inline``: the holders that keep a partition's registers in themselves (``b.<writer>``,
    read, maxed and set by the holder's own update, :data:`INLINE_PARTITIONS` at most): a site
    rollup's day and month, which a chart reads, and folds once settled.

    Which holders get registers is the worker's own state (its :class:`Budget`): ``record``
    collects their :func:`~pipeline.core.uniques.holder_key`, which the flush's intent keeps,
    and a flush written again (``assumed``: those keys) writes exactly those as registers and
    the others explicit, so that its upserts split into the same parts as the first time.

    Per hit the work is numpy's (:func:`holder_hashes`); per holder and per (day, visitor) it
    is Python's.
    """
    holders, grouped = holder_hashes(visits, targets, key_of)
    rf = registers or register_fields()
    out: list[DocUpdate] = []
    for (upd, path), hashes in zip(holders, grouped, strict=True):
        key = holder_key(upd.collection, upd.id, path)
        forced = None if assumed is None else key in assumed
        if not budget.registers(upd.collection, upd.id, path, len(hashes), forced):
            had = upd.add_to_set.get(f"{path}.{EXPLICIT}")
            if had:
                upd.add_to_set.update(explicit_fields(path, set(hashes.tolist()) | explicit_hashes(had)))
            else:
                upd.add_to_set[f"{path}.{EXPLICIT}"] = [PackedInts.of(hashes)]  # a chunk
            continue
        if record is not None:
            record.add(key)
        upd.max[f"{path}.{OVERFLOW}"] = True
        if writer is not None and writer < INLINE_PARTITIONS and inline is not None and inline(upd, path):
            ranks = register_ranks_of(hashes)
            upd.compute = _chained(upd.compute, _maxed(f"{path}.{INLINE}.{writer}", ranks))
            upd.owned = True
            continue
        # The holder lists the registers' document, written first (``before``): a fold that
        # empties ``w`` between the two leaves the listing, never a document unlisted.
        upd.add_to_set[f"{path}.{WRITERS}"] = [SHARED if writer is None else PARTS]
        if writer is None:
            words = register_words(hashes.astype(np.uint64).tolist())
            bit_or = {f"{rf.registers}.{w}": m for w, m in words.items()}
            out.append(
                DocUpdate(
                    rf.collection, register_id(upd.collection, upd.id, path), {}, bit_or=bit_or, before=True
                )
            )
            continue
        out.append(
            DocUpdate(
                rf.collection,
                register_id(upd.collection, upd.id, path, PARTS),
                {},
                compute=_maxed(f"{rf.parts}.{writer}", register_ranks_of(hashes)),
                before=True,
                owned=True,
            )
        )
    return out


def holder_hashes(
    visits: VisitLog, targets: Targets, key_of: Callable[[int], bytes]
) -> tuple[list[tuple[DocUpdate, str]], list[np.ndarray]]:  # type: ignore[type-arg]
    """Every holder the visits go to, in the order first met, and its distinct keyed hashes as
    signed 64-bit integers in ascending order (the explicit form's chunk, :func:`explicit_chunk`):
    each (key, visitor) once, each (local day, visitor) hashed once with its day's key, each
    (holder, keyed hash) once."""
    keys = list(visits)
    if not keys:
        return [], []
    ids: dict[tuple[int, str], int] = {}
    holders: list[tuple[DocUpdate, str]] = []
    ordinals = np.empty(len(keys), dtype=np.int64)
    rows: list[list[int]] = []
    for k, (site, page, slot) in enumerate(keys):
        ordinals[k], where = targets(site, page, slot)
        row = []
        for upd, path in where:
            h = ids.setdefault((id(upd), path), len(holders))
            if h == len(holders):
                holders.append((upd, path))
            row.append(h)
        rows.append(row)
    table = np.full((len(keys), max(map(len, rows), default=0)), -1, dtype=np.int64)
    for k, row in enumerate(rows):
        table[k, : len(row)] = row
    kidx, hi, lo = visits.distinct()
    (days, his, los), inverse = first_of_runs(ordinals[kidx], hi, lo)
    day_keys = {o: key_of(o) for o in set(days.tolist())}
    keyed = np.fromiter(
        (
            keyed_hash(day_keys[o], (h << 64) | low)
            for o, h, low in zip(days.tolist(), his.tolist(), los.tolist(), strict=True)
        ),
        dtype=np.uint64,
        count=len(days),
    )[inverse]
    columns = [table[kidx, j] for j in range(table.shape[1])]
    masks = [c >= 0 for c in columns]
    held_by = np.concatenate([c[m] for c, m in zip(columns, masks, strict=True)])
    held_hash = np.concatenate([keyed[m] for m in masks]).view(np.int64)
    if not len(held_by):
        return [], []
    (held_by, held_hash), _ = first_of_runs(held_by, held_hash)
    starts = np.flatnonzero(np.diff(held_by)) + 1
    bounds = zip([0, *starts.tolist()], [*starts.tolist(), len(held_by)], strict=True)
    grouped = [held_hash[a:b] for a, b in bounds]
    order = held_by[np.concatenate(([0], starts))].tolist()
    return [holders[h] for h in order], grouped


Compute = Callable[[dict[str, Any] | None], dict[str, Any]]


def _maxed(field: str, ranks: np.ndarray) -> Compute:  # type: ignore[type-arg]
    """The read-modify-write of one partition's registers at ``field`` (dotted): the stored ones
    with ``ranks`` maxed in."""

    def compute(found: dict[str, Any] | None) -> dict[str, Any]:
        stored = get_path(found or {}, field)
        return {field: Binary(merged_blob(bytes(stored) if stored else None, ranks))}

    return compute


def _chained(first: Compute | None, then: Compute) -> Compute:
    """Both read-modify-writes of one document (their fields apart)."""
    if first is None:
        return then
    return lambda found: {**first(found), **then(found)}
