"""Relations from MovieLens ``u.data`` files."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from pipeline.core.ids import id_bytes
from pipeline.files import Accepted, Record, Refused, Skipped, lines


def read_movielens(paths: Iterable[str], min_rating: int = 4) -> Iterator[Record]:
    """Relations from MovieLens ``u.data`` (user, item, rating, time; tab-separated).

    A rating of ``min_rating`` or more is a relation, as in the seed; lower ratings
    are skipped and counted, malformed lines refused with their number.
    """
    for name, no, line in lines(paths):
        try:
            user, item, rating, ts = (int(x) for x in line.split())
        except ValueError:
            yield Refused(name, no, "movielens", f"want 4 integers, got {line[:80]!r}")
            continue
        if rating < min_rating:
            yield Skipped(f"rating_below_{min_rating}")
            continue
        yield Accepted(orjson.dumps({"user": user, "item": item, "ts": ts}), id_bytes(user))
