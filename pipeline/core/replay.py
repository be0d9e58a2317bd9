"""Re-sent dead letters: the wrapper ``preagg deadletters replay`` puts around an event (pure).

A replayed event goes back to its topic as one JSON line::

    {"preagg_replay": "late", "raw": "<the event as it first came>", "from": "dlq/0/41",
     "key": "hits/3/1200/0"}

(``raw_b64`` instead of ``raw`` for bytes that are not UTF-8). ``from`` names the
dead letter (topic/partition/offset) and ``key`` the event's source (topic, partition,
offset, line: :func:`natural_key`), so that a replay cut short can find, in the
topics it was sending to, which of its events already went (:func:`origin_of`,
:func:`key_of`).

Decoders unwrap it and decode the original as usual, except for the check its
reason names: an operator who replays ``late`` events has decided they belong, so
the lateness horizon does not refuse them again (every other check still runs).
"""

from __future__ import annotations

import base64
import binascii

import orjson

from pipeline.core.rejection import Rejection

PREFIX = b'{"preagg_replay":'


def origin(topic: str, partition: int, offset: int) -> str:
    """The ``from`` of a replayed dead letter: where it sat in the dead-letter topic."""
    return f"{topic}/{partition}/{offset}"


def natural_key(record: dict[str, object]) -> str:
    """Where a dead letter's event came from: ``topic/partition/offset/line`` of its source message.

    Dead letters are sent at least once (a worker that dies between sending them and
    its commit sends them again after its restart), so one event may have several
    dead letters; they share this key, and a replay sends each key once.
    """
    return f"{record.get('topic')}/{record.get('partition')}/{record.get('offset')}/{record.get('line')}"


def wrap(reason: str, record: dict[str, object], source: str | None = None) -> bytes:
    """The wrapper of a dead-letter record (its ``raw`` or ``raw_b64`` as it was) from ``source``."""
    out: dict[str, object] = {"preagg_replay": reason}
    if "raw_b64" in record:
        out["raw_b64"] = record["raw_b64"]
    else:
        out["raw"] = record["raw"]
    if source is not None:
        out["from"] = source
    out["key"] = natural_key(record)
    return orjson.dumps(out)


def key_of(raw: bytes) -> str | None:
    """The ``key`` (:func:`natural_key`) of a wrapper, or ``None`` for anything else."""
    return _text_field(raw, "key")


def origin_of(raw: bytes) -> str | None:
    """The ``from`` of a wrapper, or ``None`` for anything else (cheap on ordinary events)."""
    return _text_field(raw, "from")


def _text_field(raw: bytes, name: str) -> str | None:
    if not raw.startswith(PREFIX):
        return None
    try:
        got = orjson.loads(raw).get(name)
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return got if isinstance(got, str) else None


def unwrap(raw: bytes) -> tuple[str, bytes] | Rejection:
    """(reason, original event) of a wrapper, or why it is not one."""
    try:
        obj = orjson.loads(raw)
        reason = obj["preagg_replay"]
        inner = base64.b64decode(obj["raw_b64"], validate=True) if "raw_b64" in obj else obj["raw"].encode()
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, binascii.Error):
        return Rejection("schema", "a preagg_replay wrapper without its raw event", raw)
    return str(reason), inner
