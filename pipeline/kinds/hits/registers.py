"""Where a stored visitor sketch's registers are, and how a reader takes them (both forms).

Apart from :mod:`pipeline.kinds.hits.layout` (names and ``_id`` rules, imported by every
command) because it needs :mod:`pipeline.core.uniques`, whose numpy ``preagg --help`` never loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.uniques import SHARED, WRITERS, Parts, Registers, unlisted_shared
from pipeline.kinds.hits.layout import RegisterFields, register_id
from pipeline.store.reads import find_in

#: Register documents read per statement (SecantusDB's ``$in`` is quadratic in its values).
IDS_PER_READ = 500


def register_ids(collection: str, doc_id: Any, holder: str, stored: Mapping[str, Any] | None) -> list[str]:
    """``_id`` of every register document of a stored holder that has registers: those it lists
    (``w``: :data:`~pipeline.core.uniques.PARTS` for the partitions' one, partitions for those
    written before it, :data:`~pipeline.core.uniques.SHARED` for the shared one), and the
    shared one of a holder written before writers listed it
    (:func:`~pipeline.core.uniques.unlisted_shared`). None for a holder whose registers are all
    in it (``f``, ``b``)."""
    held = stored or {}
    listed = [None if int(w) == SHARED else int(w) for w in held.get(WRITERS) or ()]
    if unlisted_shared(held):
        listed.insert(0, None)
    return list(dict.fromkeys(register_id(collection, doc_id, holder, w) for w in listed))


def stored_registers(doc: Mapping[str, Any], rf: RegisterFields) -> Registers:
    """A register document's registers as :func:`~pipeline.core.uniques.estimate` reads them."""
    parts = doc.get(rf.parts)
    if parts is not None:
        return Parts(tuple((k, bytes(v)) for k, v in parts.items()))
    blob = doc.get(rf.blob)
    if blob is not None:
        return bytes(blob)
    words: Mapping[str, Any] = doc.get(rf.registers) or {}
    return words


async def read_registers(
    db: AsyncDatabase[dict[str, Any]],
    rf: RegisterFields,
    ids: Iterable[str],
    session: AsyncClientSession | None = None,
) -> dict[str, Registers]:
    """The register documents of ``ids`` that exist, by ``_id``, read :data:`IDS_PER_READ` at a time."""
    found: dict[str, Registers] = {}
    async for d in find_in(db[rf.collection], list(dict.fromkeys(ids)), chunk=IDS_PER_READ, session=session):
        found[d["_id"]] = stored_registers(d, rf)
    return found


def registers_filter(rf: RegisterFields, registers: Registers) -> dict[str, Any]:
    """The equality on a register document's registers as read (any form)."""
    if isinstance(registers, Parts):
        return {rf.parts: dict(registers.fields)}
    if isinstance(registers, bytes):
        return {rf.blob: registers}
    return {rf.registers: registers or None}
