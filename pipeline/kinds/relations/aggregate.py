"""Bloom-filter relations: per user the items related to it, per item the users (pure).

A flush ORs the window's new members into each touched filter with one upsert per
document: ``$bit: {"b.<w>": {or: mask}}`` per touched word and ``$inc n`` (relation
events added, to watch a filter outgrowing its sized capacity). OR is idempotent
and commutative, so concurrent writers need no coordination; the flush's
transaction still records the offsets like every other stream. See
:mod:`pipeline.core.bloom` for sizing, hashing and the document shape.
"""

from __future__ import annotations

from pipeline.core.bloom import bit_updates, merge_masks
from pipeline.core.ids import Id, item_slot_id
from pipeline.core.rejection import Rejection
from pipeline.core.updates import DocUpdate
from pipeline.kinds.relations.decode import RelationDecoder
from pipeline.kinds.relations.layout import RelationSides


class RelationFilters:
    """The initialize/agg/result aggregator of relations for one flush window."""

    __slots__ = ("adds_items", "adds_users", "decoder", "items", "sides", "users")

    def __init__(self, decoder: RelationDecoder, sides: RelationSides) -> None:
        self.decoder = decoder
        self.sides = sides
        self.users: dict[Id, dict[int, int]] = {}
        #: (item, source partition) → filter words to OR in.
        self.items: dict[tuple[Id, int], dict[int, int]] = {}
        self.adds_users: dict[Id, int] = {}
        self.adds_items: dict[tuple[Id, int], int] = {}

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Add one relation to both sides' pending masks."""
        rel = self.decoder.decode(raw)
        if isinstance(rel, Rejection):
            return rel
        user, item = rel
        merge_masks(self.users.setdefault(user, {}), self.sides.user_spec.masks(item))
        merge_masks(self.items.setdefault((item, partition), {}), self.sides.item_spec.masks(user))
        self.adds_users[user] = self.adds_users.get(user, 0) + 1
        self.adds_items[(item, partition)] = self.adds_items.get((item, partition), 0) + 1
        return None

    def __len__(self) -> int:
        return len(self.users) + len(self.items)

    def documents(self) -> int:
        """One filter document per touched user and per touched item."""
        return len(self.users) + len(self.items)

    def plan(self) -> list[DocUpdate]:
        """One upsert per touched filter document: ``$bit or`` per word, ``$inc`` adds."""
        out: list[DocUpdate] = []
        fu, fi = self.sides.users, self.sides.items
        for user, masks in self.users.items():
            u = DocUpdate(fu["collection"], user, {}, bit_or=bit_updates(fu["bits"], masks))
            u.add(fu["count"], self.adds_users[user])
            out.append(u)
        # An item's filter per source partition: written by that partition's owner only.
        for (item, part), masks in self.items.items():
            u = DocUpdate(
                fi["collection"],
                item_slot_id(item, part),
                {fi["item"]: item},
                bit_or=bit_updates(fi["bits"], masks),
            )
            u.add(fi["count"], self.adds_items[(item, part)])
            out.append(u)
        return out
