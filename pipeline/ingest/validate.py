"""Decode one event line: size limit, JSON, JSON Schema. Failures become rejections.

A rejection carries a short reason code (counted per reason in metrics and status),
a human detail, and the original bytes (sent to the dead-letter topic unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import orjson

from pipeline.schemas import event_schema


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one input was refused, with the input as it came."""

    reason: str
    detail: str
    raw: bytes


class EventDecoder:
    """Bytes of one event → dict that satisfies the event kind's JSON Schema."""

    def __init__(self, kind: str, max_bytes: int) -> None:
        self.kind = kind
        self.max_bytes = max_bytes
        self._validator = jsonschema_rs.validator_for(event_schema(kind))

    def decode(self, raw: bytes) -> dict[str, Any] | Rejection:
        """The event, or a :class:`Rejection` saying why not."""
        if len(raw) > self.max_bytes:
            return Rejection("oversize", f"event of {len(raw)} bytes > limit {self.max_bytes}", raw)
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return Rejection("invalid_json", f"not JSON: {exc}", raw)
        if not self._validator.is_valid(obj):
            return Rejection("schema", self.explain(obj), raw)
        result: dict[str, Any] = obj
        return result

    def explain(self, obj: Any) -> str:
        """First schema error, phrased with its path (only called on failures)."""
        for err in self._validator.iter_errors(obj):
            where = "/".join(str(p) for p in err.instance_path) or "event"
            return f"{self.kind} schema: {where}: {err.message}"[:500]
        return f"{self.kind} schema: invalid"
