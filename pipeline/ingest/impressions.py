"""Decoding of impression and relation events (pure)."""

from __future__ import annotations

from pipeline.aggregate.keys import Id
from pipeline.ingest.hits import TimedDecoder
from pipeline.ingest.validate import EventDecoder, Rejection

Impression = tuple[Id, Id, float]
Relation = tuple[Id, Id]


class ImpressionDecoder(TimedDecoder):
    """One line → ``(user, item, ts)`` or a :class:`Rejection` (schema, time, future skew)."""

    kind = "impression"
    fields = ("user", "item")

    def decode(self, raw: bytes) -> Impression | Rejection:
        """The impression, or why it is refused."""
        result: Impression | Rejection = super().decode(raw)
        return result


class RelationDecoder:
    """One line → ``(user, item)`` or a :class:`Rejection`."""

    def __init__(self, max_bytes: int) -> None:
        self._decoder = EventDecoder("relation", max_bytes)

    def decode(self, raw: bytes) -> Relation | Rejection:
        """The relation, or why it is refused."""
        obj = self._decoder.decode(raw)
        if isinstance(obj, Rejection):
            return obj
        return obj["user"], obj["item"]


Listen = tuple[Id, Id, Id, float]


class ListenDecoder(TimedDecoder):
    """One line → ``(user, tag, song, ts)`` or a :class:`Rejection`."""

    kind = "listen"
    fields = ("user", "tag", "song")

    def decode(self, raw: bytes) -> Listen | Rejection:
        """The listen, or why it is refused."""
        result: Listen | Rejection = super().decode(raw)
        return result
