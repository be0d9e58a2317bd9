"""Reads of a set of documents by key, in chunks.

One ``find({key: {$in: ids}})`` per chunk instead of one for the whole set: the
embedded SecantusDB answers ``$in`` in time quadratic in the number of values
(3,000 ids in one query 17 s; in chunks of 50, 0.66 s: docs/benchmarks.md), while
on MongoDB a chunk of 50 costs one more round trip per 50 documents and
keeps every reply far below the 16 MB batch limit. Chunks run one after another:
inside a transaction a session runs one operation at a time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection

#: Values per ``$in`` (see :data:`pipeline.settings.Settings.read_chunk`).
READ_CHUNK = 50


def chunks(values: Iterable[Any], size: int) -> list[list[Any]]:
    """``values`` in lists of at most ``size`` (``size <= 0``: one list)."""
    items = list(values)
    if size <= 0:
        return [items] if items else []
    return [items[i : i + size] for i in range(0, len(items), size)]


async def find_in(
    coll: AsyncCollection[dict[str, Any]],
    values: Iterable[Any],
    *,
    key: str = "_id",
    chunk: int = READ_CHUNK,
    session: AsyncClientSession | None = None,
    projection: Mapping[str, Any] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Every document whose ``key`` is one of ``values``, read ``chunk`` values at a time."""
    for part in chunks(values, chunk):
        async for d in coll.find({key: {"$in": part}}, projection, session=session):
            yield d
