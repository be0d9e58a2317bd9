"""One partition of the visits stage: its open visits, read on message by message, and saved
as a head and parts that a restart reads back (pure).

A partition's state is what one uninterrupted reading of it holds at a position (``upto``,
the next offset): the open visits (:class:`~pipeline.core.sessions.Sessions`), the forwarded
messages taken (:class:`~pipeline.core.forwarded.Forwarded`) and, per source partition, the
highest event time it sent. Everything here is a function of the messages in offset order,
so a flush written again from the state it started from decides as it did.

**The watermark** is the lowest of the sources' highest event times, less ``grace``: a hits
partition that lags (a backlog read unevenly) holds visits open until it catches up, so a
backfill closes visits as live traffic does. A source whose last flush had read its partition
to the end the consumer knew (``Packed.at_end``) is left out until it sends again, or an idle
partition would hold every visit open for ever; when every source is so, the newest time
counts. A source partition not heard from at all (messages say how many there are) holds it:
its hits may be of any age, as when another worker reads it late. All of it is decided by what
the messages say, so a reading of the topic decides alike.

**Whose messages**: forwarded messages name their source as ``<group>/<ledger>``. A stage takes
only its own group's: a deployment started again under a new group id reads the same topic,
and another group's messages were counted by that group (they are counted as *foreign*).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.errors import PreaggError, Undecidable
from pipeline.core.forwarded import Forwarded, Source
from pipeline.core.open_visits import restored, saved
from pipeline.core.sessions import Sessions, Visit
from pipeline.core.visit_hits import Packed

#: Bumped when the head's form changes; another version is refused, never guessed at.
HEAD_VERSION = 1


class VisitStateError(Undecidable):
    """A saved state that cannot be the one a partition's ledger stands at: what is wrong."""


@dataclass
class Taken:
    """What one flush's messages were: new, copies, other groups'."""

    messages: int = 0
    hits: int = 0
    copies: int = 0
    foreign: int = 0
    #: Hits behind the watermark when taken (later than the grace): the visit each would have
    #: joined may have closed already, so it may count as a visit of its own.
    late: int = 0
    #: How far behind the watermark the latest of them was, seconds.
    late_by: float = 0.0


@dataclass
class PartitionVisits:
    """The visits stage's state on one partition of its topic."""

    timeout: float
    grace: float
    sessions: Sessions
    forwarded: Forwarded = field(default_factory=Forwarded)
    #: Per source partition, the highest event time it sent, and whether its last flush had read
    #: it to its end.
    sources: dict[Source, tuple[float, bool]] = field(default_factory=dict)
    #: The next offset this state has not read (``None``: nothing read yet).
    upto: int | None = None
    #: Which of the two slots of parts holds this state (the next save writes the other).
    slot: int = 0
    #: Hits taken so far: the next hit's position (the rule's tie-breaks).
    taken: int = 0
    #: Per source topic, its partitions (the most a message said): each must have been heard
    #: from before a source still reading a backlog lets the watermark move.
    expected: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, timeout: float, grace: float) -> PartitionVisits:
        """The state before the partition's first message."""
        return cls(timeout, grace, Sessions(timeout, math.inf))

    def watermark(self) -> float | None:
        """The event time below which no hit is waited for any more (``None``: no hit yet)."""
        if not self.sources:
            return None
        if self._unheard():
            return None  # a partition has sent nothing yet: its hits may be any age
        behind = [t for t, at_end in self.sources.values() if not at_end]
        mark = min(behind) if behind else max(t for t, _ in self.sources.values())
        return mark - self.grace

    def _unheard(self) -> bool:
        heard: dict[str, int] = {}
        for topic, _ in self.sources:
            heard[topic] = heard.get(topic, 0) + 1
        return any(heard.get(topic, 0) < n for topic, n in self.expected.items())

    def take(self, packed: Packed, group: str, taken: Taken) -> list[Visit]:
        """Read one message: its hits into visits unless a copy or another group's; the visits
        that closed."""
        own, _, ledger = packed.topic.partition("/")
        if not ledger or own != group:
            taken.foreign += 1
            return []
        source = (packed.topic, packed.partition)
        if packed.sources > self.expected.get(packed.topic, 0):
            self.expected[packed.topic] = packed.sources
        if not self.forwarded.take(source, packed.seq, packed.index):
            taken.copies += 1
            return []
        taken.messages += 1
        taken.hits += len(packed.hits)
        base = self.taken
        self.taken += len(packed.hits)
        before = self.watermark()
        if before is not None:
            behind = [before - h.ts for h in packed.hits if h.ts < before]
            if behind:
                taken.late += len(behind)
                taken.late_by = max(taken.late_by, *behind)
        add = self.sessions.add
        closed: list[Visit] = []
        for i, h in enumerate(packed.hits):
            closed.extend(add(h.site, h.visitor, h.ts, h.page, base + i))
        # The flush's highest time, whichever destination its hits went to: a partition the
        # flush sent no hit moves on too.
        high = self.sources.get(source)
        self.sources[source] = (packed.high if high is None else max(high[0], packed.high), packed.at_end)
        for p in packed.idle:  # read to their ends by the sender, with nothing to send
            was = self.sources.get((packed.topic, p))
            self.sources[packed.topic, p] = (packed.high if was is None else was[0], True)
        mark = self.watermark()
        if mark is not None:
            closed.extend(self.sessions.close(mark))
        return closed

    def head(self, upto: int, parts: int) -> dict[str, Any]:
        """What the head document holds once this state is saved at ``upto`` in :attr:`slot`'s
        ``parts`` parts (:meth:`parts`)."""
        mark = self.watermark()
        return {
            "v": HEAD_VERSION,
            "upto": upto,
            "slot": self.slot,
            "parts": parts,
            "open": len(self.sessions),
            "taken": self.taken,
            "watermark": None if mark is None else float(mark),
            "forwarded": [[t, p, seq, ids] for (t, p), (seq, ids) in sorted(self.forwarded.state().items())],
            "sources": [[t, p, float(ts), end] for (t, p), (ts, end) in sorted(self.sources.items())],
            "expected": [[t, n] for t, n in sorted(self.expected.items())],
        }

    def parts(self) -> list[bytes]:
        """The open visits, as parts of at most 8 MB (:func:`~pipeline.core.open_visits.saved`)."""
        return saved(self.sessions)


