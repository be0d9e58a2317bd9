"""Decoding of relation events (pure)."""

from __future__ import annotations

from pipeline.core.decode import FormatDecoder
from pipeline.core.fields import event_schema
from pipeline.core.ids import Id
from pipeline.core.rejection import Rejection
from pipeline.kinds.relations.layout import FOLDER

Relation = tuple[Id, Id]


class RelationDecoder(FormatDecoder):
    """One line → ``(user, item)`` or a :class:`Rejection`."""

    def __init__(self, max_bytes: int, fmt: str = "event") -> None:
        super().__init__("relation", event_schema(FOLDER), max_bytes, fmt)

    def decode(self, raw: bytes) -> Relation | Rejection:
        """The relation, or why it is refused."""
        obj = self.open(raw)
        if isinstance(obj, Rejection):
            return obj
        return obj["user"], obj["item"]
