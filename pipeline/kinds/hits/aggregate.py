"""Hit counting: (site, page, UTC minute) → count in memory for one flush window.

Counts, visitors and properties are kept as they arrive (by UTC minute and quarter hour)
and planned into documents only at flush time (:mod:`pipeline.kinds.hits.planning`),
with the zones, caps and retention read for that flush. ``h`` and ``m`` count hours and
minutes elapsed since the local day's start, so the 25th hour of a DST day has a counter
of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime

from pipeline.core.calendar import SLOT
from pipeline.core.rejection import Rejection
from pipeline.core.times import minute_of
from pipeline.core.uniques import Budget
from pipeline.core.updates import DocUpdate
from pipeline.core.visit_hits import VisitHit
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.families import PAGES, SITES, Family, of_family
from pipeline.kinds.hits.layout import HitsFields
from pipeline.kinds.hits.planning import plan_hits
from pipeline.kinds.hits.planning.inputs import (
    UTC_SITES,
    Calendars,
    DayKey,
    Key,
    PropCounts,
    PropKeySource,
    SlotKey,
    UtcCalendars,
    cap_key,
)
from pipeline.kinds.hits.sites.caps import PageCaps, unlimited
from pipeline.kinds.hits.visit_log import VisitLog
from pipeline.kinds.hits.visitors import ident_hash, keyed_hash

__all__ = [
    "UTC_SITES",
    "Calendars",
    "DayKey",
    "HitCounts",
    "Key",
    "PropCounts",
    "PropKeySource",
    "SlotKey",
    "UtcCalendars",
    "cap_key",
    "decode_refusals",
    "encode_refusals",
    "plan_hits",
]


#: Leads the recorded decisions of a flush that wrote the pages' family only (8 bytes, as a
#: refusal's key: :func:`decode_refusals` reads whole keys).
PAGES_ONLY = b"\x00pages\x00\x00"


class HitCounts:
    """The initialize/agg/result aggregator of hits for one flush window.

    Custom properties are counted by their text here; their stored keys (name-store
    tokens) are resolved by the flush before :meth:`plan` (see :meth:`prop_pairs`).
    """

    __slots__ = (
        "_assumed",
        "_refused",
        "calendars",
        "caps",
        "counts",
        "days",
        "decoder",
        "family",
        "fields",
        "forward",
        "prop_keys",
        "props",
        "props_pending",
        "site_days",
        "visit_partitions",
        "visitor_budget",
        "visitor_keys",
        "visits",
    )

    def __init__(
        self,
        decoder: HitDecoder,
        fields: HitsFields,
        prop_keys: PropKeySource | None = None,
        calendars: Calendars = UTC_SITES,
        caps: PageCaps | None = None,
        visitor_keys: Callable[[int], bytes] | None = None,
        visitor_budget: Budget | None = None,
        family: Family = None,
        forwarding: bool = False,
    ) -> None:
        self.decoder = decoder
        #: Which documents this window writes (:data:`Family`).
        self.family = family
        #: Pages per day and top pages (:mod:`pipeline.kinds.hits.sites.caps`), shared by a worker's windows.
        self.caps = caps if caps is not None else unlimited()
        #: The page-cap refusals of the last plan (:meth:`decisions`), and those a redo assumes.
        self._refused: set[bytes] = set()
        self._assumed: frozenset[bytes] | None = None
        self.fields = fields
        self.prop_keys = prop_keys
        self.calendars = calendars
        self.counts: dict[Key, int] = {}
        self.props: PropCounts = {}
        self.props_pending = 0
        #: (site, page, local day) of every daily document touched: :meth:`documents` in O(1).
        #: Local days by the zones known at ingest; the plan uses those of its flush,
        #: which differ only for a zone change announced an hour ahead (an estimate).
        self.days: set[DayKey] = set()
        #: (site, local day) of every site rollup touched.
        self.site_days: set[tuple[str, int]] = set()
        #: Per (site, page, quarter hour) the visitors seen (:mod:`pipeline.kinds.hits.visit_log`).
        self.visits = VisitLog()
        #: The source partitions of those visitors: one (an idempotent-writes batch keeps an
        #: aggregate per partition), and its sketches' registers are that partition's documents.
        self.visit_partitions: set[int] = set()
        #: Local day ordinal → the key of its visitor hashes (:mod:`pipeline.kinds.hits.salt`).
        self.visitor_keys = visitor_keys
        #: What this worker wrote to each sketch holder, across its flushes.
        self.visitor_budget = visitor_budget if visitor_budget is not None else Budget()
        #: With ``forwarding``: every identified hit in arrival order (site, in-memory visitor
        #: hash, time, page), for the visits stage (:meth:`visit_hits`).
        self.forward: list[tuple[str, int, float, str]] | None = [] if forwarding else None

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Count one encoded hit; a rejection is returned, not raised."""
        got = self.decoder.decode_visit(raw)
        if isinstance(got, Rejection):
            return got
        (site, page, ts, props), who = got
        ident = None if who is None else ident_hash(site, who)
        if ident is not None and self.forward is not None:
            self.forward.append((site, ident, ts, page))
        if self.family == SITES:  # the rollups need no page: one key per site and minute
            page = ""
        minute = minute_of(ts)
        key = (site, page, minute)
        counts = self.counts
        n = counts.get(key)
        if n is None:
            counts[key] = 1
            ordinal = self.calendars.calendar(site).day_of(minute)[0]
            self.days.add((site, page, ordinal))
            self.site_days.add((site, ordinal))
        else:
            counts[key] = n + 1
        if props:
            dk = (site, page, minute // SLOT)
            pairs = self.props.get(dk)
            if pairs is None:
                pairs = self.props[dk] = {}
            for pair in props:
                n = pairs.get(pair)
                if n is None:
                    pairs[pair] = 1
                    self.props_pending += 1
                else:
                    pairs[pair] = n + 1
        if ident is not None:
            self.visits.add((site, page, minute // SLOT), ident)
            self.visit_partitions.add(partition)
        return None

    def __len__(self) -> int:
        return len(self.counts) + self.props_pending + self.visits.weight() + len(self.forward or ())

    def visit_hits(self) -> list[VisitHit]:
        """The identified hits to forward, in arrival order, each visitor as its keyed hash
        (:func:`~pipeline.kinds.hits.visitors.keyed_hash` with its local day's key, as the
        sketches store it): a function of the hits, so a flush written again forwards the same."""
        if not self.forward:
            return []
        if self.visitor_keys is None:
            raise RuntimeError("forwarded hits need the visitor keys (visitor_keys)")
        keyed: dict[tuple[int, int], int] = {}
        out: list[VisitHit] = []
        for site, ident, ts, page in self.forward:
            ordinal = self.calendars.calendar(site).day_of(minute_of(ts))[0]
            h = keyed.get((ordinal, ident))
            if h is None:
                h = keyed[ordinal, ident] = keyed_hash(self.visitor_keys(ordinal), ident)
            out.append(VisitHit(site, h, float(ts), page))
        return out

    def documents(self) -> int:
        """Daily documents touched, twice (each has at most one monthly document), pages' and sites'.

        A site's day has two (its rollup and its top pages), and so has its month.
        """
        return 2 * len(self.days) + 4 * len(self.site_days)

    def periods(self) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
        """(site, local day ordinal) and (site, month's first day ordinal) this window touches."""
        days = set(self.site_days)
        months = {(site, ordinal - date.fromordinal(ordinal).day + 1) for site, ordinal in days}
        return days, months

    def visited(self) -> dict[tuple[str, int], set[str]]:
        """Per (site, local day ordinal) the pages this window has visitors of (their counts to refresh)."""
        out: dict[tuple[str, int], set[str]] = {}
        for site, page, slot in self.visits:
            ordinal = self.calendars.calendar(site).day_of(slot * SLOT)[0]
            out.setdefault((site, ordinal), set()).add(page)
        return out

    def prop_pairs(self) -> dict[str, set[tuple[str, str]]]:
        """Per site, the (name, value) pairs this window counts: what the name store must resolve."""
        out: dict[str, set[tuple[str, str]]] = {}
        for (site, _, _), pairs in self.props.items():
            out.setdefault(site, set()).update(pairs)
        return out

    def plan(self) -> list[DocUpdate]:
        """The upserts that add this window's counts to MongoDB."""
        if self.props and self.prop_keys is None:
            raise RuntimeError("hits with properties need a name store (prop_keys)")
        if self.visits and self.visitor_keys is None:
            raise RuntimeError("hits with visitors need the visitor keys (visitor_keys)")
        now = datetime.now(UTC)
        today = datetime(now.year, now.month, now.day)
        self._refused = set()
        return of_family(
            self.family,
            self.fields,
            plan_hits(
                self.counts,
                self.fields,
                self.props,
                self.prop_keys,
                self.calendars,
                self.caps,
                today,
                refused=self._assumed,
                record=self._refused,
                visits=self.visits,
                visitor_keys=self.visitor_keys,
                budget=self.visitor_budget,
                writer=next(iter(self.visit_partitions)) if len(self.visit_partitions) == 1 else None,
                family=self.family,
            ),
        )

    def decisions(self) -> bytes | None:
        """What the last plan decided from this worker's state alone: the pages it refused a
        document of their own (past the day's cap), and the visitor sketches it wrote as
        registers (:func:`~pipeline.core.uniques.holder_key`). A flush's intent records it, so
        that a redo of its range on another worker decides exactly so (docs/exactly-once.md)."""
        refused = encode_refusals(self._refused) if self._refused else b""
        if self.family == PAGES:
            return PAGES_ONLY + refused
        return refused or None

    def assume(self, decisions: bytes | None) -> None:
        """Plan as the flush that recorded ``decisions`` did (``None``: it refused no page).

        A redo by the pages' flusher of a flush that wrote every document (recorded before
        the site rollups ran ahead: its decisions lack :data:`PAGES_ONLY`) writes every
        document too; the rollups' ledger starts after it (pipeline/core/families.py)."""
        raw = decisions or b""
        if self.family == PAGES:
            if raw.startswith(PAGES_ONLY):
                raw = raw[len(PAGES_ONLY) :]
            else:
                self.family = None
        self._assumed = decode_refusals(raw)


def encode_refusals(keys: Iterable[bytes]) -> bytes:
    """A flush's page-cap refusals as one byte string (sorted 8-byte keys)."""
    return b"".join(sorted(keys))


def decode_refusals(raw: bytes) -> frozenset[bytes]:
    return frozenset(raw[i : i + 8] for i in range(0, len(raw), 8))
