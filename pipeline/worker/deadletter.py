"""Dead-letter records: the refused input, where it came from, and why.

The dead-letter topic's message value is one JSON object per refused event::

    {"reason": "schema", "detail": "...", "topic": "hits", "partition": 0,
     "offset": 42, "line": 3, "worker": "host-123", "at": 1700000000.0,
     "raw": "<original text>"}            # or "raw_b64" when not UTF-8

``line`` is the event's position inside a packed message (0 for single events).
An input larger than ``max_raw`` bytes (an ``oversize`` event can be megabytes) is
kept truncated, with ``raw_bytes`` (its full size), ``raw_sha256`` and
``raw_truncated: true``: a dead letter must fit the topic's ``max.message.bytes``,
or its send fails on every retry and blocks its stream. The original stays in the
source topic at ``offset`` until retention.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass

import orjson

from pipeline.core.rejection import Rejection

#: Input bytes a dead letter keeps: far below Kafka's 1 MB default message size, with room
#: for base64 (4/3) and the other fields.
MAX_RAW = 256 * 1024


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One refused event with its source position."""

    rejection: Rejection
    topic: str
    partition: int
    offset: int
    line: int

    def encode(self, worker: str, max_raw: int = MAX_RAW) -> bytes:
        """The dead-letter topic's message value, its input cut at ``max_raw`` bytes."""
        rec: dict[str, object] = {
            "reason": self.rejection.reason,
            "detail": self.rejection.detail,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "line": self.line,
            "worker": worker,
            "at": time.time(),
        }
        raw = self.rejection.raw
        if len(raw) > max_raw:
            rec.update(raw_bytes=len(raw), raw_sha256=hashlib.sha256(raw).hexdigest(), raw_truncated=True)
            raw = raw[:max_raw]
        try:
            rec["raw"] = raw.decode("utf-8")
        except UnicodeDecodeError:  # not text, or a character cut in two by the truncation
            rec["raw_b64"] = base64.b64encode(raw).decode("ascii")
        return orjson.dumps(rec)
