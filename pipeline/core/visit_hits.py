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

from pipeline.core.packed_form import block_problem, fitting, rows_per_document
from pipeline.core.rejection import Rejection

#: Bumped when the form changes; a message of another version is refused, never guessed at.
VERSION = 2

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
    """One forwarded message: whose flush it is part of, its hits, and the highest event time of
    the whole flush (every destination learns how far its source has read)."""

    topic: str
    partition: int
    seq: int
    index: int
    hits: list[VisitHit]
    high: float
    #: The flush read its source partition to the end the consumer knew: until it sends again,
    #: the source need not hold the stage's watermark back.
    at_end: bool = False
    #: Partitions of the source's topic (0: not known): the stage waits to hear from each.
    sources: int = 0
    #: Other partitions of the source's topic the sender held read to their end, with nothing
    #: left to flush: the stage need not wait for them (a partition without hits sends nothing).
    idle: tuple[int, ...] = ()


def pack(
    topic: str,
    partition: int,
    seq: int,
    hits: Iterable[VisitHit],
    dest: Callable[[str, int], int],
    max_bytes: int = MAX_MESSAGE_BYTES,
    destinations: Iterable[int] = (),
    at_end: bool = False,
    sources: int = 0,
    idle: Sequence[int] = (),
) -> dict[int, list[bytes]]:
    """Per destination partition, the flush's messages in index order (``seq``: the flush's
    sequence on source ``topic``/``partition``); each at most about ``max_bytes``.

    Each of ``destinations`` without hits gets one message without any: every message carries
    the flush's highest event time, so that a destination the flush sent nothing to still
    learns how far the source has read (its watermark moves, its visits close)."""
    by_dest: dict[int, list[VisitHit]] = {}
    high = -math.inf
    for h in hits:
        by_dest.setdefault(dest(h.site, h.visitor), []).append(h)
        high = max(high, h.ts)
    if not by_dest:
        return {}
    for d in destinations:
        by_dest.setdefault(d, [])
    out: dict[int, list[bytes]] = {}
    rows = rows_per_document(max_bytes, ROW)

    def encode(chunk: Sequence[VisitHit], index: int) -> bytes:
        return _message(topic, partition, seq, index, chunk, (high, at_end, sources, list(idle)))

    for d, group in by_dest.items():
        messages: list[bytes] = []
        for at in range(0, max(len(group), 1), rows):
            messages.extend(fitting(group[at : at + rows], encode, max_bytes, len(messages)))
        out[d] = messages
    return out


def _message(
    topic: str,
    partition: int,
    seq: int,
    index: int,
    hits: Sequence[VisitHit],
    flush: tuple[float, bool, int, list[int]],
) -> bytes:
    high, at_end, sources, idle = flush
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
        "hi": float(high),
        "end": at_end,
        "n": sources,
        "idle": idle,
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
    return Packed(
        doc["t"], doc["p"], doc["s"], doc["i"], hits, doc["hi"], doc["end"], doc["n"], tuple(doc["idle"])
    )


def _problem(doc: dict[str, Any]) -> str | None:
    """What is wrong with a decoded message, if anything."""
    if doc.get("v") != VERSION:
        return f"version {doc.get('v')!r}, this code reads {VERSION}"
    if not isinstance(doc.get("t"), str) or not doc["t"]:
        return "no source topic"
    for name in ("p", "s", "i", "n"):
        v = doc.get(name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"{name} is {v!r}, not a count"
    problem = block_problem(doc, ROW, "hits")
    if problem:
        return problem
    high = doc.get("hi")
    if not isinstance(high, float) or not math.isfinite(high):
        return f"hi is {high!r}, not a finite time"
    if not isinstance(doc.get("end"), bool):
        return f"end is {doc.get('end')!r}, not a boolean"
    idle = doc.get("idle")
    if not isinstance(idle, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in idle
    ):
        return f"idle is {idle!r}, not a list of partitions"
    block = np.frombuffer(doc["rows"], dtype=ROW)
    if not len(block):
        return None
    if int(block["site"].max()) >= len(doc["sites"]) or int(block["page"].max()) >= len(doc["pages"]):
        return "a hit names a site or page the message does not list"
    if not all(math.isfinite(t) and t <= high for t in block["ts"].tolist()):
        return "a hit's time is not finite, or past the flush's highest"
    return None
