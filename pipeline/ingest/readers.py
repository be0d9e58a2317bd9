"""Input files for ``preagg produce``: JSON lines or combined log format, line by line.

Each line becomes either an :class:`Accepted` event (bytes to send and its
partition key) or a :class:`Refused` one with its line number and reason. Nothing
is dropped silently: the caller reports refused lines in its summary.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from pipeline.aggregate.keys import id_bytes
from pipeline.ingest.clf import ClfError, clf_props, parse_line
from pipeline.ingest.hits import HitDecoder
from pipeline.ingest.validate import Rejection


@dataclass(frozen=True, slots=True)
class Accepted:
    """A valid event ready to send."""

    raw: bytes
    key: bytes


@dataclass(frozen=True, slots=True)
class Refused:
    """A line that is not a valid event."""

    source: str
    line_no: int
    reason: str
    detail: str


@contextmanager
def _open(path: str) -> Iterator[IO[bytes]]:
    if path == "-":
        yield sys.stdin.buffer
    else:
        with open(path, "rb") as f:
            yield f


@dataclass(frozen=True, slots=True)
class Skipped:
    """A valid line that is not an event by definition (a MovieLens rating below 4)."""

    reason: str


Record = Accepted | Refused | Skipped


def _lines(paths: Iterable[str]) -> Iterator[tuple[str, int, bytes]]:
    """(file name, line number, line without its end) of every non-blank line."""
    for path in paths:
        name = "<stdin>" if path == "-" else path
        with _open(path) as f:
            for no, line in enumerate(f, 1):
                line = line.rstrip(b"\r\n")
                if line.strip():
                    yield name, no, line


def hit_key(site: str, page: str) -> bytes:
    """Partitioning key of a hit: one site/page always maps to one partition."""
    return site.encode() + b"\x00" + page.encode()


def read_hits(
    paths: Iterable[str], fmt: str, decoder: HitDecoder, site: str | None = None, props: bool = False
) -> Iterator[Accepted | Refused]:
    """Hits from files (``-`` is stdin) in ``jsonl`` or ``clf`` format.

    ``props``: clf hits carry status, method, referrer host and user-agent family
    as custom properties.
    """
    for name, no, line in _lines(paths):
        if fmt == "clf":
            yield _from_clf(name, no, line, site or Path(name).stem, props)
        else:
            yield _from_jsonl(name, no, line, decoder, site)


def _from_jsonl(name: str, no: int, line: bytes, decoder: HitDecoder, site: str | None) -> Accepted | Refused:
    if site is not None:
        try:
            obj = orjson.loads(line)
            if isinstance(obj, dict) and "site" not in obj:
                obj["site"] = site
                line = orjson.dumps(obj)
        except orjson.JSONDecodeError:
            pass  # the decoder below reports it
    hit = decoder.decode(line)
    if isinstance(hit, Rejection):
        return Refused(name, no, hit.reason, hit.detail)
    return Accepted(line, hit_key(hit[0], hit[1]))


def _from_clf(name: str, no: int, line: bytes, site: str, props: bool) -> Accepted | Refused:
    try:
        rec = parse_line(line.decode("utf-8", errors="replace"))
    except ClfError as exc:
        return Refused(name, no, "clf", str(exc))
    event: dict[str, object] = {"site": site, "page": rec.path, "ts": rec.ts}
    if props:
        event["props"] = clf_props(rec)
    return Accepted(orjson.dumps(event), hit_key(site, rec.path))


Decode = Callable[[bytes], tuple[Any, ...] | Rejection]


def read_jsonl(paths: Iterable[str], decode: Decode) -> Iterator[Record]:
    """Events of any kind from JSON-lines files, keyed by their first field (user)."""
    for name, no, line in _lines(paths):
        event = decode(line)
        if isinstance(event, Rejection):
            yield Refused(name, no, event.reason, event.detail)
        else:
            yield Accepted(line, id_bytes(event[0]))


def read_movielens(paths: Iterable[str], min_rating: int = 4) -> Iterator[Record]:
    """Relations from MovieLens ``u.data`` (user, item, rating, time; tab-separated).

    A rating of ``min_rating`` or more is a relation, as in the seed; lower ratings
    are skipped and counted, malformed lines refused with their number.
    """
    for name, no, line in _lines(paths):
        try:
            user, item, rating, ts = (int(x) for x in line.split())
        except ValueError:
            yield Refused(name, no, "movielens", f"want 4 integers, got {line[:80]!r}")
            continue
        if rating < min_rating:
            yield Skipped(f"rating_below_{min_rating}")
            continue
        yield Accepted(orjson.dumps({"user": user, "item": item, "ts": ts}), id_bytes(user))


#: Last.fm started in 2002; a tag assignment dated earlier is a data error.
LASTFM_FIRST_YEAR = 2002


def read_lastfm(paths: Iterable[str]) -> Iterator[Record]:
    """Listens from Last.fm ``user_taggedartists.dat``: user, artist (the song), tag, day, month, year.

    The header line is skipped; a row whose date does not exist (a day 0, a 31st of
    February...) or predates Last.fm (the file has five from 1956–1979) is refused
    with its line number, never dropped silently.
    """
    from datetime import UTC, datetime

    for name, no, line in _lines(paths):
        if line.startswith(b"userID"):
            continue
        try:
            user, artist, tag, day, month, year = (int(x) for x in line.split())
        except ValueError:
            yield Refused(name, no, "lastfm", f"want 6 integers, got {line[:80]!r}")
            continue
        try:
            ts = datetime(year, month, day, tzinfo=UTC).timestamp()
        except ValueError as exc:
            yield Refused(name, no, "bad_date", f"{year}-{month}-{day}: {exc}")
            continue
        if year < LASTFM_FIRST_YEAR:
            yield Refused(name, no, "bad_date", f"{year}-{month}-{day}: before Last.fm existed")
            continue
        event = {"user": user, "tag": tag, "song": artist, "ts": ts}
        yield Accepted(orjson.dumps(event), id_bytes(user))
