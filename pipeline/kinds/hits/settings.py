"""Settings of the hits stream (``PREAGG_HITS_*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.settings import StreamKey, StreamSettings


@dataclass(frozen=True)
class HitsSettings(StreamSettings):
    """Topic and custom-property limits of web hits."""

    #: Topic of raw web hits.
    topic: str = "hits"
    #: Site of hits whose line names none (access-log lines, JSON events without ``site``)
    #: when ``site_field`` and ``site_map`` give none either. Empty: such hits are
    #: dead-lettered (``site``).
    site: str = ""
    #: Which envelope field names the site of a shipped line: ``host`` (Vector ``host``,
    #: Filebeat ``host.name``, Fluent Bit ``hostname``) or ``file`` (the log file's path).
    #: Empty: none, the site is ``site``.
    site_field: Literal["", "host", "file"] = ""
    #: ``PATTERN=SITE`` entries, comma-separated, first match wins (shell patterns:
    #: ``web-*=shop.example,/var/log/nginx/blog*=blog.example``), applied to ``site_field``.
    #: Without entries the field's value is the site itself (a file path: its name without
    #: extension); with entries, an unmatched value falls back to ``site``.
    site_map: tuple[str, ...] = ()
    #: Query strings of pages: ``drop`` (``/search?q=x`` counts as ``/search``, as web
    #: analytics tools do), ``keep`` (every query a page of its own: a crawler walking
    #: queries creates a document per URL), or ``allow:<name>,<name>`` (keep only those
    #: parameters, e.g. ``allow:id,lang``). See pipeline/kinds/hits/pages.py.
    query_string: str = "drop"
    #: Lower-case page paths (``/About`` and ``/about`` one page). Off: paths are
    #: case-sensitive on most servers, and two pages would be merged.
    lowercase_paths: bool = False
    #: Most pages per site and local day with documents of their own; past it a new
    #: page of the day is counted only in the site's rollups, under ``(other)`` in its
    #: top pages (``preagg_pages_capped_total``, ``preagg status``). It bounds the page
    #: documents a crawler can create; site charts stay exact. Each worker holds the
    #: names of the days it writes (about 60 bytes a page). 0: no limit.
    max_pages_per_day: int = 50_000
    #: Bytes of a site's top pages of one day or month (escaped page → count, about 10
    #: bytes a page more than its name: 4 KiB holds about 80 pages of 40-byte names).
    #: A batch's busiest pages enter first; past the budget a new page counts under
    #: ``(other)`` until the period is sealed (``top_pages_seal_after``). Higher: longer
    #: lists, so more ranges and ``--no-bots`` answers proven exact from the lists alone,
    #: and slower top-page reads (30 days read up to 31 of them; at 16 KiB a 30-day list of
    #: a 100,000-page site took 17 ms p50 against 5.5 ms at 4 KiB: docs/benchmarks.md).
    top_pages_bytes: int = 4_096
    #: Seconds a site's day (month) must go unwritten by a worker before that worker makes
    #: its top pages exact from the page documents (docs/rollups.md, "Top pages"). Lower:
    #: exact answers sooner after a backfill; each seal reads the period's page documents
    #: once (a day of 100,000 pages: about a second of the store's time). 0: never seal
    #: (answers then say they are not exact, with their error bound).
    top_pages_seal_after: float = 3.0
    #: Seconds between two seals of a period written without pause (a live site's day and
    #: month): its answers are then off by at most that long's hits. Lower: a tighter bound
    #: on the open day, one more read of its page documents per interval. 0: only once settled.
    top_pages_seal_open_every: float = 60.0
    #: Access-log lines count their status, method, referrer host and user-agent family
    #: as custom properties (as ``preagg produce --props``): richer charts, bigger documents.
    clf_props: bool = False
    #: Most distinct custom property names per site, and most distinct values per
    #: property. Past them, new names (values) are counted under the token ``other``:
    #: a producer sending unbounded names (a user id as a name) cannot grow the name
    #: store or the documents without bound. Higher: more detail, bigger documents.
    props_max_names: int = 100
    props_max_values: int = 10_000
    #: Most sites whose custom properties are counted per property (registered in the name
    #: store in arrival order). Past it, a new site's properties count under ``other``: a
    #: stream of made-up site names cannot create name-store namespaces without bound
    #: (each such site brought 1 + its property count namespaces). Higher: more sites
    #: with property charts, a bigger name store.
    props_max_sites: int = 10_000
    #: Most custom properties on one hit, and longest property name or value in
    #: UTF-8 bytes; a hit over either limit is dead-lettered (``props``).
    props_max_per_event: int = 32
    props_max_bytes: int = 128
    #: Bytes the custom property counters of one daily document may take (MongoDB's limit
    #: is 16 MB a document). Split between ``props_max_names``: a property whose values
    #: would not fit its share counts further values as ``other`` even below
    #: ``props_max_values`` (with the defaults: 5,331 values in compact mode, 201 in
    #: readable mode with 128-byte values; see ``pipeline/kinds/hits/budget.py``).
    props_max_doc_bytes: int = 8_000_000
    #: Name-store namespaces a worker keeps cached between flushes (least recently used
    #: are dropped first and read again when needed): bounds a worker's memory when sites
    #: and properties keep appearing. Higher: fewer reads, more memory.
    name_cache_namespaces: int = 20_000
    #: Names one name-store document holds before the next document starts (the
    #: seed's array cap). Larger: fewer documents to read cold; each push rewrites
    #: a bigger array.
    name_store_doc_cap: int = 1000
    #: Days the minute counters (the real-time chart) and the hourly counters of the daily
    #: documents are kept; 0: forever. Daily and monthly counts are kept forever.
    #: ``preagg retention run`` prunes past them; ``preagg sites set-retention`` overrides
    #: them per site. Minutes are most of a daily document's bytes (docs/calendar.md):
    #: a shorter tier is a smaller collection, a longer one a real-time chart further back.
    retention_minute_days: int = 30
    retention_hour_days: int = 400
    #: Hours between the workers' own retention runs (one worker of the group runs each,
    #: never in its first 15 minutes); 0: off, run ``preagg retention run`` from cron
    #: instead. A run is a few ``update_many`` statements over old daily documents: on a
    #: large collection, schedule it off-peak with cron rather than let it land anywhere.
    retention_every: float = 24.0
    #: Count unique visitors: per site and page, HyperLogLog sketches by hour, day and month in
    #: the same documents and flush as the counters (docs/visitors.md). A visitor is the
    #: client address and user agent of an access-log line, or a JSON event's ``visitor``
    #: (or ``ip`` and ``ua``). Off: no sketch fields, about 14 bytes fewer a visitor a
    #: holder, and no ``visitors`` answers for what is written meanwhile.
    visitors: bool = True
    #: The keyed hash of a visitor: ``daily`` (a salt per UTC day, as Plausible does: one
    #: person is not linkable across days, so a range's uniques are the sum of its days'
    #: at most) or ``fixed`` (one salt: a person counts once over any range, and stays
    #: linkable across days by whoever holds the salt). The salt is kept in the store
    #: (``preagg_secrets``), never logged.
    visitor_salt: Literal["daily", "fixed"] = "daily"
    #: Seconds a site's day (month) must go unwritten by a worker before it folds the
    #: partitions' visitor registers its rollup holds into one set (docs/visitors.md): the
    #: rollup then holds 12 KB of registers instead of up to 12 KB per partition. Each fold
    #: is a transaction that reads and rewrites the holder; a live day is folded once it
    #: ends. 0: never (the rollups keep theirs; ``preagg retention run`` still folds).
    visitors_fold_after: float = 3.0
    #: Flush the site rollups (what a site chart reads: a few documents per site and day) on a
    #: schedule and a ledger of their own, ahead of the pages' documents, so that a live site
    #: chart is fresh within seconds however many pages are live, while the pages' documents
    #: follow at the store's pace (docs/design.md, "Site rollups ahead of pages"). Each event
    #: is then aggregated twice: a backlog is caught up at 0.83-0.93 times the speed. Off: one
    #: flush writes both, and the site chart waits for the pages. With idempotent writes only.
    rollups_ahead: bool = True
    #: Count visits, bounces, visit durations, entry and exit pages (docs/visits.md): every
    #: identified hit (its site, keyed visitor hash, time and page: never the address) is
    #: forwarded to ``visits_topic`` by visitor, and the workers' visits stage, reading that
    #: topic, counts each visit once closed into the site's day and month rollups and the
    #: pages' entries and exits. Needs ``visitors`` and exactly-once writes.
    visits: bool = False
    #: The topic forwarded hits go to (created by ``preagg setup`` when ``visits`` is on).
    visits_topic: str = "hits-visits"
    #: Seconds without a hit after which a visitor's visit ends (30 minutes, as Plausible and
    #: GA4). A visit counts once the stream's event time is that long past its last hit.
    visit_timeout: float = 1800.0
    #: Seconds of disorder waited for before a visit is closed: a hit later than this (by event
    #: time, behind the slowest partition) after its visit closed starts another visit. Higher:
    #: fewer visits split by late hits, visits counted later.
    visit_grace: float = 300.0
    #: Most visits one partition of the visits topic holds open (about 520 bytes each in the
    #: worker's memory, saved with every flush). Past it a flush closes the ones whose last hit
    #: is oldest before their time (counted, logged, ``preagg_visits_closed_early_total``): a
    #: later hit of one starts another visit. Higher: more memory a worker may need per
    #: partition for a flood of new visitors; the default is about 130 MB.
    visits_max_open: int = 250_000
    #: Seconds between the visits stage's flushes. Each saves every open visit of its partition
    #: (about 3 µs a visit, whatever the flush read), so a longer interval costs the worker less;
    #: a visit is counted up to this much later (after its 30-minute timeout anyway).
    visits_flush_interval: float = 5.0


#: The kind's name and settings type (``settings.of(KEY)``), for its modules the kind imports.
KEY = StreamKey("hits", HitsSettings)
