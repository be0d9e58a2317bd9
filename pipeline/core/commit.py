"""The commit port: what a flush hands its store, and what the store answers (pure).

A flusher (pipeline/worker/flusher.py) commits a batch's document updates together with
its *fences*, one per source partition: the position the batch started from, which the
store must still hold, and the position to move it to. A :class:`Sink` is any store that
can do that all or nothing (MongoDB's transaction, or idempotent marked writes); the
MongoDB sink (pipeline/store/sink.py) implements it, the unit tests' model stores too. No
adapter is imported here: a second store implements this module, not MongoDB's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pipeline.core.errors import EXIT_FENCED, PreaggError
from pipeline.core.updates import DocUpdate

#: A Kafka partition as the flushers key it: ``(topic, partition)``.
TP = tuple[str, int]

Forward = Callable[[Mapping[TP, int]], Awaitable[None]]
"""Sends a flush's records to another stage once its intent is recorded, given the flush's
sequence per source partition (the names a receiver takes each record once by): before any
document is written, so that a flush whose sends are not all acknowledged never commits."""


@dataclass(frozen=True)
class Fence:
    """A batch's claim on one partition: MongoDB holds ``expected``; the flush moves it to ``next``."""

    topic: str
    partition: int
    expected: int | None
    next: int
    #: Events of this partition in the batch, and refused ones by reason.
    events: int = 0
    rejected: Mapping[str, int] = field(default_factory=dict)
    #: Documents written and flushes: attributed to a flush's first partition only,
    #: so that sums over the ledger are exact.
    docs: int = 0
    flushes: int = 0
    #: The last record the batch counted on this partition: ``{offset, ts, digest}``
    #: (see :mod:`pipeline.core.incarnation`); stored as the ledger's ``last``.
    last: Mapping[str, Any] | None = None
    #: The batch's first offset on this partition (an intent records it: with no
    #: ledger yet, ``expected`` is ``None`` and the range to write again starts here).
    begin: int | None = None
    #: The writing worker's resident memory, bytes (stored as the ledger's ``rss``).
    rss: int | None = None
    #: The batch's "now" for its decisions (pipeline.core.clock): an intent records it, so
    #: that a redo of the range refuses and accepts exactly what the flush did.
    decided_at: float | None = None
    #: What the partition's plan decided from the worker's own state (hits: the pages it
    #: refused a document past the day's cap), recorded with the intent for a redo.
    decisions: bytes | None = None
    #: The ledger may not exist yet and starts at ``expected`` (a family's first flush starts
    #: where its kind's main ledger stands: pipeline/core/families.py).
    adopt: bool = False
    #: The families of documents flushed apart from this ledger's over the same partition: the
    #: main ledger records them, so that a family without a ledger of its own knows it never
    #: committed (rather than that it was not yet flushed apart).
    families: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pending:
    """A flush that recorded its intent on a partition and did not finish: its range is written again."""

    flush: str
    #: The flush's sequence on this partition: what its documents' marks hold (or will).
    seq: int
    #: The ledger's position (where the range starts) and the intent's end.
    start: int | None
    end: int
    #: The flush's "now" for its decisions (``None``: an intent written before it was recorded).
    decided_at: float | None = None
    #: The plan's recorded decisions (``Fence.decisions``).
    decisions: bytes | None = None
    #: Its marks carry the range's end (intents recorded before marks did: plain sequences).
    ranged: bool = False
    #: The ledger had no position: the flush was its partition's first (``start`` is then the
    #: first offset it read).
    first: bool = False


@dataclass(frozen=True)
class Ledgers:
    """What a set of partitions' ledgers hold: positions (``None``: none stored) and unfinished flushes."""

    positions: dict[TP, int | None]
    pending: dict[TP, Pending]


@dataclass(frozen=True)
class Committed:
    """What a commit reports: whether it had committed before (a retried commit), and its size."""

    already: bool = False
    #: BSON bytes of the update statements sent (0 when nothing was written).
    bytes: int = 0
    #: Idempotent writes: upserts refused with a duplicate key whose documents held their marks.
    applied: int = 0
    #: Idempotent writes: upserts refused with a duplicate key whose documents lacked their
    #: marks (another writer inserted them first), sent again.
    raced: int = 0
    #: Idempotent writes: merged upserts some of whose partitions were applied; the others sent apart.
    split: int = 0


class FenceConflict(PreaggError):
    exit_code: ClassVar[int] = EXIT_FENCED

    """MongoDB's position differs from the batch's: another worker counted this range.

    The batch must be dropped unwritten and unacked; the worker is a zombie of an
    older group generation and stops (see :data:`pipeline.worker.exits.EXIT_FENCED`).
    """

    def __init__(self, conflicts: list[tuple[Fence, int | None]]) -> None:
        self.conflicts = conflicts
        detail = ", ".join(
            f"{f.topic}[{f.partition}] expected {f.expected} found {found}" for f, found in conflicts
        )
        super().__init__(f"offset fence conflict: {detail}")


@dataclass(frozen=True)
class Behind:
    """A document holds a mark of a partition that the partition's ledger does not account for."""

    topic: str
    partition: int
    collection: str
    doc_id: Any
    #: The mark stored in the document, and this flush's (both as the marks hold them).
    stored: int
    ours: int
    #: The sequences they carry, and the last one the ledger gave out.
    stored_seq: int
    ours_seq: int
    ledger_seq: int | None

    def text(self) -> str:
        """What was found and the way out, for the log and for ``preagg status``."""
        ledger = "no ledger" if self.ledger_seq is None else f"its ledger's sequence is {self.ledger_seq}"
        topic = self.topic.split("@", 1)[0]  # a family's ledger (pipeline/core/families.py): its topic's
        return (
            f"{self.topic}[{self.partition}]: document {self.collection} {self.doc_id!r} holds flush "
            f"{self.stored_seq} of this partition (mark {self.stored}) but {ledger} and this flush is "
            f"{self.ours_seq} (mark {self.ours}): the ledger is behind the documents (deleted, restored "
            "from an older backup, or the documents restored from a newer one); nothing of the partition "
            f"is counted until `preagg positions rebuild --topic {topic} --partition {self.partition}` "
            "(then with --apply) rebuilds its ledger from the marks (docs/operations.md)"
        )


