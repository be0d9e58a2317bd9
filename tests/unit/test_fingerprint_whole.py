"""The ledger's fingerprint of a partition's last record is the digest the log check computes from
the record's value, also for a stage taking binary messages whole (they may hold newline bytes):
otherwise the check finds another log and holds the partition back."""

from __future__ import annotations

from pipeline.core.envelope import events_of, unpack, whole
from pipeline.core.incarnation import digest
from pipeline.core.rejection import Rejection
from pipeline.core.updates import DocUpdate
from pipeline.worker.batch import new_batch


class Taking:
    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        return None

    def __len__(self) -> int:
        return 0

    def documents(self) -> int:
        return 0

    def plan(self) -> list[DocUpdate]:
        return []


def test_the_fingerprint_is_the_log_checks_digest_whatever_the_framing() -> None:
    binary = b"\x10\x00\n\n  \n\x00hits\n\x02"  # blank segments a line split skips
    for value, framing in ((binary, whole), (b'{"a": 1}\n{"b": 2}\n', events_of), (b'{"a": 1}', events_of)):
        b = new_batch(Taking, per_partition=True)
        b.ingest_message(("t", 0), 7, framing(value), "ack", None, 1000)
        (fence,) = b.fences(0)
        assert fence.last is not None and fence.last["digest"] == digest(list(unpack(value)))
