"""Where a stored visitor sketch's registers are, and how a reader takes them (both forms).

Apart from :mod:`pipeline.kinds.hits.layout` (names and ``_id`` rules, imported by every
command) because it needs :mod:`pipeline.core.uniques`, whose numpy ``preagg --help`` never loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.uniques import WRITERS, Registers
from pipeline.kinds.hits.layout import RegisterFields, register_id
from pipeline.store.reads import find_in

#: Register documents read per statement (SecantusDB's ``$in`` is quadratic in its values).
IDS_PER_READ = 500


def register_ids(collection: str, doc_id: Any, holder: str, stored: Mapping[str, Any] | None) -> list[str]:
    """``_id`` of every register document of a stored holder that has registers: the shared one
    (written by older workers, or several partitions in one aggregate), and each partition's it
    lists (``w``)."""
    writers = (stored or {}).get(WRITERS) or ()
    shared = register_id(collection, doc_id, holder)
    return [shared, *(register_id(collection, doc_id, holder, int(w)) for w in writers)]


def stored_registers(doc: Mapping[str, Any], rf: RegisterFields) -> Registers:
    """A register document's registers as :func:`~pipeline.core.uniques.estimate` reads them."""
    blob = doc.get(rf.blob)
    if blob is not None:
        return bytes(blob)
    words: Mapping[str, Any] = doc.get(rf.registers) or {}
    return words


async def read_registers(
    db: AsyncDatabase[dict[str, Any]], rf: RegisterFields, ids: Iterable[str]
) -> dict[str, Registers]:
    """The register documents of ``ids`` that exist, by ``_id``, read :data:`IDS_PER_READ` at a time."""
    found: dict[str, Registers] = {}
    async for d in find_in(db[rf.collection], list(dict.fromkeys(ids)), chunk=IDS_PER_READ):
        found[d["_id"]] = stored_registers(d, rf)
    return found
