"""Decode one event line: size limit, input format, JSON, the kind's JSON Schema, event time.

Failures are rejections, never exceptions: a worker's batch would treat an exception
as fatal and crash on the same offset after every restart. Nesting past
:data:`MAX_DEPTH` is refused as ``depth`` (the schema validator and orjson's encoder
both raise on it), and :func:`guarded` turns anything a decoder still raises into a
``decoder`` rejection. A topic's input format (``event``, ``clf``, a log shipper's
envelope or ``auto``: :mod:`pipeline.core.shippers`) is applied first; ``event``, the
default, keeps the one-step path of today.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

import jsonschema_rs
import orjson

from pipeline.core.rejection import Rejection
from pipeline.core.replay import PREFIX as REPLAY_PREFIX
from pipeline.core.replay import unwrap
from pipeline.core.shippers import Shipped, open_message
from pipeline.core.times import event_time

_log = logging.getLogger(__name__)

#: Deepest nesting of arrays and objects an event may have. Events are flat; the schema
#: validator gives up (``ValueError``) past 255 levels and orjson's encoder past 254.
MAX_DEPTH = 64


def depth_over(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``obj`` nests arrays/objects more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, level = stack.pop()
        if level > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, level + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, level + 1) for v in node if isinstance(v, dict | list))
    return False


def guarded(decode: Callable[[bytes], Any], raw: bytes) -> Any:
    """``decode(raw)``, or a ``decoder`` rejection naming what it raised.

    The last line of defence for bytes from a topic: a decoder's bug must become one
    dead letter (counted, with its reason), not a worker that dies on this offset forever.
    """
    try:
        return decode(raw)
    except Exception as exc:  # any decoder bug: see the docstring
        return raised(exc, raw)


def raised(exc: Exception, raw: bytes) -> Rejection:
    """The ``decoder`` rejection of an exception a decoder raised on ``raw``."""
    _log.warning("decoder raised %s on a %d-byte event: dead-lettered", type(exc).__name__, len(raw))
    return Rejection("decoder", f"decoder raised {type(exc).__name__}: {exc}"[:500], raw)


class EventDecoder:
    """Bytes of one event → dict that satisfies one event kind's JSON Schema."""

    def __init__(self, label: str, schema: Mapping[str, Any], max_bytes: int) -> None:
        self.label = label
        self.max_bytes = max_bytes
        self._validator = jsonschema_rs.validator_for(dict(schema))

    def decode(self, raw: bytes) -> dict[str, Any] | Rejection:
        """The event, or a :class:`Rejection` saying why not."""
        if (over := self.oversize(raw)) is not None:
            return over
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return Rejection("invalid_json", f"not JSON: {exc}", raw)
        return self.check(obj, raw)

    def oversize(self, raw: bytes) -> Rejection | None:
        """Why a line over :attr:`max_bytes` is refused (``None`` when it is not)."""
        if len(raw) > self.max_bytes:
            return Rejection("oversize", f"event of {len(raw)} bytes > limit {self.max_bytes}", raw)
        return None

    def check(self, obj: Any, raw: bytes) -> dict[str, Any] | Rejection:
        """``obj`` if it satisfies the schema; ``raw`` is what a rejection keeps."""
        # Cheap bounds first: nesting past the limit takes more than 2 bytes a level, and more
        # brackets in the bytes than the limit (most events fail both tests at once).
        if len(raw) > 2 * MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth_over(obj):
            return Rejection("depth", f"{self.label}: nested more than {MAX_DEPTH} levels deep", raw)
        try:
            if not self._validator.is_valid(obj):
                return Rejection("schema", self.explain(obj), raw)
        except ValueError as exc:  # the validator's own recursion limit
            return Rejection("depth", f"{self.label} schema: {exc}", raw)
        result: dict[str, Any] = obj
        return result

    def explain(self, obj: Any) -> str:
        """First schema error, phrased with its path (only called on failures)."""
        for err in self._validator.iter_errors(obj):
            where = "/".join(str(p) for p in err.instance_path) or "event"
            return f"{self.label} schema: {where}: {err.message}"[:500]
        return f"{self.label} schema: invalid"


