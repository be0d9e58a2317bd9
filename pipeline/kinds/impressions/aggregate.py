"""Impression counts per (user, item), per item, and per item and day (pure).

Three pre-aggregates, each an upsert per touched document per flush:

* pairs ``{_id: <int64 pair key>, u, i, c}``: ``$inc c`` by the pair's real
  multiplicity in the window (the seed counted a pair once per batch and started
  new documents at 1); the stable key makes concurrent workers and restarts agree,
  and the upsert leaves no find-then-insert race;
* items ``{_id: <item>, c}``: the item's total, so ranking items reads no pairs;
* items by day ``{_id: "YYYYMMDD|<item>", d: "YYYYMMDD", i, c}`` for the top per day.
"""

from __future__ import annotations

from pipeline.core.ids import Id, item_slot_id, pair_key
from pipeline.core.rejection import Rejection
from pipeline.core.times import day_key
from pipeline.core.updates import DocUpdate
from pipeline.kinds.impressions.decode import ImpressionDecoder
from pipeline.kinds.impressions.layout import ImpressionFields


class ImpressionCounts:
    """The initialize/agg/result aggregator of impressions for one flush window."""

    __slots__ = ("daily", "decoder", "fields", "pairs")

    def __init__(self, decoder: ImpressionDecoder, fields: ImpressionFields) -> None:
        self.decoder = decoder
        self.fields = fields
        self.pairs: dict[tuple[Id, Id], int] = {}
        #: (day, item, source partition) → impressions.
        self.daily: dict[tuple[str, Id, int], int] = {}

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Count one encoded impression; a rejection is returned, not raised."""
        imp = self.decoder.decode(raw)
        if isinstance(imp, Rejection):
            return imp
        user, item, ts = imp
        self.pairs[(user, item)] = self.pairs.get((user, item), 0) + 1
        dk = (day_key(ts), item, partition)
        self.daily[dk] = self.daily.get(dk, 0) + 1
        return None

    def __len__(self) -> int:
        return len(self.pairs) + len(self.daily)

    def documents(self) -> int:
        """Pair, item-day and item documents (an item-day has one item document at most)."""
        return len(self.pairs) + 2 * len(self.daily)

    def plan(self) -> list[DocUpdate]:
        """One upsert per touched pair, item and item-day document."""
        fp, fi, fd = self.fields.pairs, self.fields.items, self.fields.daily
        out: list[DocUpdate] = []
        for (user, item), n in self.pairs.items():
            u = DocUpdate(fp["collection"], pair_key(user, item), {fp["user"]: user, fp["item"]: item})
            u.add(fp["count"], n)
            out.append(u)
        # Item and item-day totals per source partition: written by that partition's owner only.
        items: dict[tuple[Id, int], int] = {}
        for (_day, item, part), n in self.daily.items():
            items[(item, part)] = items.get((item, part), 0) + n
        for (item, part), n in items.items():
            u = DocUpdate(fi["collection"], item_slot_id(item, part), {fi["item"]: item})
            u.add(fi["count"], n)
            out.append(u)
        for (day, item, part), n in self.daily.items():
            u = DocUpdate(
                fd["collection"], f"{day}|{item_slot_id(item, part)}", {fd["day"]: day, fd["item"]: item}
            )
            u.add(fd["count"], n)
            out.append(u)
        return out
