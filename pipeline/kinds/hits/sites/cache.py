"""A worker's cache of every site's settings and the last retention cutoffs, re-read every few seconds.

Each flush asks it a site's calendar (zone) and whether a counter was pruned; reading
``hits_sites`` per flush would cost a round trip each time, and a change needs to
reach every worker only within :data:`~pipeline.kinds.hits.sites.tiers.REFRESH_SECONDS`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.calendar import UTC_CALENDAR, Calendar
from pipeline.kinds.hits.sites.store import SiteConfig, load, load_pruned
from pipeline.kinds.hits.sites.tiers import (
    NOTHING_PRUNED,
    REFRESH_SECONDS,
    Pruned,
    Retention,
    Tiers,
    site_tiers,
)


def retention_of(default: Tiers, configs: Iterable[SiteConfig]) -> Retention:
    """The deployment's tiers with the overrides of the sites that have some."""
    return Retention(
        default,
        {
            c.site: site_tiers(default, c.minute_days, c.hour_days)
            for c in configs
            if c.minute_days is not None or c.hour_days is not None
        },
    )


class SiteConfigs:
    """A worker's cache of sites' settings, re-read at most every :data:`REFRESH_SECONDS`."""

    def __init__(
        self, db: AsyncDatabase[dict[str, Any]], clock: Any = time.monotonic, every: float = REFRESH_SECONDS
    ) -> None:
        self.db = db
        self.clock = clock
        self.every = every
        self.configs: dict[str, SiteConfig] = {}
        self._pruned = NOTHING_PRUNED
        self._read_at: float | None = None

    async def refresh(self) -> None:
        """Read every site's settings when the last read is older than :attr:`every`."""
        now = self.clock()
        if self._read_at is not None and now - self._read_at < self.every:
            return
        fresh = await load(self.db)
        for site, c in fresh.items():  # a site whose zones did not change keeps its memoised calendar
            old = self.configs.get(site)
            if old is not None and old.changes == c.changes:
                fresh[site] = replace(c, calendar=old.calendar)
        self.configs = fresh
        self._pruned = await load_pruned(self.db)
        self._read_at = now

    def retention(self) -> Pruned:
        """The last retention run's cutoffs, as last read."""
        return self._pruned

    def get(self, site: str) -> SiteConfig | None:
        """The site's settings as last read (``None``: UTC, deployment retention)."""
        return self.configs.get(site)

    def calendar(self, site: str) -> Calendar:
        """The site's calendar as last read (UTC when unconfigured)."""
        c = self.configs.get(site)
        return c.calendar if c is not None else UTC_CALENDAR
