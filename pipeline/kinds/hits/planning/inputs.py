"""What a plan of hits documents is made from: the keys of counts, the sites' calendars, the
property keys, and the names of a flush's page-cap refusals."""

from __future__ import annotations

from typing import Protocol

import xxhash

from pipeline.core.calendar import UTC_CALENDAR, Calendar
from pipeline.kinds.hits.sites.tiers import NOTHING_PRUNED, Pruned

Key = tuple[str, str, int]
"""(site, page, minute since the epoch, UTC)."""

DayKey = tuple[str, str, int]
"""(site, page, local date ordinal): one daily document."""

SlotKey = tuple[str, str, int]
"""(site, page, UTC quarter hour since the epoch): properties are kept this fine so that
they land in the right local day (every zone's midnight is on a quarter hour)."""

PropCounts = dict[SlotKey, dict[tuple[str, str], int]]
"""Per (site, page, quarter hour), hits per property (name, value)."""


class Calendars(Protocol):
    """Each site's local calendar and retention (:class:`pipeline.kinds.hits.sites.cache.SiteConfigs`)."""

    def calendar(self, site: str) -> Calendar: ...

    def retention(self) -> Pruned: ...


class UtcCalendars:
    """Every site in UTC, every counter kept (tests, benchmarks, the audit)."""

    def calendar(self, site: str) -> Calendar:
        return UTC_CALENDAR

    def retention(self) -> Pruned:
        return NOTHING_PRUNED


UTC_SITES = UtcCalendars()


class PropKeySource(Protocol):
    """Counter keys of resolved custom properties (:class:`pipeline.kinds.hits.props.PropKeys`)."""

    def keys(self, site: str, name: str, value: str) -> tuple[str, str]: ...


def cap_key(site: str, page: str, ordinal: int) -> bytes:
    """8 bytes naming a (site, page, local day) in a flush's recorded page-cap refusals."""
    return xxhash.xxh64_digest(f"{site}\x00{page}\x00{ordinal}".encode("utf-8", "surrogatepass"))
