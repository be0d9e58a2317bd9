"""The unique-visitor sketches of a rebuilt rollup: the union of its pages' sketches.

A rollup's counters are sums of its pages' counters (:mod:`.rebuild`); its sketches are
unions (:func:`pipeline.core.uniques.union`): the pages' explicit hashes, and the registers
of the pages' holders that have them, read from the registers' collection by ``_id``. A
sketch is not a counter: summed as one, a rebuilt rollup kept only the overflow marks and
lost every explicit hash (a site's visitors read 0 after a rebuild).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.uniques import overflowed, union
from pipeline.kinds.hits.layout import RegisterFields, register_id
from pipeline.kinds.hits.registers import read_registers, register_ids


class Sketches:
    """The holders of one rollup's page documents, gathered as they are read, then unioned."""

    def __init__(self, visitors: str, hourly: str | None) -> None:
        self.visitors = visitors
        self.hourly = hourly
        #: holder path → [(page collection, page _id, stored holder)]
        self.holders: dict[str, list[tuple[str, Any, Mapping[str, Any]]]] = {}

    def take(self, collection: str, doc_id: Any, doc: dict[str, Any]) -> None:
        """Remove ``doc``'s sketches (a page document being summed) and keep them."""
        held = doc.pop(self.visitors, None)
        if isinstance(held, Mapping):
            self.holders.setdefault(self.visitors, []).append((collection, doc_id, held))
        hours = doc.pop(self.hourly, None) if self.hourly else None
        if isinstance(hours, Mapping):
            for hour, h in hours.items():
                if isinstance(h, Mapping):
                    self.holders.setdefault(f"{self.hourly}.{hour}", []).append((collection, doc_id, h))

    async def write(
        self,
        db: AsyncDatabase[dict[str, Any]],
        rf: RegisterFields,
        into: dict[str, Any],
        collection: str,
        doc_id: str,
    ) -> None:
        """Put the unions into ``into`` (the rollup about to be replaced) and replace its register
        documents: the union's words, or none when the union is explicit."""
        regs = db[rf.collection]
        wanted = (
            r
            for path, hs in self.holders.items()
            for c, i, h in hs
            if overflowed(h)
            for r in register_ids(c, i, path, h)
        )
        found = await read_registers(db, rf, wanted)
        for path, hs in self.holders.items():
            mine = [r for c, i, h in hs if overflowed(h) for r in register_ids(c, i, path, h)]
            holder, words = union([h for *_, h in hs], [found.get(r) for r in mine])
            at = into
            *parents, last = path.split(".")
            for part in parents:
                at = at.setdefault(part, {})
            at[last] = holder
            rid = register_id(collection, doc_id, path)
            if words:
                stored = {"_id": rid, rf.registers: {str(w): m for w, m in words.items()}}
                await regs.replace_one({"_id": rid}, stored, upsert=True)
            else:
                await regs.delete_one({"_id": rid})
