"""The protocol every stream kind's aggregator follows (quix-streams' initialize/agg/result)."""

from __future__ import annotations

from typing import Protocol

from pipeline.core.rejection import Rejection
from pipeline.core.updates import DocUpdate


class Aggregator(Protocol):
    """Per-window state of one stream kind (initialize = construct, agg = ingest, result = plan)."""

    def ingest(self, raw: bytes) -> Rejection | None: ...

    def __len__(self) -> int: ...

    def documents(self) -> int:
        """At least the number of documents :meth:`plan` writes (cheap: called per message)."""
        ...

    def plan(self) -> list[DocUpdate]: ...
