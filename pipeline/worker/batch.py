"""What one flush carries: the aggregate, the refused events, and the source positions.

Offsets are kept per source partition as ``[first, last]`` so that a flush can be
recorded with the exact range it covers (needed for exactly-once commits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from pipeline.aggregate.updates import DocUpdate
from pipeline.ingest.validate import Rejection
from pipeline.worker.deadletter import DeadLetter


class Aggregator(Protocol):
    """Per-window state of one stream kind (initialize = construct, agg = ingest, result = plan)."""

    def ingest(self, raw: bytes) -> Rejection | None: ...

    def __len__(self) -> int: ...

    def plan(self) -> list[DocUpdate]: ...


A = TypeVar("A", bound=Aggregator)
TP = tuple[str, int]


@dataclass
class PendingBatch(Generic[A]):
    """Everything ingested since the last flush."""

    aggregate: A
    dead: list[DeadLetter] = field(default_factory=list)
    offsets: dict[TP, tuple[int, int]] = field(default_factory=dict)
    acks: list[object] = field(default_factory=list)
    events: int = 0

    def ingest_message(self, tp: TP, offset: int, lines: list[bytes], ack: object) -> None:
        """Aggregate one Kafka message's events; remember its position and its ack handle."""
        for i, raw in enumerate(lines):
            rejection = self.aggregate.ingest(raw)
            if rejection is not None:
                self.dead.append(DeadLetter(rejection, tp[0], tp[1], offset, i))
        self.events += len(lines)
        first, _ = self.offsets.get(tp, (offset, offset))
        self.offsets[tp] = (first, offset)
        self.acks.append(ack)

    def empty(self) -> bool:
        """True when no message was ingested."""
        return not self.acks

    def pending_keys(self) -> int:
        """Distinct aggregate keys held in memory."""
        return len(self.aggregate)

    def rejected_by_reason(self) -> dict[str, int]:
        """Count of refused events per reason code."""
        out: dict[str, int] = {}
        for d in self.dead:
            out[d.rejection.reason] = out.get(d.rejection.reason, 0) + 1
        return out


def new_batch(factory: Callable[[], A]) -> PendingBatch[A]:
    """An empty batch around a fresh aggregate."""
    return PendingBatch(aggregate=factory())
