"""The open visits of a :class:`~pipeline.core.sessions.Sessions`, saved and restored (pure).

A visits stage saves its open visits with each flush, beside the positions it read to, so
that a restart continues from both as they were: the rule then decides exactly as one
uninterrupted reading would (tested against it at every cut). Saving is a changelog of the
state, not a replay of the log: it needs no reading order to be reproduced.

The form is BSON (the store's own), one document per part, each part's visits a packed
column block (:data:`ROW`: 72 bytes a visit) with its sites and pages listed once. A part
stays under ``max_bytes`` (a document is at most 16 MB), so any number of open visits
saves as several parts; a visitor's visits are in one part.

A saved form is input like any other: :func:`restored` checks every part (its version, its
block's length, each index into its lists, each time finite, each count positive) and
raises :class:`OpenVisitsError` naming what is wrong, never a state it cannot vouch for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import bson
import numpy as np
from bson import Binary

from pipeline.core.errors import PreaggError
from pipeline.core.packed_form import block_problem, fitting, rows_per_document
from pipeline.core.sessions import Sessions, Visit

#: Bumped when the form changes; a part of another version is refused, never guessed at.
VERSION = 1

#: One open visit: its visitor, times, views, site and pages (indexes into the part's lists),
#: and the positions the rule's tie-breaks and :meth:`~pipeline.core.sessions.Sessions.resume` use.
ROW = np.dtype(
    [
        ("visitor", "<u8"),
        ("start", "<f8"),
        ("end", "<f8"),
        ("seen", "<f8"),
        ("first", "<i8"),
        ("last", "<i8"),
        ("earliest", "<i8"),
        ("views", "<u4"),
        ("site", "<u4"),
        ("entry", "<u4"),
        ("exit", "<u4"),
    ]
)

#: A part's bound: well under MongoDB's 16 MB document limit, with room for the ledger's fields.
MAX_PART_BYTES = 8 * 1024 * 1024


class OpenVisitsError(PreaggError, ValueError):
    """A saved part that is not a form this code wrote: what is wrong with it."""


def saved(sessions: Sessions, max_bytes: int = MAX_PART_BYTES) -> list[bytes]:
    """The open visits of ``sessions`` and its highest event time, as parts of at most
    ``max_bytes`` each (at least one part, so that an empty state is saved too; a part holding
    one visitor's visits alone may pass it)."""
    groups = sessions.open_visits()
    rows = rows_per_document(max_bytes, ROW)
    chunks: list[list[list[Visit]]] = [[]]
    held = 0
    for g in groups:
        if held and held + len(g) > rows:
            chunks.append([])
            held = 0
        chunks[-1].append(g)
        held += len(g)

    def encode(part: Sequence[list[Visit]], _index: int) -> bytes:
        return _part([v for g in part for v in g], sessions.seen)

    return [p for chunk in chunks for p in fitting(chunk, encode, max_bytes)]


def _part(visits: Sequence[Visit], seen: float | None) -> bytes:
    sites: dict[str, int] = {}
    pages: dict[str, int] = {}
    block = np.array(
        [
            (
                v.visitor,
                v.start,
                v.end,
                v.seen,
                v.first,
                v.last,
                v.earliest,
                v.views,
                sites.setdefault(v.site, len(sites)),
                pages.setdefault(v.entry, len(pages)),
                pages.setdefault(v.exit, len(pages)),
            )
            for v in visits
        ],
        dtype=ROW,
    )
    doc = {
        "v": VERSION,
        "seen": None if seen is None else float(seen),
        "sites": list(sites),
        "pages": list(pages),
        "rows": Binary(block.tobytes()),
    }
    return bson.encode(doc)


def restored(parts: Iterable[bytes], timeout: float, grace: float) -> Sessions:
    """A :class:`Sessions` holding the visits ``parts`` saved, as :func:`saved` left them."""
    s = Sessions(timeout, grace)
    seen: float | None = None
    for n, raw in enumerate(parts):
        try:
            doc = bson.decode(raw)
        except Exception as exc:  # bson raises several types for bytes that are not BSON
            raise OpenVisitsError(f"part {n}: not a BSON document ({exc})") from exc
        part_seen, visits = _visits(doc, n)
        if part_seen is not None:
            seen = part_seen if seen is None else max(seen, part_seen)
        for v in visits:
            s.restore(v)
    if len(s) and seen is None:
        raise OpenVisitsError("open visits saved without the highest event time seen")
    s.seen = seen
    return s


def _visits(doc: dict[str, Any], n: int) -> tuple[float | None, list[Visit]]:
    """One decoded part's highest event time and visits, every field checked."""
    if doc.get("v") != VERSION:
        raise OpenVisitsError(f"part {n}: version {doc.get('v')!r}, this code reads {VERSION}")
    seen, sites, pages, rows = doc.get("seen"), doc.get("sites"), doc.get("pages"), doc.get("rows")
    if seen is not None and not (isinstance(seen, float) and math.isfinite(seen)):
        raise OpenVisitsError(f"part {n}: seen is {seen!r}, not a finite time")
    problem = block_problem(doc, ROW, "visits")
    if problem:
        raise OpenVisitsError(f"part {n}: {problem}")
    assert isinstance(sites, list) and isinstance(pages, list) and isinstance(rows, bytes)
    block = np.frombuffer(rows, dtype=ROW)
    if len(block):
        _check(block, len(sites), len(pages), n)
    # Columns as Python lists once (``tolist``), not numpy scalars a visit at a time.
    c = {name: block[name].tolist() for name in ROW.names or ()}
    visits = [
        Visit(
            sites[c["site"][i]],
            c["visitor"][i],
            c["start"][i],
            c["end"][i],
            c["views"][i],
            pages[c["entry"][i]],
            pages[c["exit"][i]],
            c["first"][i],
            c["seen"][i],
            c["last"][i],
            c["earliest"][i],
        )
        for i in range(len(block))
    ]
    return seen, visits


def _check(block: Any, sites: int, pages: int, n: int) -> None:
    """Every visit of a part's block names a listed site and pages, with finite, ordered times and views."""
    if int(block["site"].max()) >= sites or max(int(block["entry"].max()), int(block["exit"].max())) >= pages:
        raise OpenVisitsError(f"part {n}: a visit names a site or page the part does not list")
    if not np.isfinite(np.stack([block["start"], block["end"], block["seen"]])).all():
        raise OpenVisitsError(f"part {n}: a visit's time is not finite")
    if (block["views"] == 0).any() or (block["start"] > block["end"]).any():
        raise OpenVisitsError(f"part {n}: a visit with no views, or ending before it starts")
