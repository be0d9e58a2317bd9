"""The visitors a window saw, per (site, page, UTC quarter hour), as a compact log (pure).

Each identified hit appends its (site, page)'s index, its quarter hour and its visitor's
in-memory hash (128 bits, two 64-bit halves) to four arrays: 24 bytes a hit. The plan takes
each (key, visitor) once (:meth:`VisitLog.distinct`, sorts in numpy) and works on arrays from
there (:func:`~pipeline.kinds.hits.visits.add_visitors`).

Why not a set per key: a Python set of 128-bit integers per (site, page, quarter hour) cost
about 217 bytes a distinct visitor of a key (tracemalloc; the set's own 216 bytes dominate
while most keys hold one or two visitors), and the batch's memory bound counted each as an
aggregate key. A keyless backlog with visitors was then cut into batches of 266,000 events
where the same events without visitors made batches of 685,000: every document written twice as often
(docs/benchmarks.md, "Unique visitors"). The log's weight in that bound is its measured
memory (:meth:`VisitLog.weight`): 45 bytes a hit there, where sets took 204.
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
#: Bytes one logged hit costs (four array entries and the arrays' spare room), and a (site,
#: page) its index entry (the key tuple, the dict's slot). Fitted to tracemalloc's figures for
#: 100,000 and 250,000 keyless hits of 20,000 visitors over 25,000 Zipf pages (4.5 and 9.3 MB)
#: and 100,000 hits over 600 pages (2.5 MB): the weight is within 6% of each. Sets per (site,
#: page, quarter hour) took 20.4 MB for the first.
HIT_BYTES = 26
INDEX_BYTES = 120


class VisitLog:
    """Per (site, page, quarter hour) the visitors seen, as appended (duplicates kept until the plan)."""

    __slots__ = ("_hi", "_keys", "_lo", "_page", "_slot", "pages")

    def __init__(self) -> None:
        #: Each (site, page)'s index in the log, in the order first seen.
        self.pages: dict[tuple[str, str], int] = {}
        self._page = array("I")
        self._slot = array("I")
        self._hi = array("Q")
        self._lo = array("Q")
        #: :meth:`_indexed`'s answer, and the hits logged when it was worked out.
        self._keys: tuple[int, list[VisitKey], np.ndarray] | None = None  # type: ignore[type-arg]

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
        site, page, slot = key
        i = self.pages.get((site, page))
        if i is None:
            i = self.pages[site, page] = len(self.pages)
        self._page.append(i)
        self._slot.append(slot)
        self._hi.append(ident >> 64)
        self._lo.append(ident & _LOW)

    def __len__(self) -> int:
        """Hits logged (a visitor seen twice on a key counts twice until the plan)."""
        return len(self._page)

    def __bool__(self) -> bool:
        return len(self._page) > 0

    def __iter__(self) -> Iterator[VisitKey]:
        """The keys, in the order first seen (their indexes in :meth:`distinct`)."""
        return iter(self._indexed()[0])

    def weight(self) -> int:
        """The log's memory in aggregate keys (:data:`KEY_UNIT`), for the batch's bound."""
        return (len(self._page) * HIT_BYTES + len(self.pages) * INDEX_BYTES + KEY_UNIT - 1) // KEY_UNIT

    def _indexed(self) -> tuple[list[VisitKey], np.ndarray]:  # type: ignore[type-arg]
        """The distinct keys in the order first seen, and each hit's key index."""
        if self._keys is None or self._keys[0] != len(self._page):
            page = np.frombuffer(self._page, dtype=f"<u{self._page.itemsize}")
            slot = np.frombuffer(self._slot, dtype=f"<u{self._slot.itemsize}")
            (pages, slots), inverse = first_of_runs(page, slot)
            first = np.full(len(pages), len(page), dtype=np.int64)
            np.minimum.at(first, inverse, np.arange(len(page)))
            order = np.argsort(first, kind="stable")
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            names = list(self.pages)
            keys = [(*names[p], s) for p, s in zip(pages[order].tolist(), slots[order].tolist(), strict=True)]
            self._keys = (len(page), keys, rank[inverse])
        return self._keys[1], self._keys[2]

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[type-arg]
        """The log as arrays, an entry a hit: its (site, page)'s index in :attr:`pages`, its
        quarter hour, and its visitor's high and low halves (views, not copies)."""
        return (
            np.frombuffer(self._page, dtype=f"<u{self._page.itemsize}"),
            np.frombuffer(self._slot, dtype=f"<u{self._slot.itemsize}"),
            np.frombuffer(self._hi, dtype=np.uint64),
            np.frombuffer(self._lo, dtype=np.uint64),
        )

    def distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[type-arg]
        """Each (key index, visitor) once, in key index order: key indexes (of :meth:`__iter__`)
        and the visitors' high and low halves (uint64)."""
        _, k = self._indexed()
        hi = np.frombuffer(self._hi, dtype=np.uint64)
        lo = np.frombuffer(self._lo, dtype=np.uint64)
        (keys, his, los), _ = first_of_runs(k, hi, lo)
        return keys, his, los

    def as_sets(self) -> dict[VisitKey, set[int]]:
        """Per key, its visitors' in-memory hashes (tests)."""
        keys, index = self._indexed()
        out: dict[VisitKey, set[int]] = {k: set() for k in keys}
        for k, h, lo in zip(index.tolist(), self._hi, self._lo, strict=True):
            out[keys[k]].add((h << 64) | lo)
        return out


def first_of_runs(*columns: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:  # type: ignore[type-arg]
    """The distinct rows of ``columns`` (sorted by the first column, then the next...), and
    each row's index among them: ``numpy.unique`` of rows with its inverse, by a sort a column
    (numpy's unique of a structured array compares field by field in Python-level code: a
    quarter of a plan's time)."""
    n = len(columns[0])
    # lexsort's order, by one sort a column from the last: the last unstable (its ties are
    # rows equal in it, which the others order), the rest stable. numpy's lexsort sorts every
    # column stably: 0.58 s against 0.43 s for 2,700,000 (holder, hash) pairs.
    order = np.argsort(columns[-1])
    for column in columns[-2::-1]:
        order = order[np.argsort(column[order], kind="stable")]
    ordered = [c[order] for c in columns]
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = np.logical_or.reduce([c[1:] != c[:-1] for c in ordered])
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return tuple(c[new] for c in ordered), inverse
