"""The Kafka message envelope: one or more events, one JSON object per line.

A message value is UTF-8 NDJSON: a single-event message is one line, a packed
message is many lines separated by ``\\n``. Lines keep their original bytes, so a
rejected event goes to the dead-letter topic exactly as it was sent. Packing
amortises the per-message cost of Kafka and Faust; see docs/envelope.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def pack(lines: Iterable[bytes]) -> bytes:
    """One message value holding the given encoded events (no newlines inside them)."""
    return b"\n".join(lines)


def unpack(value: bytes) -> Iterator[bytes]:
    """The event lines of a message value; blank lines (e.g. a trailing newline) are skipped."""
    for line in value.split(b"\n"):
        if line.strip():
            yield line


def whole(value: bytes | None) -> list[bytes]:
    """One record per message: a stage's own binary messages, never split into lines."""
    return [value] if value else []


def events_of(value: bytes | None) -> list[bytes]:
    """The events of one Kafka message: one (plain clients and log shippers), or many packed."""
    if not value:
        return []
    if b"\n" in value:
        return list(unpack(value))
    return [value] if value.strip() else []
