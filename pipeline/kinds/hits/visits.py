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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from bson import Binary

from pipeline.core.calendar import SLOT
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


@dataclass(frozen=True, slots=True)
class Places:
    """Where a plan puts a window's visitors: its documents and their sketches' paths."""

    #: (site, UTC quarter hour) → (the site's local day ordinal, the day's first minute).
    day_of: Callable[[str, int], tuple[int, int]]
    #: (site, page, local day ordinal, its first minute) → the day documents its visitors go
    #: to, the month documents, and whether the days keep hours.
    documents: Callable[[str, str, int, int], tuple[Sequence[DocUpdate], Sequence[DocUpdate], bool]]
    #: A day's sketch, the prefix of its hours' (``<hours>.<h>``), a month's.
    day: str
    hours: str
    month: str


def add_visitors(
    visits: VisitLog,
    places: Places,
    key_of: Callable[[int], bytes],
    budget: Budget,
    assumed: frozenset[bytes] | None = None,
    record: set[bytes] | None = None,
    registers: RegisterFields | None = None,
    writer: int | None = None,
    inline: Callable[[DocUpdate, str], bool] | None = None,
    elsewhere: Callable[[DocUpdate, str], bool] | None = None,
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

    ``elsewhere``: the holders whose listing of register documents another flusher writes
    (the site rollups' days and months for the pages' flusher when the rollups run ahead,
    pipeline/kinds/hits/families.py; it decides with its own budget whether they have
    registers). This flusher writes their registers whenever they would not be kept in the
    holder itself, whatever its budget says (its count of a holder runs behind the other's);
    a register document no holder lists is never read.

    Which holders get registers is the worker's own state (its :class:`Budget`): ``record``
    collects their :func:`~pipeline.core.uniques.holder_key`, which the flush's intent keeps,
    and a flush written again (``assumed``: those keys) writes exactly those as registers and
    the others explicit, so that its upserts split into the same parts as the first time.

    Per hit the work is numpy's (:func:`holder_hashes`); per holder and per (day, visitor) it
    is Python's.
    """
    holders, grouped = holder_hashes(visits, places, key_of)
    rf = registers or register_fields()
    out: list[DocUpdate] = []
    for (upd, path), hashes in zip(holders, grouped, strict=True):
        key = holder_key(upd.collection, upd.id, path)
        forced = None if assumed is None else key in assumed
        if elsewhere is not None and elsewhere(upd, path):
            if writer is not None and writer < INLINE_PARTITIONS and inline is not None and inline(upd, path):
                continue  # in the other flusher's document itself
            forced = True
        if not budget.registers_of(key, len(hashes), forced):
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


#: Holder codes per document: 0 its day's (month's) sketch, 1 + h its hour h's (a local day
#: has up to 25 hours).
_STRIDE = 32


def holder_hashes(
    visits: VisitLog, places: Places, key_of: Callable[[int], bytes]
) -> tuple[list[tuple[DocUpdate, str]], list[np.ndarray]]:  # type: ignore[type-arg]
    """Every holder the visits go to, and its distinct keyed hashes as signed 64-bit integers in
    ascending order (the explicit form's chunk, :func:`explicit_chunk`): each (local day,
    visitor) hashed once with its day's key, each (holder, keyed hash) once.

    Python is asked once per (site, quarter hour) and once per (site, page, local day); per hit
    the work is numpy's: a holder is a number (its document's, times :data:`_STRIDE`, plus its
    hour's), and the (holder, hash) pairs are made distinct by one sort. Holders come in the
    order of their documents' first (site, page, day), in the log's index order.
    """
    page, slot, hi, lo = visits.columns()
    if not len(page):
        return [], []
    names = list(visits.pages)
    sites: dict[str, int] = {}
    site_of = np.fromiter((sites.setdefault(s, len(sites)) for s, _ in names), np.int64, len(names))
    site_names = list(sites)
    # (site, quarter hour) → (local day, its start minute), asked once each
    quarters, inverse = np.unique((site_of[page] << 32) | slot.astype(np.int64), return_inverse=True)
    asked = [places.day_of(site_names[q >> 32], q & 0xFFFFFFFF) for q in quarters.tolist()]
    ordinal = np.array([o for o, _ in asked], dtype=np.int64)[inverse]
    start = np.array([m for _, m in asked], dtype=np.int64)[inverse]
    hour = (slot.astype(np.int64) * SLOT - start) // 60
    # (site, page, local day) → its documents, asked once each
    base = int(ordinal.min())
    span = int(ordinal.max()) - base + 1
    days, day_of_hit = np.unique(page.astype(np.int64) * span + (ordinal - base), return_inverse=True)
    day_start = np.empty(len(days), dtype=np.int64)
    day_start[day_of_hit] = start  # a page day's hits share its day's first minute
    docs: dict[int, int] = {}
    upds: list[tuple[DocUpdate, bool]] = []
    rows: list[tuple[list[int], list[int], bool]] = []
    for d, first_minute in zip(days.tolist(), day_start.tolist(), strict=True):
        site, pg = names[d // span]
        day_docs, month_docs, hours_kept = places.documents(site, pg, base + d % span, first_minute)
        numbered = []
        for month, group in ((False, day_docs), (True, month_docs)):
            row = []
            for u in group:
                n = docs.setdefault(id(u), len(upds))
                if n == len(upds):
                    upds.append((u, month))
                row.append(n)
            numbered.append(row)
        rows.append((numbered[0], numbered[1], hours_kept))
    width = max(len(r[0]) + len(r[1]) for r in rows)
    doc = np.full((len(rows), width), -1, dtype=np.int64)
    hourly = np.zeros((len(rows), width), dtype=bool)
    for i, (day_row, month_row, hours_kept) in enumerate(rows):
        doc[i, : len(day_row) + len(month_row)] = day_row + month_row
        hourly[i, : len(day_row)] = hours_kept
    # each (local day, visitor) hashed once with its day's key
    (o, h, low), keyed_of = first_of_runs(ordinal, hi, lo)
    day_keys = {x: key_of(x) for x in set(o.tolist())}
    keyed = np.fromiter(
        (
            keyed_hash(day_keys[x], (a << 64) | b)
            for x, a, b in zip(o.tolist(), h.tolist(), low.tolist(), strict=True)
        ),
        dtype=np.uint64,
        count=len(o),
    )[keyed_of].view(np.int64)
    held_by, held_hash = [], []
    for j in range(width):
        n = doc[day_of_hit, j]
        has = n >= 0
        held_by.append(n[has] * _STRIDE)
        held_hash.append(keyed[has])
        hours = has & hourly[day_of_hit, j]
        held_by.append(n[hours] * _STRIDE + 1 + hour[hours])
        held_hash.append(keyed[hours])
    if not held_by:
        return [], []
    (by, hashes), _ = first_of_runs(np.concatenate(held_by), np.concatenate(held_hash))
    if not len(by):
        return [], []
    starts = np.flatnonzero(np.diff(by)) + 1
    bounds = zip([0, *starts.tolist()], [*starts.tolist(), len(by)], strict=True)
    grouped = [hashes[a:b] for a, b in bounds]
    holders = []
    for code in by[np.concatenate(([0], starts))].tolist():
        (u, month), r = upds[code // _STRIDE], code % _STRIDE
        holders.append((u, places.month if month else places.day if r == 0 else f"{places.hours}.{r - 1}"))
    return holders, grouped


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
