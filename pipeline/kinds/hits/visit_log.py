"""The visitors a window saw, per (site, page, UTC quarter hour), as a compact log (pure).

Each identified hit appends its key's index and its visitor's in-memory hash (128 bits, two
64-bit halves) to three arrays: 20 bytes a hit. The plan takes each (key, visitor) once
(:meth:`VisitLog.distinct`, one sort in numpy) and works on arrays from there
(:func:`~pipeline.kinds.hits.visits.add_visitors`).

Why not a set per key: a Python set of 128-bit integers per (site, page, quarter hour) cost
about 217 bytes a distinct visitor of a key (tracemalloc) (the set's own 216 bytes dominate while most keys
hold one or two visitors), and the batch's memory bound counted each as an aggregate key. A
keyless backlog with visitors was then cut into batches of 266,000 events where the same
events without visitors made batches of 685,000: every document written twice as often
(docs/benchmarks.md, "Unique visitors"). The log's weight in that bound is its measured
memory (:meth:`VisitLog.weight`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping

import numpy as np

VisitKey = tuple[str, str, int]
"""(site, page, UTC quarter hour since the epoch): every zone's midnight is on a quarter hour."""

_LOW = (1 << 64) - 1
#: Bytes an aggregate key costs the batch (tracemalloc, keyless Zipf hits of 25 sites: 273-281
#: a minute counter with its share of the day sets): the unit of ``PREAGG_MAX_PENDING_KEYS``.
KEY_UNIT = 280
#: Bytes one logged hit costs (three array entries and the arrays' spare room: 20 measured on
#: 100,000 hits over 1,200 keys), and a (site, page, quarter hour) its index entry (the key
#: tuple, its slot number, the dict's slot: 155 measured). The log's weight came within 3% of
#: tracemalloc's figure for 100,000 and 250,000 keyless hits of 20,000 visitors over 25,000
#: pages (7.9 and 15.8 MB, where sets per key took 20.4 MB for the 100,000).
HIT_BYTES = 21
INDEX_BYTES = 160


class VisitLog:
    """Per (site, page, quarter hour) the visitors seen, as appended (duplicates kept until the plan)."""

    __slots__ = ("_hi", "_key", "_lo", "index")

    def __init__(self) -> None:
        #: Each key's index in the log, in the order first seen.
        self.index: dict[VisitKey, int] = {}
        self._key = array("I")
        self._hi = array("Q")
        self._lo = array("Q")

    @classmethod
    def of(cls, visits: Mapping[VisitKey, Iterable[int]]) -> VisitLog:
        """A log of the visitors of each key (tests, and callers holding sets)."""
        log = cls()
        for key, idents in visits.items():
            for ident in idents:
                log.add(key, ident)
        return log

    def add(self, key: VisitKey, ident: int) -> None:
        """One identified hit of ``key`` by the visitor of in-memory hash ``ident`` (< 2**128)."""
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.index)
        self._key.append(i)
        self._hi.append(ident >> 64)
        self._lo.append(ident & _LOW)

    def __len__(self) -> int:
        """Hits logged (a visitor seen twice on a key counts twice until the plan)."""
        return len(self._key)

    def __bool__(self) -> bool:
        return len(self._key) > 0

    def __iter__(self) -> Iterator[VisitKey]:
        """The keys, in the order first seen (their indexes)."""
        return iter(self.index)

    def weight(self) -> int:
        """The log's memory in aggregate keys (:data:`KEY_UNIT`), for the batch's bound."""
        return (len(self._key) * HIT_BYTES + len(self.index) * INDEX_BYTES + KEY_UNIT - 1) // KEY_UNIT

    def distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[type-arg]
        """Each (key index, visitor) once, in key index order: key indexes (uint32) and the
        visitors' high and low halves (uint64)."""
        k = np.frombuffer(self._key, dtype=f"<u{self._key.itemsize}")
        hi = np.frombuffer(self._hi, dtype=np.uint64)
        lo = np.frombuffer(self._lo, dtype=np.uint64)
        (keys, his, los), _ = first_of_runs(k, hi, lo)
        return keys, his, los

    def as_sets(self) -> dict[VisitKey, set[int]]:
        """Per key, its visitors' in-memory hashes (tests)."""
        keys = list(self.index)
        out: dict[VisitKey, set[int]] = {k: set() for k in keys}
        for k, h, lo in zip(self._key, self._hi, self._lo, strict=True):
            out[keys[k]].add((h << 64) | lo)
        return out


def first_of_runs(*columns: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:  # type: ignore[type-arg]
    """The distinct rows of ``columns`` (sorted by the first column, then the next...), and
    each row's index among them: ``numpy.unique`` of rows with its inverse, by ``lexsort``
    (numpy's unique of a structured array compares field by field in Python-level code: a
    quarter of a plan's time)."""
    n = len(columns[0])
    order = np.lexsort(columns[::-1])
    ordered = [c[order] for c in columns]
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = np.logical_or.reduce([c[1:] != c[:-1] for c in ordered])
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return tuple(c[new] for c in ordered), inverse
