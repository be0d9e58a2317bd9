"""Is the partition Kafka serves the one the ledger describes? (pure)

A ledger says "offsets below ``next`` are counted". That is only true of the log it
was written against: a topic deleted and recreated, or a broker whose data was
lost, serves a new log whose offsets start again at 0, and a worker trusting the
ledger would skip those new records as replays, silently. Kafka's protocol as
aiokafka speaks it gives no topic id, so each flush stores a fingerprint of the
last record it counted per partition (offset, timestamp, digest of the events),
and a worker checks it against the record Kafka holds at that offset before it
counts a partition again: at every assignment and whenever the consumer's
position moves backwards. See docs/deployment.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import xxhash


@dataclass(frozen=True)
class Fingerprint:
    """The last record a flush counted on a partition."""

    offset: int
    #: The record's timestamp, milliseconds (producer create time or broker append time; 0: unknown).
    ts: int
    #: xxh3-64 of the record's event lines joined by newlines (blank lines dropped).
    digest: str

    def as_doc(self) -> dict[str, Any]:
        """The ledger's ``last`` field."""
        return {"offset": self.offset, "ts": self.ts, "digest": self.digest}

    @classmethod
    def from_doc(cls, doc: Any) -> Fingerprint | None:
        """The ledger's ``last`` field, if it has one (ledgers written before it existed do not)."""
        if not isinstance(doc, dict) or not {"offset", "ts", "digest"} <= doc.keys():
            return None
        return cls(int(doc["offset"]), int(doc["ts"]), str(doc["digest"]))


def digest(lines: list[bytes]) -> str:
    """Digest of a record's event lines (the same whether computed from the lines or the value)."""
    return xxhash.xxh3_64_hexdigest(b"\n".join(lines))


@dataclass(frozen=True)
class Probe:
    """What Kafka holds around one offset of a partition (read outside the consumer group)."""

    #: The first record at or after the asked offset: (offset, ts ms, digest), if any.
    first: tuple[int, int, str] | None
    log_start: int
    #: One past the last record (the fetch's high watermark).
    log_end: int


Outcome = Literal["same", "unverifiable", "diverged"]


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check, and the sentence that explains it to an operator."""

    outcome: Outcome
    reason: str


def judge(stored_next: int | None, last: Fingerprint | None, probe: Probe | None) -> Verdict:
    """Decide whether the partition Kafka serves is the one the ledger describes.

    ``probe`` looked at ``last.offset`` (or, without a fingerprint, at ``stored_next``).
    """
    if stored_next is None:
        return Verdict("same", "nothing counted yet")
    if probe is None:
        return Verdict("unverifiable", "Kafka could not be read")
    if probe.log_end < stored_next:
        return Verdict(
            "diverged",
            f"Kafka's log ends at offset {probe.log_end} but the ledger has counted up to {stored_next}: "
            "the topic was recreated or its data lost",
        )
    if last is None:
        if stored_next <= probe.log_start:
            return Verdict("same", "nothing of this log was counted yet")
        return Verdict("unverifiable", "the ledger has no fingerprint of its last record (older ledger)")
    if probe.log_start > last.offset:
        return Verdict("unverifiable", f"the last counted record ({last.offset}) was deleted by retention")
    if probe.first is None or probe.first[0] != last.offset:
        return Verdict(
            "unverifiable",
            f"Kafka holds no record at the last counted offset {last.offset} (compaction or a new log)",
        )
    _, ts, dig = probe.first
    # A timestamp of 0 or less is unknown (old message formats): the digest decides alone.
    if dig != last.digest or (ts > 0 and last.ts > 0 and ts != last.ts):
        return Verdict(
            "diverged",
            f"the record at offset {last.offset} is not the one counted there "
            f"(timestamp {ts} vs {last.ts}): the topic was recreated or its data replaced",
        )
    return Verdict("same", "the last counted record is where the ledger says")
