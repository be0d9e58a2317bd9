"""Exact top pages over a range, from the periods' top lists and a few page documents (pure).

Each period of the range (a month, or a day) has a top-pages list
(:mod:`pipeline.kinds.hits.sites.caps`): counters by page while they fit the budget,
the rest under ``(other)``. What a list proves depends on how it was written:

- ``other == 0``: every page of the period is listed, every count exact;
- sealed (:mod:`pipeline.kinds.hits.sites.seal`) and ``d`` hits counted since: a listed
  count is short by at most ``min(other, d)``, a page not listed has at most
  ``min(other, below + d)`` hits (``below``: the most hits of a page left out at sealing);
- never sealed: as sealed with ``sealed = below = 0``: any page may hide up to ``other``.

From these, every page gets a lower bound (its counts) and an upper bound, and the pages
listed nowhere share one bound. This is Fagin's threshold algorithm with the lists as
sorted access: only the pages whose upper bound reaches the ``limit``-th lower bound are
read from their page documents (random access, exact); the answer is exact once the
``limit``-th exact count beats every bound left (Fagin, Lotem and Naor, "Optimal
aggregation algorithms for middleware", PODS 2001).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pipeline.kinds.hits.sites.caps import OTHER_PAGE

#: Most pages read from their documents for one answer (by ``_id``: about 0.3 ms a page on
#: the embedded store). More rarely helps: lists that leave this many open prove little.
MAX_READ = 400


@dataclass(frozen=True)
class PeriodList:
    """One period's top-pages list and what it proves."""

    counts: Mapping[str, int]
    other: int = 0
    sealed: int = 0
    below: int = 0

    @classmethod
    def of(
        cls, pages: Mapping[str, object] | None, sealed: object = None, below: object = None
    ) -> PeriodList:
        """From a stored list (``(other)`` apart) and its seal fields, if any."""
        counts = {k: int(str(n)) for k, n in (pages or {}).items() if k != OTHER_PAGE and int(str(n))}
        other = int(str((pages or {}).get(OTHER_PAGE, 0)))
        return cls(counts, other, int(str(sealed or 0)), int(str(below or 0)))

    @property
    def since(self) -> int:
        """Hits counted since the list was last made exact (all of them if never)."""
        return max(0, sum(self.counts.values()) + self.other - self.sealed)

    @property
    def exact(self) -> bool:
        """Whether every listed count is exact (a complete list, or sealed and unchanged)."""
        return self.other == 0 or self.since == 0

    @property
    def slack(self) -> int:
        """How much a listed count may be short."""
        return min(self.other, self.since)

    @property
    def unlisted(self) -> int:
        """The most hits a page not listed may have."""
        return min(self.other, self.below + self.since)


@dataclass(frozen=True)
class Plan:
    """What the lists alone say: lower and upper bounds, and which pages to read."""

    lower: dict[str, int]
    upper: dict[str, int]
    #: The most hits of a page listed nowhere.
    unlisted: int
    #: Pages whose exact count is needed, most promising first (at most :data:`MAX_READ`).
    read: list[str]
    #: The highest upper bound among the pages needed but not read (0: none left out).
    unread: int


def plan(lists: Sequence[PeriodList], limit: int) -> Plan:
    """Bounds per page over the range, and the pages whose documents settle the top ``limit``."""
    lower: dict[str, int] = {}
    for pl in lists:
        for key, n in pl.counts.items():
            lower[key] = lower.get(key, 0) + n
    unlisted = sum(pl.unlisted for pl in lists)
    upper = {}
    for key, lo in lower.items():
        up = lo
        for pl in lists:
            up += pl.slack if key in pl.counts else pl.unlisted
        upper[key] = up
    ranked_lower = sorted(lower.values(), reverse=True)
    floor = ranked_lower[limit - 1] if limit and len(ranked_lower) >= limit else 0
    needed = sorted(
        (k for k in lower if upper[k] > lower[k] and upper[k] >= floor), key=lambda k: (-upper[k], k)
    )
    read, rest = needed[:MAX_READ], needed[MAX_READ:]
    return Plan(lower, upper, unlisted, read, max((upper[k] for k in rest), default=0))


@dataclass(frozen=True)
class Ranked:
    """The top pages (escaped key, hits) and whether they are proven exact."""

    rows: list[tuple[str, int]]
    exact: bool
    #: When not exact: the most hits a page missing from the rows (or a row's missing hits) may have.
    bound: int
    #: How many leading rows are proven (exact counts, each above every page after them).
    proven: int = 0


def rank(p: Plan, counted: Mapping[str, int], limit: int) -> Ranked:
    """The top ``limit`` from the exact counts read (``counted``) and the bounds of the rest."""
    best: dict[str, int] = {}
    known: set[str] = set()
    unsure = 0
    for key, lo in p.lower.items():
        if key in counted:
            best[key] = counted[key]
            known.add(key)
        elif p.upper[key] == lo:
            best[key] = lo
            known.add(key)
        else:
            unsure = max(unsure, p.upper[key])
            best[key] = lo  # shown with its lower bound; its slack is in the bound
    rows = sorted(((k, n) for k, n in best.items() if n > 0), key=lambda r: (-r[1], r[0]))
    top = rows[:limit] if limit else rows
    bound = max(p.unlisted, p.unread, unsure)
    if bound == 0:
        return Ranked(top, True, 0, len(top))
    proven = 0
    while proven < len(top) and top[proven][0] in known and top[proven][1] > bound:
        proven += 1
    if limit and proven == limit:
        return Ranked(top, True, 0, proven)
    return Ranked(top, False, bound, proven)
