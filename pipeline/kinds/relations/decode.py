"""Decoding of relation events (pure)."""

from __future__ import annotations

from pipeline.core.decode import EventDecoder
from pipeline.core.fields import event_schema
from pipeline.core.ids import Id
from pipeline.core.rejection import Rejection
from pipeline.kinds.relations.layout import FOLDER

Relation = tuple[Id, Id]


class RelationDecoder:
    """One line → ``(user, item)`` or a :class:`Rejection`."""

    def __init__(self, max_bytes: int) -> None:
        self._decoder = EventDecoder("relation", event_schema(FOLDER), max_bytes)

    def decode(self, raw: bytes) -> Relation | Rejection:
        """The relation, or why it is refused."""
        obj = self._decoder.decode(raw)
        if isinstance(obj, Rejection):
            return obj
        return obj["user"], obj["item"]