class LedgerBehind(FenceConflict):
    """A partition's ledger is behind the marks stored in its documents: an impossible state.

    Counting on would read the documents' marks as this flush's (a silent loss) or write past
    them (a double count), so the flush is dropped unwritten, the partition is held back and
    the worker restarts: nothing of it is counted until an operator rebuilds the ledger.
    """

    def __init__(self, found: list[Behind]) -> None:
        self.found = found
        PreaggError.__init__(self, "; ".join(b.text() for b in found))
        self.conflicts = []


def check_fences(fences: Iterable[Fence], stored: Mapping[TP, Mapping[str, Any]], flush_id: str) -> bool:
    """Decide a flush against the stored offsets documents.

    Returns ``True`` when this very flush already committed (a retry after a lost
    commit acknowledgement), ``False`` when it may be applied; raises
    :class:`FenceConflict` when any partition moved under it.
    """
    fences = list(fences)
    if fences and all(stored.get((f.topic, f.partition), {}).get("flush") == flush_id for f in fences):
        return True
    conflicts = []
    for f in fences:
        found = stored.get((f.topic, f.partition), {}).get("next")
        if found != f.expected:
            conflicts.append((f, found))
    if conflicts:
        raise FenceConflict(conflicts)
    return False


class CommitTooLarge(PreaggError):
    """A flush's updates exceed the commit byte bound; raised before anything is written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes of updates exceed the commit bound of {limit:,}")
        self.size = size
        self.limit = limit


@dataclass(frozen=True)
class Failure:
    """A failed store call in no store's words: what a flusher does next depends on this alone.

    The store's adapter reads its own errors into it (MongoDB's codes, labels and exception
    types: pipeline/store/errors.py), so the worker never learns a store's vocabulary.
    """

    #: A smaller or shorter commit is the remedy (too large, or too slow while the store answered).
    shrinks: bool = False
    #: It may have applied: the outcome is read before the batch is split or written again.
    outcome_unknown: bool = True
    #: The same write fails again however often it is sent, and why (``None``: it may succeed).
    permanent: str | None = None
    #: Another writer's transaction wrote the same document: retried after a jittered pause.
    write_conflict: bool = False
    #: Bytes of a commit refused for its size before anything was sent (0: not that).
    too_large: int = 0


#: How a store reads one of its failures.
Classify = Callable[[BaseException], Failure]


class Sink(Protocol):
    """Where flushes are committed (MongoDB; a model store in unit tests)."""

    @property
    def exactly_once(self) -> bool: ...

    def failure(self, exc: BaseException) -> Failure:
        """What a failed call of this store means (:class:`Failure`)."""
        ...

    async def ledgers(self, tps: Sequence[TP]) -> Ledgers:
        """Stored positions, and the partitions whose ledger records a flush cut short (idempotent writes)."""
        ...

    async def commit(
        self,
        updates: Sequence[DocUpdate],
        fences: Sequence[Fence],
        flush_id: str,
        token: str | None = None,
        marked: bool = False,
        forward: Forward | None = None,
    ) -> Committed: ...

    async def outcome(self, fences: Sequence[Fence], flush_id: str) -> bool:
        """Whether flush ``flush_id`` committed (its ledgers), or ``FenceConflict``."""
        ...


@dataclass(frozen=True)
class LedgerView:
    """What one partition's ledger says to the checks before counting (store-neutral)."""

    #: First offset not counted (``None``: none stored).
    next: int | None
    #: The fingerprint of the last record counted (``{offset, ts, digest}``), if stored.
    last: Mapping[str, Any] | None = None
    #: Why its documents hold marks it never gave out, when a flush found so (held back).
    behind: str | None = None
    #: When it last moved (epoch seconds; 0: unknown).
    at: float = 0.0
    #: Why it is held back, as a worker recorded (``None``: counted, or released by an operator).
    diverged: str | None = None
    #: The families of documents flushed apart from it (:attr:`Fence.families`), as recorded.
    families: tuple[str, ...] = ()


class LedgerPort(Protocol):
    """The ledger reads and moves a worker's checks make besides commits (the guard, the idle watch)."""

    group: str

    async def load_positions(self, tps: Sequence[TP]) -> dict[TP, int | None]: ...

    async def ledger(self, tp: TP) -> LedgerView | None:
        """One partition's ledger (``None``: none stored)."""
        ...

    async def ledgers_of(self, topics: Sequence[str]) -> dict[TP, LedgerView]:
        """Every stored ledger of the group's partitions of ``topics``."""
        ...

    async def mark_diverged(self, tp: TP, worker: str, reason: str) -> None:
        """Record that the partition is held back, and why (``preagg status`` shows it)."""
        ...

    async def note_lost(self, tp: TP, stored: int, start: int) -> None:
        """Record that Kafka deleted ``[stored, start)`` before it was counted."""
        ...


class WorkerSink(Sink, LedgerPort, Protocol):
    """Everything a worker asks of its store besides its kinds' own reads."""

    async def note_stuck(self, tps: Sequence[TP], reason: str | None) -> None:
        """Record that the partitions' flush fails for good (``None``: it went through)."""
        ...
