"""Decode one event line: size limit, JSON, the kind's JSON Schema, event time. Failures are rejections."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import jsonschema_rs
import orjson

from pipeline.core.rejection import Rejection
from pipeline.core.times import event_time


class EventDecoder:
    """Bytes of one event → dict that satisfies one event kind's JSON Schema."""

    def __init__(self, label: str, schema: Mapping[str, Any], max_bytes: int) -> None:
        self.label = label
        self.max_bytes = max_bytes
        self._validator = jsonschema_rs.validator_for(dict(schema))

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
            return f"{self.label} schema: {where}: {err.message}"[:500]
        return f"{self.label} schema: invalid"


class TimedDecoder:
    """One line → ``(*fields, ts)`` or a :class:`Rejection` (size, JSON, schema, time, future skew).

    The kinds whose events carry a ``ts`` field share it: ``fields`` are the event's
    fields returned in order, before the time.
    """

    def __init__(
        self,
        label: str,
        schema: Mapping[str, Any],
        fields: tuple[str, ...],
        max_bytes: int,
        future_skew: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._decoder = EventDecoder(label, schema, max_bytes)
        self.fields = fields
        self._future_skew = future_skew
        self._clock = clock

    def decode_event(self, raw: bytes) -> tuple[dict[str, Any], float] | Rejection:
        """The validated event and its time, or why it is refused."""
        obj = self._decoder.decode(raw)
        if isinstance(obj, Rejection):
            return obj
        ts = event_time(obj["ts"], raw, self._clock(), self._future_skew)
        if isinstance(ts, Rejection):
            return ts
        return obj, ts

    def decode(self, raw: bytes) -> Any:
        """The event's fields and time, or why it is refused."""
        got = self.decode_event(raw)
        if isinstance(got, Rejection):
            return got
        obj, ts = got
        return (*(obj[f] for f in self.fields), ts)
