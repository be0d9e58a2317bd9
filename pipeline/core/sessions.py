"""Visits: one visitor's hits on one site grouped by inactivity, closed by event time (pure).

A visit is a run of one visitor's hits on one site with no gap longer than ``timeout``
between two hits in event-time order (30 minutes in Plausible and GA4). Its *entry* is the
page of its earliest hit, its *exit* that of its latest, its *duration* the time between
them, and a visit of one page view is a *bounce*.

Hits arrive in any order. The input is one ordered stream (a partition of visitor-keyed
hits): each hit has a position, increasing. A hit joins the open visit of its visitor whose
span, widened by ``timeout`` on each side, holds its time; one that falls between two open
visits within ``timeout`` of both joins them into one; otherwise it starts a visit.

A visit closes, for good, once the stream's *watermark* (its highest event time so far less
``grace``) is more than ``timeout`` past its last hit. The wall clock plays no part, so a
backfill closes visits as live traffic does. A hit that arrives after its visit closed
starts another one (its page views still count as page views elsewhere): ``grace`` is the
disorder tolerated, and a late hit is counted, never dropped.

Everything here is a function of the stream's order, so a replay decides as the first
reading did. :meth:`Sessions.resume` says where a replay must start so that the visits open
at a position are rebuilt exactly (the earliest first hit of an open visit), with the
watermark it must start from; closes decided before the position were already counted.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: Plausible's and GA4's inactivity bound, in seconds.
DEFAULT_TIMEOUT = 30 * 60.0


@dataclass(slots=True)
class Visit:
    """One visit, open or closed."""

    site: str
    visitor: int
    #: Event times of its earliest and latest hits (epoch seconds).
    start: float
    end: float
    views: int
    #: Pages of its earliest and latest hits (ties: the earlier, the later arrival).
    entry: str
    exit: str
    #: Position of its first hit to arrive (a replay starts at the earliest open one).
    first: int
    #: The stream's highest event time once its first hit arrived: a replay starting at that
    #: hit restores it (the hit itself leaves it as it was).
    seen: float
    #: Position of the latest hit, for the exit's tie-break.
    last: int = 0
    #: Position of the earliest hit, for the entry's tie-break.
    earliest: int = 0

    @property
    def duration(self) -> float:
        """Seconds between its first and its last hit (0 for a bounce)."""
        return self.end - self.start

    @property
    def bounce(self) -> bool:
        """A visit of one page view."""
        return self.views == 1


@dataclass(frozen=True)
class Resume:
    """Where a replay starts to rebuild the visits open at a position: the position, and the
    highest event time seen before it (``None``: nothing seen)."""

    position: int
    seen: float | None


@dataclass
class Sessions:
    """The open visits of one ordered stream of hits, and the rule that closes them."""

    timeout: float = DEFAULT_TIMEOUT
    grace: float = 0.0
    #: Highest event time seen so far (``None`` before the first hit).
    seen: float | None = None
    _open: dict[tuple[str, int], list[Visit]] = field(default_factory=dict)
    #: (close time, tie, key): a visit's entry is stale once its visit moved or merged.
    _due: list[tuple[float, int, tuple[str, int], int]] = field(default_factory=list)
    _tie: int = 0

    @property
    def watermark(self) -> float | None:
        """Event time that no visit still open can be extended below (the highest seen less grace)."""
        return None if self.seen is None else self.seen - self.grace

    def __len__(self) -> int:
        return sum(len(v) for v in self._open.values())

    def add(self, site: str, visitor: int, ts: float, page: str, position: int) -> list[Visit]:
        """Take one hit; the visits its watermark closes (theirs, its own visitor's included)."""
        key = (site, visitor)
        if self.seen is None or ts > self.seen:
            self.seen = ts
        visits = self._open.setdefault(key, [])
        near = [v for v in visits if v.start - self.timeout <= ts <= v.end + self.timeout]
        if not near:
            v = Visit(site, visitor, ts, ts, 1, page, page, position, self.seen, position, position)
            visits.append(v)
            self._schedule(key, v)
            return self.close()
        v, end = near[0], near[0].end
        for other in near[1:]:  # the hit bridges them: one visit
            _absorb(v, other)
            visits.remove(other)
        _join(v, ts, page, position)
        if v.end != end:
            self._schedule(key, v)
        return self.close()

    def close(self, watermark: float | None = None) -> list[Visit]:
        """Close the visits the watermark (or ``watermark``, if higher) is more than ``timeout`` past."""
        mark = self.watermark
        if watermark is not None and (mark is None or watermark > mark):
            mark = watermark
        closed: list[Visit] = []
        while self._due and mark is not None and self._due[0][0] < mark:
            if (v := self._take_first()) is not None:
                closed.append(v)
        return closed

    def close_oldest(self, n: int) -> list[Visit]:
        """Close the ``n`` open visits whose last hits are the oldest, before their time: what a
        bound on the visits held open does when more are open (each may be split by a later hit)."""
        closed: list[Visit] = []
        while self._due and len(closed) < n:
            if (v := self._take_first()) is not None:
                closed.append(v)
        return closed

    def _take_first(self) -> Visit | None:
        """Take the earliest scheduled close off the schedule, and its visit off the open ones
        (``None``: the entry was stale, its visit moved or merged since: a later one stands for it)."""
        due, _, key, ident = heapq.heappop(self._due)
        visits = self._open.get(key, [])
        v = next((v for v in visits if id(v) == ident), None)
        if v is None or v.end + self.timeout != due:
            return None
        visits.remove(v)
        if not visits:
            del self._open[key]
        return v

    def open_visits(self) -> list[list[Visit]]:
        """The visits open now, a visitor's together (what :mod:`pipeline.core.open_visits` saves)."""
        return list(self._open.values())

    def restore(self, v: Visit) -> None:
        """Hold ``v`` open again, as saved: it closes as it would have."""
        key = (v.site, v.visitor)
        self._open.setdefault(key, []).append(v)
        self._schedule(key, v)

    def resume(self, position: int) -> Resume:
        """Where a replay must start to rebuild the visits open now, ``position`` being the next hit's."""
        oldest = min((v for vs in self._open.values() for v in vs), key=lambda v: v.first, default=None)
        if oldest is None:
            return Resume(position, self.seen)
        return Resume(oldest.first, oldest.seen)

    def _schedule(self, key: tuple[str, int], v: Visit) -> None:
        self._tie += 1
        heapq.heappush(self._due, (v.end + self.timeout, self._tie, key, id(v)))


def _join(v: Visit, ts: float, page: str, position: int) -> None:
    v.views += 1
    if (ts, position) < (v.start, v.earliest):
        v.start, v.entry, v.earliest = ts, page, position
    if (ts, position) > (v.end, v.last):
        v.end, v.exit, v.last = ts, page, position


def _absorb(v: Visit, other: Visit) -> None:
    v.views += other.views
    if (other.start, other.earliest) < (v.start, v.earliest):
        v.start, v.entry, v.earliest = other.start, other.entry, other.earliest
    if (other.end, other.last) > (v.end, v.last):
        v.end, v.exit, v.last = other.end, other.exit, other.last
    if other.first < v.first:
        v.first, v.seen = other.first, other.seen


#: Upper bounds of the duration histogram's buckets, in seconds (the last one open).
DURATION_BUCKETS = (0.0, 10.0, 30.0, 60.0, 180.0, 600.0, 1800.0, 3600.0)


def bucket(duration: float) -> int:
    """Index of the histogram bucket of ``duration``: ``i`` holds durations up to
    ``DURATION_BUCKETS[i]``, the last index those above every bound."""
    for i, bound in enumerate(DURATION_BUCKETS):
        if duration <= bound:
            return i
    return len(DURATION_BUCKETS)


@dataclass(frozen=True)
class VisitTotals:
    """What closed visits add to one site's day: the figures a chart reads."""

    visits: int
    bounces: int
    views: int
    #: The sum of the visits' durations, each rounded to whole seconds: counters add integers,
    #: so that flushes adding their visits apart sum what one reading would.
    duration: int
    buckets: tuple[int, ...]


def tally(
    visits: Iterable[Visit], day_of: Callable[[str, float], int]
) -> tuple[dict[tuple[str, int], VisitTotals], dict[tuple[str, int, str], tuple[int, int]]]:
    """Per (site, local day of the visit's start): its totals; per (site, day, page): entries and exits.

    A visit counts on the local day it starts (``day_of``: the site's zone), whatever
    midnight or a clock change does during it; its exit page counts on that day too.
    """
    acc: dict[tuple[str, int], list[int]] = {}
    hist: dict[tuple[str, int], list[int]] = {}
    pages: dict[tuple[str, int, str], list[int]] = {}
    for v in visits:
        day = day_of(v.site, v.start)
        a = acc.setdefault((v.site, day), [0, 0, 0, 0])
        a[0] += 1
        a[1] += 1 if v.bounce else 0
        a[2] += v.views
        a[3] += round(v.duration)
        hist.setdefault((v.site, day), [0] * (len(DURATION_BUCKETS) + 1))[bucket(v.duration)] += 1
        pages.setdefault((v.site, day, v.entry), [0, 0])[0] += 1
        pages.setdefault((v.site, day, v.exit), [0, 0])[1] += 1
    totals = {k: VisitTotals(a[0], a[1], a[2], a[3], tuple(hist[k])) for k, a in acc.items()}
    return totals, {k: (e, x) for k, (e, x) in pages.items()}


def median_duration(buckets: Iterable[int]) -> float | None:
    """The upper bound of the bucket holding the median visit (``None``: no visit; ``inf``: past
    the last bound): what a histogram can say of the median, never more precise than it is."""
    counts = list(buckets)
    n = sum(counts)
    if not n:
        return None
    run = 0
    for i, c in enumerate(counts):
        run += c
        if 2 * run >= n:
            return DURATION_BUCKETS[i] if i < len(DURATION_BUCKETS) else float("inf")
    return float("inf")
