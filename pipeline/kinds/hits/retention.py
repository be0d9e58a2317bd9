"""Retention tiers of the hits documents: minute counters for N days, hourly for M, the rest forever (pure).

Pruning removes a whole counter field (``minute``, then ``hourly``) from the daily
documents of days past their tier; totals, properties and monthly documents stay.
The tiers count whole UTC days back from today: a day is pruned when its date is
older than ``today - N``. Workers drop the counters of a tier one day *earlier*
(:meth:`Retention.keeps`), so a late event never writes a minute into a day that a
retention run, at whatever moment, may have pruned: it still counts in its hour,
day and month.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pipeline.kinds.hits.layout import DailyFields


@dataclass(frozen=True)
class Tiers:
    """Days kept of minute and hourly counters (0: forever)."""

    minute_days: int = 30
    hour_days: int = 400


@dataclass(frozen=True)
class Retention:
    """The deployment's tiers and the per-site overrides, as of one moment."""

    default: Tiers
    overrides: Mapping[str, Tiers]

    def tiers(self, site: str) -> Tiers:
        """The site's tiers."""
        return self.overrides.get(site, self.default)

    def keeps(self, site: str, day_ordinal: int, today: int) -> tuple[bool, bool]:
        """Whether a worker may write (minute, hourly) counters of the site's local day now.

        One day of margin before the run's cutoff (see the module's docstring).
        """
        t = self.tiers(site)
        minute = t.minute_days == 0 or day_ordinal > today - t.minute_days
        hour = t.hour_days == 0 or day_ordinal > today - t.hour_days
        return minute and hour, hour


def site_tiers(default: Tiers, minute_days: int | None, hour_days: int | None) -> Tiers:
    """A site's tiers: its overrides where set, else the deployment's."""
    return Tiers(
        default.minute_days if minute_days is None else minute_days,
        default.hour_days if hour_days is None else hour_days,
    )


def utc_today(now: datetime | None = None) -> date:
    """Today's UTC date (what the tiers count from)."""
    return (now or datetime.now(UTC)).astimezone(UTC).date()


@dataclass(frozen=True)
class Prune:
    """One statement of a retention run: unset ``field`` of the daily documents matching ``filter``."""

    what: str
    field: str
    filter: dict[str, Any]


def prunes(f: DailyFields, retention: Retention, today: date) -> list[Prune]:
    """The few statements of a run: per tier, one for the sites on the defaults, one per override.

    Each filter names the field it removes (``$exists``), so a second run finds nothing
    to do and a run's count is what it removed.
    """
    site, day = f"{f.metadata}.{f.site}", f"{f.metadata}.{f.date}"
    out = []
    for what, field, attr in (("minute", f.minute, "minute_days"), ("hourly", f.hourly, "hour_days")):
        groups: dict[int, list[str]] = {}
        for s, t in retention.overrides.items():
            groups.setdefault(getattr(t, attr), []).append(s)
        default_days: int = getattr(retention.default, attr)
        others = sorted(retention.overrides)
        if default_days:
            flt: dict[str, Any] = {day: {"$lt": _midnight(today - timedelta(days=default_days))}}
            if others:
                flt[site] = {"$nin": others}
            flt[field] = {"$exists": True}
            out.append(Prune(f"{what} counters older than {default_days} days", field, flt))
        for days, sites in sorted(groups.items()):
            if not days:
                continue
            flt = {
                site: sites[0] if len(sites) == 1 else {"$in": sorted(sites)},
                day: {"$lt": _midnight(today - timedelta(days=days))},
                field: {"$exists": True},
            }
            out.append(
                Prune(f"{what} counters older than {days} days of {', '.join(sorted(sites))}", field, flt)
            )
    return out


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day)
