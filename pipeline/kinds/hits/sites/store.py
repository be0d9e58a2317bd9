"""Per-site settings kept in MongoDB (``hits_sites``): time-zone history and retention overrides.

One small document per configured site::

    {"_id": "shop.example",
     "zones": [{"since": null, "zone": "UTC"}, {"since": ISODate("2026-12-01"), "zone": "Europe/Berlin"}],
     "retention": {"minutes": 7, "hours": 90}}

It lives in MongoDB, not in settings, so every worker, ``preagg query`` and ``preagg
serve`` agree on it without a restart. Workers re-read it at most every
:data:`REFRESH_SECONDS`; that is why a zone change on a site with hits takes effect
only from a local date whose midnight is at least :func:`notice_seconds` away: every
worker has read the change before any event it concerns can arrive (docs/calendar.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.calendar import UTC_CALENDAR, Calendar, ZoneChange, ZoneError, check_zone, minute_dt
from pipeline.core.errors import InputError
from pipeline.kinds.hits.layout import SITES_COLLECTION
from pipeline.kinds.hits.sites.tiers import REFRESH_SECONDS, Pruned
from pipeline.store.meta import META_COLLECTION
from pipeline.store.reads import find_in

COLLECTION = SITES_COLLECTION
#: ``preagg_meta`` ``_id`` of the last retention run's cutoffs.
PRUNED_ID = "hits_retention"
#: Least notice of a zone change on a site with hits, whatever the future skew.
MIN_NOTICE = 3600.0


class SiteConfigError(InputError):
    """A zone or retention change that cannot be made; the message says why and what to do."""


@dataclass(frozen=True)
class SiteConfig:
    """One site's zone history and retention overrides (``None``: the deployment's)."""

    site: str
    changes: tuple[ZoneChange, ...] = (ZoneChange(None, "UTC"),)
    minute_days: int | None = None
    hour_days: int | None = None
    calendar: Calendar = field(default=UTC_CALENDAR, compare=False, repr=False)

    @property
    def zone(self) -> str:
        """The zone in effect from the last change on."""
        return self.changes[-1].zone


def _changes(doc: dict[str, Any]) -> tuple[ZoneChange, ...]:
    out = []
    for z in doc.get("zones") or []:
        since = z.get("since")
        out.append(ZoneChange(since.date() if isinstance(since, datetime) else None, str(z["zone"])))
    return tuple(out) or (ZoneChange(None, "UTC"),)


def config_of(doc: dict[str, Any]) -> SiteConfig:
    """A stored document as a :class:`SiteConfig` (its calendar built once)."""
    changes = _changes(doc)
    retention = doc.get("retention") or {}
    return SiteConfig(
        str(doc["_id"]),
        changes,
        retention.get("minutes"),
        retention.get("hours"),
        UTC_CALENDAR if changes == (ZoneChange(None, "UTC"),) else Calendar(changes),
    )


async def load(
    db: AsyncDatabase[dict[str, Any]], sites: Iterable[str] | None = None
) -> dict[str, SiteConfig]:
    """The stored settings of ``sites`` (all when ``None``); an unconfigured site is absent."""
    coll = db[COLLECTION]
    if sites is None:
        return {str(d["_id"]): config_of(d) async for d in coll.find({})}
    return {str(d["_id"]): config_of(d) async for d in find_in(coll, sorted(set(sites)))}


async def site_config(db: AsyncDatabase[dict[str, Any]], site: str) -> SiteConfig:
    """One site's settings (UTC and the deployment's retention when it has none)."""
    return (await load(db, [site])).get(site) or SiteConfig(site)


def notice_seconds(future_skew: float) -> float:
    """Least time between a zone change and its boundary: workers' refresh and events' skew."""
    return max(MIN_NOTICE, future_skew + 2 * REFRESH_SECONDS)


def plan_zone_change(
    current: SiteConfig, zone: str, since: date | None, has_hits: bool, now: float, future_skew: float
) -> tuple[ZoneChange, ...]:
    """The site's zone history after ``preagg sites set-zone``, or why it cannot change so.

    Without ``since`` the zone applies from the beginning, which only a site without
    hits may do: its history is not rewritten silently. With ``since`` the change takes
    effect at that local midnight, which must be far enough ahead (:func:`notice_seconds`).
    """
    try:
        check_zone(zone)
    except ZoneError as exc:
        raise SiteConfigError(str(exc)) from None
    if since is None:
        if has_hits:
            raise SiteConfigError(
                f"{current.site} already has hits, counted in {current.zone}: give --from DATE, a local "
                "date from which the new zone applies (earlier days keep theirs)"
            )
        return (ZoneChange(None, zone),)
    kept = tuple(c for c in current.changes if c.since is None or c.since < since)
    later = [c for c in current.changes if c.since is not None and c.since >= since]
    changes = (*kept, ZoneChange(since, zone))
    try:
        cal = Calendar(changes)
    except ZoneError as exc:
        raise SiteConfigError(str(exc)) from None
    boundary = minute_dt(cal.start(since.toordinal())).timestamp()
    notice = notice_seconds(future_skew)
    earliest_replaced = min((cal.start(c.since.toordinal()) for c in later if c.since), default=None)
    if has_hits and boundary < now + notice:
        raise SiteConfigError(
            f"{since} starts at {datetime.fromtimestamp(boundary, UTC):%Y-%m-%d %H:%M} UTC in {zone}: a zone "
            f"change on a site with hits needs {notice / 3600:.1f} h of notice so that every worker has read "
            "it first; pick a later date"
        )
    if has_hits and earliest_replaced is not None and minute_dt(earliest_replaced).timestamp() < now + notice:
        raise SiteConfigError("a pending zone change already in effect (or about to be) cannot be replaced")
    return changes


async def has_hits(db: AsyncDatabase[dict[str, Any]], monthly: str, site_field: str, site: str) -> bool:
    """True when a monthly hits document of ``site`` exists."""
    return await db[monthly].find_one({site_field: site}, {"_id": 1}) is not None


async def save_zones(
    db: AsyncDatabase[dict[str, Any]], current: SiteConfig, changes: tuple[ZoneChange, ...]
) -> None:
    """Store ``changes`` if nobody changed the site meanwhile (compare and set), else refuse."""
    old = [_stored(c) for c in current.changes] if current.changes != (ZoneChange(None, "UTC"),) else None
    new = [_stored(c) for c in changes]
    flt: dict[str, Any] = {"_id": current.site}
    if old is None:
        flt["$or"] = [{"zones": {"$exists": False}}, {"zones": [_stored(ZoneChange(None, "UTC"))]}]
    else:
        flt["zones"] = old
    res = await db[COLLECTION].update_one(flt, {"$set": {"zones": new}}, upsert=old is None)
    if res.matched_count == 0 and res.upserted_id is None:
        raise SiteConfigError(f"{current.site}'s zones changed meanwhile: run the command again")


def _stored(c: ZoneChange) -> dict[str, Any]:
    return {"since": datetime(c.since.year, c.since.month, c.since.day) if c.since else None, "zone": c.zone}


async def save_retention(
    db: AsyncDatabase[dict[str, Any]], site: str, minute_days: int | None, hour_days: int | None
) -> None:
    """Set (a number) or clear (``0`` → deployment default) a site's retention overrides."""
    sets: dict[str, Any] = {}
    unsets: dict[str, Any] = {}
    for name, value in (("minutes", minute_days), ("hours", hour_days)):
        if value is None:
            continue
        if value < 0:
            raise SiteConfigError(f"--{name} {value}: days must be 0 (the default) or more")
        if value == 0:
            unsets[f"retention.{name}"] = ""
        else:
            sets[f"retention.{name}"] = value
    update: dict[str, Any] = {}
    if sets:
        update["$set"] = sets
    if unsets:
        update["$unset"] = unsets
    if update:
        await db[COLLECTION].update_one({"_id": site}, update, upsert=True)


async def load_pruned(db: AsyncDatabase[dict[str, Any]]) -> Pruned:
    """The cutoffs the last ``preagg retention run`` recorded."""
    return Pruned.of_doc(await db[META_COLLECTION].find_one({"_id": PRUNED_ID}))


async def save_pruned(db: AsyncDatabase[dict[str, Any]], pruned: Pruned) -> None:
    """Record a run's cutoffs before it prunes (workers stop writing those days)."""
    await db[META_COLLECTION].update_one({"_id": PRUNED_ID}, {"$set": pruned.as_doc()}, upsert=True)
