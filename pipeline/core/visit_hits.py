"""Hits forwarded to the visits stage: packed per destination partition, unpacked checked (pure).

A hits flush sends each identified hit to the partition of the visits topic that assembles
its visitor's visits (``dest``: a function of site and visitor, Kafka's partitioner of their
key). One message per hit would cost the flush one produce per hit; so a flush sends, per
destination partition, its hits packed into few messages (:data:`MAX_MESSAGE_BYTES` each,
under Kafka's default ``max.message.bytes`` of 1 MB). Each message names the source partition,
the flush's sequence there and its index among that flush's messages to its destination:
:class:`~pipeline.core.forwarded.Forwarded` takes each message once by those names.

Packing is a function of the flush's hits in their order, so a flush written again (a retry,
a redo, a zombie) sends the same messages under the same names.

A message is BSON: its names, its sites and pages listed once, and a packed block of
:data:`ROW` (24 bytes a hit). A message is input: :func:`unpack` checks every field and
returns a :class:`~pipeline.core.rejection.Rejection` naming what is wrong, never raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import bson
import numpy as np
from bson import Binary

from pipeline.core.rejection import Rejection

#: Bumped when the form changes; a message of another version is refused, never guessed at.
VERSION = 1

#: One hit: its visitor (a keyed 64-bit hash, never the address), event time, site and page
#: (indexes into the message's lists).
ROW = np.dtype([("visitor", "<u8"), ("ts", "<f8"), ("site", "<u4"), ("page", "<u4")])

#: A message's bound, under Kafka's default ``max.message.bytes`` (1,048,588) with room for
#: the record's framing.
MAX_MESSAGE_BYTES = 900_000

#: Why a forwarded message was refused (the dead-letter reason).
REASON = "visit-hits"


class VisitHit(NamedTuple):
    """One identified hit, as the visits stage needs it."""

    site: str
    visitor: int
    ts: float
    page: str


@dataclass(frozen=True, slots=True)
class Packed:
    """One forwarded message: whose flush it is part of, and its hits."""

    topic: str
    partition: int
    seq: int
    index: int
    hits: list[VisitHit]


def pack(
    topic: str,
    partition: int,
    seq: int,
    hits: Iterable[VisitHit],
    dest: Callable[[str, int], int],
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> dict[int, list[bytes]]:
    """Per destination partition, the flush's messages in index order (``seq``: the flush's
    sequence on source ``topic``/``partition``); each at most about ``max_bytes``."""
    by_dest: dict[int, list[VisitHit]] = {}
    for h in hits:
        by_dest.setdefault(dest(h.site, h.visitor), []).append(h)
    out: dict[int, list[bytes]] = {}
    for d, group in by_dest.items():
        messages: list[bytes] = []
        for chunk in _chunks(group, max_bytes):
            messages.extend(_fitting(topic, partition, seq, chunk, max_bytes, messages))
        out[d] = messages
    return out


def _chunks(hits: list[VisitHit], max_bytes: int) -> list[list[VisitHit]]:
    """``hits`` cut by row count, with as many bytes of names as of rows allowed for."""
    rows = max(1, max_bytes // (2 * ROW.itemsize))
    return [hits[i : i + rows] for i in range(0, len(hits), rows)]


def _fitting(
    topic: str, partition: int, seq: int, hits: list[VisitHit], max_bytes: int, before: Sequence[bytes]
) -> list[bytes]:
    """``hits`` as one message (index: after ``before``), or halves of them until each fits."""
    one = _message(topic, partition, seq, len(before), hits)
    if len(one) <= max_bytes or len(hits) <= 1:
        return [one]
    first = _fitting(topic, partition, seq, hits[: len(hits) // 2], max_bytes, before)
    return first + _fitting(topic, partition, seq, hits[len(hits) // 2 :], max_bytes, [*before, *first])


def _message(topic: str, partition: int, seq: int, index: int, hits: Sequence[VisitHit]) -> bytes:
    sites: dict[str, int] = {}
    pages: dict[str, int] = {}
    block = np.array(
        [
            (h.visitor, h.ts, sites.setdefault(h.site, len(sites)), pages.setdefault(h.page, len(pages)))
            for h in hits
        ],
        dtype=ROW,
    )
    doc = {
        "v": VERSION,
        "t": topic,
        "p": partition,
        "s": seq,
        "i": index,
        "sites": list(sites),
        "pages": list(pages),
        "rows": Binary(block.tobytes()),
    }
    return bson.encode(doc)


def unpack(raw: bytes) -> Packed | Rejection:
    """The message's names and hits, or why it is not a message :func:`pack` wrote."""
    try:
        doc = bson.decode(raw)
    except Exception as exc:  # bson raises several types for bytes that are not BSON
        return Rejection(REASON, f"not a BSON document ({exc})", raw)
    problem = _problem(doc)
    if problem:
        return Rejection(REASON, problem, raw)
    sites, pages = doc["sites"], doc["pages"]
    block = np.frombuffer(doc["rows"], dtype=ROW)
    c = {name: block[name].tolist() for name in ROW.names or ()}
    hits = [
        VisitHit(sites[c["site"][i]], c["visitor"][i], c["ts"][i], pages[c["page"][i]])
        for i in range(len(block))
    ]
    return Packed(doc["t"], doc["p"], doc["s"], doc["i"], hits)


def _problem(doc: dict[str, Any]) -> str | None:
    """What is wrong with a decoded message, if anything."""
    if doc.get("v") != VERSION:
        return f"version {doc.get('v')!r}, this code reads {VERSION}"
    if not isinstance(doc.get("t"), str) or not doc["t"]:
        return "no source topic"
    for name in ("p", "s", "i"):
        v = doc.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"{name} is {v!r}, not a count"
    for name in ("sites", "pages"):
        names = doc.get(name)
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            return f"{name} is not a list of strings"
    rows = doc.get("rows")
    if not isinstance(rows, bytes) or len(rows) % ROW.itemsize:
        return f"rows are not whole {ROW.itemsize}-byte hits"
    block = np.frombuffer(rows, dtype=ROW)
    if not len(block):
        return "no hits"
    if int(block["site"].max()) >= len(doc["sites"]) or int(block["page"].max()) >= len(doc["pages"]):
        return "a hit names a site or page the message does not list"
    if not all(math.isfinite(t) for t in block["ts"].tolist()):
        return "a hit's time is not finite"
    return None
