"""A flush's unique visitors, per quarter hour, into the sketch fields of its documents (pure).

The aggregator keeps, per (site, page, UTC quarter hour), the in-memory hashes of the
visitors it saw (:func:`~pipeline.kinds.hits.visitors.ident_hash`). The plan hashes each
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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bson import Binary

from pipeline.core.uniques import (
    EXPLICIT,
    INLINE,
    OVERFLOW,
    PARTS,
    SHARED,
    WRITERS,
    Budget,
    explicit_fields,
    explicit_hashes,
    holder_key,
    merged_blob,
    register_ranks,
    register_words,
)
from pipeline.core.updates import DocUpdate, get_path
from pipeline.kinds.hits.layout import RegisterFields, register_fields, register_id
from pipeline.kinds.hits.visitors import keyed_hash

VisitKey = tuple[str, str, int]
"""(site, page, UTC quarter hour since the epoch): every zone's midnight is on a quarter hour."""

Visits = dict[VisitKey, set[int]]
"""Per (site, page, quarter hour), the in-memory hashes of its visitors."""

#: Partitions whose registers a holder kept in itself may hold (``b.<partition>``, up to 12 KB
#: each): a site rollup stays under 1 MB of registers; higher partitions write documents of
#: their own, listed in ``w``, as a page's holders do.
INLINE_PARTITIONS = 64

#: Where one quarter hour of a page's visitors goes: (document update, holder path) pairs,
#: and the local day whose key hashes them.
Targets = Callable[[str, str, int], tuple[int, Iterable[tuple[DocUpdate, str]]]]


def add_visitors(
    visits: Mapping[VisitKey, set[int]],
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
    """
    holders: dict[tuple[int, str], tuple[DocUpdate, set[int]]] = {}
    salted: dict[tuple[int, int], int] = {}
    for (site, page, slot), idents in visits.items():
        ordinal, where = targets(site, page, slot)
        key = key_of(ordinal)
        keyed = []
        for ident in idents:
            h = salted.get((ordinal, ident))
            if h is None:
                h = salted[ordinal, ident] = keyed_hash(key, ident)
            keyed.append(h)
        for upd, path in where:
            got = holders.get((id(upd), path))
            if got is None:
                got = holders[id(upd), path] = (upd, set())
            got[1].update(keyed)
    rf = registers or register_fields()
    out: list[DocUpdate] = []
    for (_, path), (upd, hashes) in holders.items():
        key = holder_key(upd.collection, upd.id, path)
        forced = None if assumed is None else key in assumed
        if not budget.registers(upd.collection, upd.id, path, len(hashes), forced):
            had = explicit_hashes(upd.add_to_set.get(f"{path}.{EXPLICIT}", ()))
            upd.add_to_set.update(explicit_fields(path, hashes | had))
            continue
        if record is not None:
            record.add(key)
        upd.max[f"{path}.{OVERFLOW}"] = True
        if writer is not None and writer < INLINE_PARTITIONS and inline is not None and inline(upd, path):
            upd.compute = _chained(upd.compute, _maxed(f"{path}.{INLINE}.{writer}", register_ranks(hashes)))
            upd.owned = True
            continue
        # The holder lists the registers' document, written first (``before``): a fold that
        # empties ``w`` between the two leaves the listing, never a document unlisted.
        upd.add_to_set[f"{path}.{WRITERS}"] = [SHARED if writer is None else PARTS]
        if writer is None:
            words = register_words(hashes)
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
                compute=_maxed(f"{rf.parts}.{writer}", register_ranks(hashes)),
                before=True,
                owned=True,
            )
        )
    return out


Compute = Callable[[dict[str, Any] | None], dict[str, Any]]


def _maxed(field: str, ranks: dict[int, int]) -> Compute:
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
