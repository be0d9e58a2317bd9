"""Input formats of a stream topic: our JSON events, bare log lines, and log-shipper envelopes (pure).

Most traffic already on Kafka was put there by a log shipper, one log line per
message, wrapped in the shipper's JSON envelope (default shapes, docs/ingest.md):

* **Vector** (file source → Kafka sink, ``encoding.codec = "json"``):
  ``{"message": LINE, "timestamp": ISO, "host": ..., "file": PATH, "source_type": "file"}``;
* **Filebeat** (Kafka output, default ``codec.json``):
  ``{"@timestamp": ISO, "@metadata": {"beat": "filebeat", ...}, "message": LINE,
  "log": {"file": {"path": PATH}}, "host": {"name": ...}, ...}``;
* **Fluent Bit** (Kafka output, ``format json``, ``timestamp_key @timestamp``,
  ``timestamp_format double``, tail input's ``Key log``):
  ``{"@timestamp": 1700000000.123, "log": LINE, ...}``.

With Filebeat's ``codec.format`` or Fluent Bit's ``format raw`` the message is the bare
line. :func:`open_message` turns one Kafka message line into either a parsed JSON event
or a :class:`Shipped` log line with what the envelope says about it (its time, host and
file); the stream kind then parses the line. Nothing here guesses: a line that fits
none of the expected shapes is a :class:`Rejection` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from pipeline.core.rejection import Rejection
from pipeline.core.times import TimeError, parse_ts

InputFormat = Literal["event", "clf", "vector", "filebeat", "fluentbit", "auto"]
#: The formats that are a log shipper's JSON envelope around one log line.
SHIPPERS = ("vector", "filebeat", "fluentbit")


@dataclass(frozen=True, slots=True)
class Shipped:
    """A log line as a shipper sent it: the line, and what the envelope says about it."""

    line: bytes
    #: The shipper's timestamp as sent (ISO-8601 text or epoch seconds); read by :attr:`ts`
    #: only for lines that carry no time of their own (an access-log line always does).
    stamp: object = None
    host: str | None = None
    path: str | None = None
    #: ``vector``, ``filebeat``, ``fluentbit``, or ``line`` for a bare line.
    source: str = "line"

    @property
    def ts(self) -> float | None:
        """The shipper's time of the line (epoch seconds), ``None`` if it sent none it can read."""
        return _shipper_time(self.stamp)


#: What :func:`open_message` makes of a message line: a JSON event, or a log line.
Opened = dict[str, Any] | Shipped


def _shipper_time(value: object) -> float | None:
    """An envelope's timestamp as epoch seconds (ISO-8601 text or a number); ``None`` if unusable."""
    try:
        return parse_ts(value)
    except TimeError:
        return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _vector(obj: dict[str, Any]) -> Shipped | str:
    line = obj.get("message")
    if not isinstance(line, str):
        return "vector envelope without a string 'message'"
    return Shipped(
        line.encode(),
        obj.get("timestamp"),
        _text(obj.get("host")),
        _text(obj.get("file")),
        "vector",
    )


def _filebeat(obj: dict[str, Any]) -> Shipped | str:
    line = obj.get("message")
    if not isinstance(line, str):
        return "filebeat envelope without a string 'message'"
    host, log = obj.get("host"), obj.get("log")
    file = log.get("file") if isinstance(log, dict) else None
    return Shipped(
        line.encode(),
        obj.get("@timestamp"),
        _text(host.get("name") if isinstance(host, dict) else host),
        _text(file.get("path") if isinstance(file, dict) else None),
        "filebeat",
    )


def _fluentbit(obj: dict[str, Any]) -> Shipped | str:
    line = obj.get("log")
    if not isinstance(line, str):
        line = obj.get("message")  # a parser or a modify filter may have renamed the key
    if not isinstance(line, str):
        return "fluentbit record without a string 'log' (or 'message')"
    return Shipped(
        line.encode(),
        obj.get("@timestamp"),
        _text(obj.get("hostname") or obj.get("host")),
        _text(obj.get("file") or obj.get("path")),
        "fluentbit",
    )


_UNWRAP = {"vector": _vector, "filebeat": _filebeat, "fluentbit": _fluentbit}


def detect(obj: dict[str, Any]) -> str:
    """Which shape a JSON object is: ``vector``, ``filebeat``, ``fluentbit`` or ``event``.

    Filebeat always sets ``@metadata.beat``; Vector's file source sets ``source_type``;
    Fluent Bit's tail records carry the line under ``log`` next to ``@timestamp``. An
    object with none of these marks is taken for an event (its schema decides).
    """
    meta = obj.get("@metadata")
    if isinstance(meta, dict) and "beat" in meta:
        return "filebeat"
    if "source_type" in obj and "message" in obj:
        return "vector"
    if "@timestamp" in obj and ("log" in obj or "message" in obj):
        return "fluentbit" if "log" in obj else "filebeat"
    if "message" in obj and "timestamp" in obj:
        return "vector"
    return "event"


def open_message(raw: bytes, fmt: str) -> Opened | Rejection:
    """One message line in format ``fmt`` → a JSON event (dict), a :class:`Shipped` line, or why not.

    ``event``: a JSON object (an event; its schema is checked by the kind). ``clf``: the
    bare line. A shipper's name: its envelope, opened. ``auto``: a line starting with
    ``{`` is JSON and :func:`detect` says which shape; anything else is a bare line.
    """
    if fmt == "clf":
        return Shipped(raw)
    if fmt == "auto" and not raw.lstrip().startswith(b"{"):
        return Shipped(raw)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Rejection("invalid_json", f"not JSON: {exc}", raw)
    if not isinstance(obj, dict):
        if fmt == "event":
            return Rejection("schema", f"event: expected a JSON object, got {type(obj).__name__}", raw)
        return Rejection("envelope", f"{fmt} envelope: expected a JSON object, got {type(obj).__name__}", raw)
    shape = detect(obj) if fmt == "auto" else fmt
    if shape == "event":
        return obj
    got = _UNWRAP[shape](obj)
    if isinstance(got, str):
        return Rejection("envelope", got, raw)
    return got


def _iso(ts: float, digits: int) -> str:
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")[: 20 + digits]
    return text + "Z"


def envelope(line: str, shipper: str, ts: float, host: str, path: str) -> bytes:
    """``line`` as ``shipper`` sends it with its default settings (replays and tests; docs/ingest.md).

    ``ts`` is when the shipper read the line, ``host`` its machine, ``path`` the file.
    """
    obj: dict[str, Any]
    if shipper == "vector":
        obj = {"file": path, "host": host, "message": line, "source_type": "file", "timestamp": _iso(ts, 6)}
    elif shipper == "filebeat":
        obj = {
            "@timestamp": _iso(ts, 3),
            "@metadata": {"beat": "filebeat", "type": "_doc", "version": "8.15.0"},
            "log": {"offset": 0, "file": {"path": path}},
            "message": line,
            "input": {"type": "filestream"},
            "host": {"name": host},
            "agent": {"type": "filebeat", "version": "8.15.0"},
            "ecs": {"version": "8.0.0"},
        }
    elif shipper == "fluentbit":
        obj = {"@timestamp": round(ts, 6), "log": line}
    else:
        raise ValueError(f"unknown shipper {shipper!r} (expected one of {', '.join(SHIPPERS)})")
    return orjson.dumps(obj)
