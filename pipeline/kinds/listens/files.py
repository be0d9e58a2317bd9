"""Listens from Last.fm ``user_taggedartists.dat`` files."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

import orjson

from pipeline.core.ids import id_bytes
from pipeline.files import Accepted, Record, Refused, lines

#: Last.fm started in 2002; a tag assignment dated earlier is a data error.
LASTFM_FIRST_YEAR = 2002


def read_lastfm(paths: Iterable[str]) -> Iterator[Record]:
    """Listens from Last.fm ``user_taggedartists.dat``: user, artist (the song), tag, day, month, year.

    The header line is skipped; a row whose date does not exist (a day 0, a 31st of
    February...) or predates Last.fm (the file has five from 1956–1979) is refused
    with its line number, never dropped silently.
    """
    for name, no, line in lines(paths):
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
