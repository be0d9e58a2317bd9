"""The unit a flush writes: one upsert of one document, all its increments combined."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class DocUpdate:
    """Upsert of ``id`` in ``collection``: ``$inc``, ``$bit or``, ``$set`` and ``$setOnInsert`` parts."""

    collection: str
    id: int | str
    set_on_insert: dict[str, Any]
    inc: dict[str, int] = field(default_factory=dict)
    set: dict[str, Any] = field(default_factory=dict)
    #: Dotted path → signed int64 mask to OR in (Bloom filter words).
    bit_or: dict[str, int] = field(default_factory=dict)
    #: Read-modify-write: given the stored document (``None`` if absent), the fields
    #: to ``$set``. The sink reads the documents inside the flush's transaction.
    compute: Callable[[dict[str, Any] | None], dict[str, Any]] | None = None
    #: Equalities the filter carries besides ``_id``: the collection's shard key (an upsert
    #: on a sharded collection needs all of it; on insert MongoDB copies them into the document).
    key: dict[str, Any] = field(default_factory=dict)

    def filter(self) -> dict[str, Any]:
        """The upsert's filter: ``_id`` and the shard key's equalities."""
        return {"_id": self.id, **self.key} if self.key else {"_id": self.id}

    def add(self, path: str, n: int) -> None:
        """Add ``n`` to counter ``path`` (dotted) of this update."""
        self.inc[path] = self.inc.get(path, 0) + n


def split_wide(updates: list[DocUpdate], max_fields: int) -> list[DocUpdate]:
    """Split updates with more than ``max_fields`` counters into several upserts of the same document.

    ``0`` never splits (one upsert per document). Only backfills produce wide
    updates; splitting them helps stores whose update cost grows faster than the
    number of fields (SecantusDB: see docs/benchmarks.md).
    """
    if max_fields <= 0 or all(len(u.inc) <= max_fields for u in updates):
        return updates
    out: list[DocUpdate] = []
    for u in updates:
        if len(u.inc) <= max_fields:
            out.append(u)
            continue
        items = list(u.inc.items())
        for i in range(0, len(items), max_fields):
            first = i == 0
            out.append(
                DocUpdate(
                    u.collection,
                    u.id,
                    u.set_on_insert if first else {},
                    dict(items[i : i + max_fields]),
                    u.set if first else {},
                    u.bit_or if first else {},
                    u.compute if first else None,
                    u.key,
                )
            )
    return out
