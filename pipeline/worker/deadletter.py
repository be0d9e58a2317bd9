"""Dead-letter records: the refused input, where it came from, and why.

The dead-letter topic's message value is one JSON object per refused event::

    {"reason": "schema", "detail": "...", "topic": "hits", "partition": 0,
     "offset": 42, "line": 3, "worker": "host-123", "at": 1700000000.0,
     "raw": "<original text>"}            # or "raw_b64" when not UTF-8

``line`` is the event's position inside a packed message (0 for single events).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass

import orjson

from pipeline.core.rejection import Rejection


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One refused event with its source position."""

    rejection: Rejection
    topic: str
    partition: int
    offset: int
    line: int

    def encode(self, worker: str) -> bytes:
        """The dead-letter topic's message value."""
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
        try:
            rec["raw"] = self.rejection.raw.decode("utf-8")
        except UnicodeDecodeError:
            rec["raw_b64"] = base64.b64encode(self.rejection.raw).decode("ascii")
        return orjson.dumps(rec)
