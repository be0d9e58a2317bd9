"""Which pages get documents of their own, and which get a line in a site's top pages (pure).

Two bounds per site (docs/rollups.md):

- **Pages per day** (``PREAGG_HITS_MAX_PAGES_PER_DAY``): the first pages of a site's
  local day get daily and monthly documents; past the cap a new page is counted only
  in the site's rollups. A crawler cannot grow the page collections without bound.
- **Top pages** (``PREAGG_HITS_TOP_PAGES_BYTES``): a site rollup's ``pages`` counts
  each page until its byte budget is spent; later pages are counted under
  ``%other``. Pages enter in the order of the day's traffic, so the busy ones come
  first; a page that becomes busy late is undercounted in the list (its own documents
  stay exact), and below the budget the list is exact.

Each worker holds what it knows of the periods it writes (the 4,096 most recently used,
at most a million page names: about 100 MB): what the store had when it first touched
the period (:mod:`pipeline.kinds.hits.sites.caps_read` seeds it before a
plan), plus what it admitted since. Workers of one group do not see each other's new
pages until they read again, so with several workers a period may take up to one cap
per worker that writes it: bounded, never unbounded.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.store.names.layout import READABLE_OTHER, escape_key

#: The top-pages key of the pages past the budget (``escape_key`` never yields it).
OTHER_PAGE = READABLE_OTHER

#: Refused (site, day, page) names kept to count each once (``preagg_pages_capped``); past
#: it they are forgotten and a page may be counted again: the metric is then an upper bound.
REFUSED_KEPT = 100_000

#: Bytes a counter of ``pages`` takes besides its name: BSON type, NUL, an int64.
ENTRY_BYTES = 10

Period = tuple[str, str, int]
"""(site, ``"d"`` or ``"m"``, local day ordinal or the month's first day's ordinal)."""


def entry_bytes(key: str) -> int:
    """Bytes one counter of ``pages`` takes."""
    return len(key.encode("utf-8", "surrogatepass")) + ENTRY_BYTES


@dataclass
class _TopList:
    """The page keys of one rollup's ``pages`` and the bytes they take."""

    keys: set[str] = field(default_factory=set)
    size: int = 0


class PageCaps:
    """The two bounds for the periods a worker writes, most recent ones kept (LRU)."""

    def __init__(
        self,
        max_pages_per_day: int = 0,
        top_pages_bytes: int = 4_096,
        periods: int = 4096,
        max_held: int = 1_000_000,
    ) -> None:
        self.max_pages = max_pages_per_day
        self.top_bytes = top_pages_bytes
        self.periods = periods
        #: Page names held over all periods (about 100 bytes each): the memory bound.
        self.max_held = max_held
        self._held = 0
        self._pages: OrderedDict[tuple[str, int], set[str]] = OrderedDict()
        self._tops: OrderedDict[Period, _TopList] = OrderedDict()
        #: Hits of pages past the day's cap (counted in their site's rollups only).
        self.capped_hits = 0
        #: Distinct (site, day, page) refused a document of its own.
        self.capped_pages = 0
        self._refused: set[tuple[str, int, str]] = set()

    # -- what a plan asks --------------------------------------------------------------

    def admits(self, site: str, ordinal: int, page: str) -> bool:
        """Whether ``page`` has documents of its own on ``site``'s local day ``ordinal``."""
        if self.max_pages <= 0:
            return True
        pages = self._pages.get((site, ordinal))
        if pages is None:
            pages = self.seed_pages(site, ordinal, ())
        if page in pages:
            return True
        if len(pages) < self.max_pages:
            pages.add(page)
            self._held += 1
            return True
        if (site, ordinal, page) not in self._refused:
            if len(self._refused) >= REFUSED_KEPT:  # a crawler's names: a bound, not a leak
                self._refused.clear()
            self._refused.add((site, ordinal, page))
            self.capped_pages += 1
        return False

    def top_key(self, period: Period, page: str | None) -> str:
        """The key of ``page`` in ``period``'s top pages: its escaped name, or :data:`OTHER_PAGE`.

        ``None`` is a page refused a document (past the day's cap): always ``(other)``.
        """
        if page is None:
            return OTHER_PAGE
        key = escape_key(page)
        top = self._tops.get(period)
        if top is None:
            top = self.seed_top(period, ())
        if key in top.keys:
            return key
        size = entry_bytes(key)
        if top.size + size <= self.top_bytes:
            top.keys.add(key)
            top.size += size
            return key
        return OTHER_PAGE

    # -- what the store tells (caps_read) --------------------------------------------------

    def knows_pages(self, site: str, ordinal: int) -> bool:
        """Whether the day's pages are held (no read needed)."""
        if self.max_pages <= 0:
            return True
        hit = (site, ordinal) in self._pages
        if hit:
            self._pages.move_to_end((site, ordinal))
        return hit

    def knows_top(self, period: Period) -> bool:
        """Whether the period's top pages are held (no read needed)."""
        hit = period in self._tops
        if hit:
            self._tops.move_to_end(period)
        return hit

    def seed_pages(self, site: str, ordinal: int, pages: Iterable[str]) -> set[str]:
        """Hold the pages the store has documents of on ``site``'s day ``ordinal``."""
        old = self._pages.pop((site, ordinal), None)
        self._held -= len(old) if old is not None else 0
        held = self._pages[(site, ordinal)] = set(pages)
        self._held += len(held)
        while len(self._pages) > 1 and (len(self._pages) > self.periods or self._held > self.max_held):
            _, dropped = self._pages.popitem(last=False)  # least recently used: read again if needed
            self._held -= len(dropped)
        return held

    def seed_top(self, period: Period, keys: Iterable[str]) -> _TopList:
        """Hold the keys the store's rollup of ``period`` has in its top pages."""
        top = _TopList()
        for key in keys:
            if key != OTHER_PAGE:
                top.keys.add(key)
                top.size += entry_bytes(key)
        self._tops[period] = top
        while len(self._tops) > self.periods:
            self._tops.popitem(last=False)
        return top

    def count_capped(self, hits: int) -> None:
        """Hits counted only in rollups (the plan reports them)."""
        self.capped_hits += hits


#: No page cap and the default top-pages budget (tests, benchmarks, the audit).
def unlimited() -> PageCaps:
    """Caps with no page limit and the default top-pages budget."""
    return PageCaps(0)