class FormatDecoder:
    """One message line in a topic's input format → the kind's validated JSON event, or a rejection.

    ``fmt`` is the topic's input format. A log line a shipper wrapped must hold a JSON
    event here (a kind that reads other lines, hits with access logs, overrides
    :meth:`event_of_line`); an event without a ``ts`` takes the shipper's time.
    """

    def __init__(self, label: str, schema: Mapping[str, Any], max_bytes: int, fmt: str = "event") -> None:
        self.label = label
        self._decoder = EventDecoder(label, schema, max_bytes)
        self.fmt = fmt

    def open(self, raw: bytes) -> dict[str, Any] | Rejection:
        """The validated event of one message line in this topic's format."""
        if self.fmt == "event":
            return self._decoder.decode(raw)
        if (over := self._decoder.oversize(raw)) is not None:
            return over
        opened = open_message(raw, self.fmt)
        if isinstance(opened, Shipped):
            opened = self.event_of_line(opened, raw)
        if isinstance(opened, Rejection):
            return opened
        return self._decoder.check(opened, raw)

    def event_of_line(self, shipped: Shipped, raw: bytes) -> dict[str, Any] | Rejection:
        """The event a log line holds: here a JSON event, its ``ts`` the shipper's when it has none."""
        line = shipped.line.strip()
        if not line.startswith(b"{"):
            return Rejection(
                "format", f"{self.label}: a {shipped.source} line must hold a JSON event: {line[:80]!r}", raw
            )
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            return Rejection("invalid_json", f"{shipped.source} line: not JSON: {exc}", raw)
        if not isinstance(obj, dict):
            return Rejection("schema", f"{self.label}: a {shipped.source} line holds no JSON object", raw)
        if "ts" not in obj and shipped.ts is not None:
            obj["ts"] = shipped.ts
        return obj


class TimedDecoder(FormatDecoder):
    """One line → ``(*fields, ts)`` or a :class:`Rejection` (size, format, JSON, schema, time, future skew).

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
        fmt: str = "event",
        lateness: float = 0.0,
    ) -> None:
        super().__init__(label, schema, max_bytes, fmt)
        self.fields = fields
        # A tuple of the fields, whatever their number (itemgetter of one field gives the value).
        self._pick: Callable[[Any], tuple[Any, ...]] = (
            itemgetter(*fields) if len(fields) > 1 else lambda obj: (obj[fields[0]],)
        )
        self._future_skew = future_skew
        #: "Now" for lateness and future skew (a worker pins a batch's instant: pipeline.core.clock).
        self.clock = clock
        #: Seconds after which an event is ``late`` (0: never); see :mod:`pipeline.core.replay`.
        self.lateness = lateness

    def decode_event(self, raw: bytes) -> tuple[dict[str, Any], float] | Rejection:
        """The validated event and its time, or why it is refused.

        A replayed dead letter (:mod:`pipeline.core.replay`) is decoded as the event it
        wraps; one replayed for being ``late`` is not held to the lateness horizon again.
        """
        lateness = self.lateness
        if raw.startswith(REPLAY_PREFIX):
            got = unwrap(raw)
            if isinstance(got, Rejection):
                return got
            reason, raw = got
            if reason == "late":
                lateness = 0.0
        obj = self.open(raw)
        if isinstance(obj, Rejection):
            return obj
        ts = event_time(obj["ts"], raw, self.clock(), self._future_skew, lateness)
        if isinstance(ts, Rejection):
            return ts
        return obj, ts

    def decode(self, raw: bytes) -> Any:
        """The event's fields and time, or why it is refused."""
        got = self.decode_event(raw)
        if isinstance(got, Rejection):
            return got
        obj, ts = got
        return (*self._pick(obj), ts)
