"""Where a stored visitor sketch's registers are, and how a reader takes them (both forms).

Apart from :mod:`pipeline.kinds.hits.layout` (names and ``_id`` rules, imported by every
command) because it needs :mod:`pipeline.core.uniques`, whose numpy ``preagg --help`` never loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.uniques import WRITERS, Registers
from pipeline.kinds.hits.layout import RegisterFields, register_id


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
