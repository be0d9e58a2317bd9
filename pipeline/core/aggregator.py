"""The protocol every stream kind's aggregator follows (quix-streams' initialize/agg/result)."""

from __future__ import annotations

from typing import Protocol

from pipeline.core.rejection import Rejection
from pipeline.core.updates import DocUpdate


class Aggregator(Protocol):
    """Per-window state of one stream kind (initialize = construct, agg = ingest, result = plan)."""

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Take one event line from Kafka partition ``partition`` (a rejection is returned, not raised).

        Aggregates that every worker would write (an item's total, when events are keyed by
        user) are kept per source partition: one partition has one owner at a time, so
        such documents never meet two workers' transactions (docs/deployment.md).
        """
        ...

    def __len__(self) -> int: ...

    def documents(self) -> int:
        """At least the number of documents :meth:`plan` writes (cheap: called per message)."""
        ...

    def plan(self) -> list[DocUpdate]: ...

    # Optional (looked up with getattr, so kinds defined elsewhere need not have them):
    #
    # ``decisions() -> bytes | None``: what the last plan decided from the worker's own state
    # rather than from the events (hits: the pages refused a document past the day's cap).
    # A flush's intent records it; ``assume(decisions)`` makes a later plan of the same
    # events decide the same way (a redo on another worker: docs/exactly-once.md).
    #
    # ``ranged(start, end)``: told before the plan the range of its partition it is planned for
    # (``start`` ``None``: the partition's first flush): a stage keeping state between flushes
    # plans from the state at ``start`` (the visits stage, pipeline/kinds/hits/visit_stage.py).
