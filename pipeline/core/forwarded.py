"""Records another stage's flushes forwarded to a topic, each taken once whatever was sent twice (pure).

A stage that re-keys what it reads (hits by visitor, for visits) sends, in each flush of a
source partition, its records to the topic before its store commit. Each record names the
source partition, the flush's sequence there (the ledger's, docs/exactly-once.md) and its
index among that flush's records for its destination partition. A flush written again (a
retry, a redo by the partition's next owner, a zombie) sends the same records with the same
names: its range is the one its intent recorded, decoded by the same pure code.

On a destination partition, every record of a flush precedes every record of the source's
next flush, except copies sent by a zombie: the next flush starts only once this one's
sends were acknowledged. Within a flush, records may come in any order (a producer retrying
one batch while the next one lands) and any number of times. So a record is taken when its
sequence is above every one seen from its source (a new flush), or equal to it with an
index not taken yet; anything else is a copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Source = tuple[str, int]
"""(topic, partition) a record was read from."""


@dataclass
class Forwarded:
    """Per source partition, the flush being received and the indexes taken of it."""

    _current: dict[Source, tuple[int, set[int]]] = field(default_factory=dict)
    #: Copies refused since the start (metered by the runtime).
    copies: int = 0

    def take(self, source: Source, seq: int, index: int) -> bool:
        """Whether the record is new: ``False`` for a copy of one taken, or of an older flush."""
        got = self._current.get(source)
        if got is None or seq > got[0]:
            self._current[source] = (seq, {index})
            return True
        current, taken = got
        if seq < current or index in taken:
            self.copies += 1
            return False
        taken.add(index)
        return True

    def state(self) -> dict[Source, tuple[int, list[int]]]:
        """What a restart must start from (per source: the flush and its indexes taken)."""
        return {s: (seq, sorted(taken)) for s, (seq, taken) in self._current.items()}

    @classmethod
    def restored(cls, state: dict[Source, tuple[int, list[int]]]) -> Forwarded:
        """The inverse of :meth:`state`."""
        return cls({s: (seq, set(taken)) for s, (seq, taken) in state.items()})