def loaded(head: dict[str, Any], parts: list[bytes], timeout: float, grace: float) -> PartitionVisits:
    """The state a head and its parts saved, every field checked (:class:`VisitStateError`)."""
    if head.get("v") != HEAD_VERSION:
        raise VisitStateError(f"state version {head.get('v')!r}, this code reads {HEAD_VERSION}")
    upto, slot, count, hits = head.get("upto"), head.get("slot"), head.get("parts"), head.get("taken")
    if not (
        _count(upto) and slot in (0, 1) and not isinstance(slot, bool) and _count(count) and _count(hits)
    ):
        raise VisitStateError(f"state head upto={upto!r} slot={slot!r} parts={count!r} taken={hits!r}")
    assert isinstance(upto, int) and isinstance(slot, int) and isinstance(hits, int)
    if len(parts) != count:
        raise VisitStateError(f"state head lists {count} parts, {len(parts)} found")
    try:
        sessions = restored(parts, timeout, math.inf)
    except PreaggError as exc:
        raise VisitStateError(f"state parts: {exc}") from exc
    forwarded: dict[Source, tuple[int, list[int]]] = {}
    for row in _rows(head.get("forwarded"), "forwarded", 4):
        t, p, seq, taken = row
        if not (isinstance(t, str) and _count(p) and _count(seq) and isinstance(taken, list)):
            raise VisitStateError(f"state forwarded row {row!r}")
        if not all(_count(i) for i in taken):
            raise VisitStateError(f"state forwarded indexes {taken!r}")
        forwarded[(t, p)] = (seq, taken)
    sources: dict[Source, tuple[float, bool]] = {}
    for row in _rows(head.get("sources"), "sources", 4):
        t, p, ts, end = row
        if not (isinstance(t, str) and _count(p) and isinstance(ts, float) and math.isfinite(ts)):
            raise VisitStateError(f"state sources row {row!r}")
        if not isinstance(end, bool):
            raise VisitStateError(f"state sources row {row!r}")
        sources[(t, p)] = (ts, end)
    expected: dict[str, int] = {}
    for row in _rows(head.get("expected"), "expected", 2):
        if not (isinstance(row[0], str) and _count(row[1])):
            raise VisitStateError(f"state expected row {row!r}")
        expected[row[0]] = row[1]
    return PartitionVisits(
        timeout, grace, sessions, Forwarded.restored(forwarded), sources, upto, slot, hits, expected
    )


def _rows(value: Any, name: str, width: int) -> list[list[Any]]:
    if not isinstance(value, list) or not all(isinstance(r, list) and len(r) == width for r in value):
        raise VisitStateError(f"state {name} is not a list of {width}-element rows")
    return value


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0
