"""Retention tiers of the hits documents: minute counters for N days, hourly for M, the rest forever (pure).

Pruning removes a whole counter field (``minute``, then ``hourly``) from the daily
documents of days past their tier; totals, properties and monthly documents stay.
The tiers count whole UTC days back from today: a day is pruned when its date is
older than ``today - N``. The workers' periodic runs also spare a document written
within the tier (its ``written`` stamp): a backfill of old logs is not pruned minutes
after it was counted; ``preagg retention run`` (an operator's decision) prunes by date.

A run first records its cutoffs (:class:`Pruned`, in ``preagg_meta``), waits for the
workers to read them, then prunes. Workers write no counter of a tier into a day up
to its recorded cutoff (:meth:`Pruned.keeps`: one day of margin), so a late event
never recreates a pruned minute: it still counts in its hour, day and month. Until a
first run, nothing is dropped: a backfill of old logs keeps every counter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pipeline.core.times import midnight
from pipeline.kinds.hits.layout import DailyFields

#: Seconds a worker keeps the sites' settings (and the recorded cutoffs) before reading them again.
REFRESH_SECONDS = 10.0
#: Seconds between recording the cutoffs and pruning: every worker re-reads them meanwhile.
SETTLE_SECONDS = 2 * REFRESH_SECONDS


@dataclass(frozen=True)
class Tiers:
    """Days kept of minute and hourly counters (0: forever)."""

    minute_days: int = 30
    hour_days: int = 400


@dataclass(frozen=True)
class Retention:
    """The deployment's tiers and the per-site overrides: what a run prunes."""

    default: Tiers
    overrides: Mapping[str, Tiers]

    def tiers(self, site: str) -> Tiers:
        """The site's tiers."""
        return self.overrides.get(site, self.default)


#: Key of the sites on the deployment's tiers in :class:`Pruned`.
ALL = "*"


@dataclass(frozen=True)
class Pruned:
    """Per tier, the cutoff of the last run (a UTC date ordinal: days before it are pruned).

    Keyed by site for the sites with overrides, :data:`ALL` for the others.
    """

    minute: Mapping[str, int]
    hour: Mapping[str, int]

    def keeps(self, site: str, day_ordinal: int) -> tuple[bool, bool]:
        """Whether a worker may write (minute, hourly) counters of the site's local day.

        Not up to the cutoff itself: the margin covers a day pruned by the next run
        while a worker still holds the previous cutoffs.
        """
        m = self.minute.get(site, self.minute.get(ALL))
        h = self.hour.get(site, self.hour.get(ALL))
        hour = h is None or day_ordinal > h
        return hour and (m is None or day_ordinal > m), hour

    def as_doc(self) -> dict[str, Any]:
        """How ``preagg_meta`` stores it (site names are values: a dot in one is no path)."""
        return {
            "minute": [{"site": k, "before": midnight(date.fromordinal(v))} for k, v in self.minute.items()],
            "hour": [{"site": k, "before": midnight(date.fromordinal(v))} for k, v in self.hour.items()],
        }

    @classmethod
    def of_doc(cls, doc: Mapping[str, Any] | None) -> Pruned:
        """The stored cutoffs (none before a first run)."""
        doc = doc or {}
        return cls(
            {str(e["site"]): e["before"].date().toordinal() for e in doc.get("minute") or []},
            {str(e["site"]): e["before"].date().toordinal() for e in doc.get("hour") or []},
        )


NOTHING_PRUNED = Pruned({}, {})
#: Cutoff of a site whose override keeps a tier forever (0): before the first day, nothing
#: is pruned; recorded so that :meth:`Pruned.keeps` does not fall back to the deployment's.
FOREVER = 1


def cutoffs(retention: Retention, today: date) -> Pruned:
    """The cutoffs a run at ``today`` prunes before (a tier of 0 has none)."""
    out: dict[str, dict[str, int]] = {"minute": {}, "hour": {}}
    for key, t in [(ALL, retention.default), *retention.overrides.items()]:
        for tier, days in (("minute", t.minute_days), ("hour", t.hour_days)):
            if days:
                out[tier][key] = (today - timedelta(days=days)).toordinal()
            elif key != ALL:
                out[tier][key] = FOREVER
    return Pruned(out["minute"], out["hour"])


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


def prunes(f: DailyFields, retention: Retention, today: date, spare_recent: bool = False) -> list[Prune]:
    """The few statements of a run: per tier, one for the sites on the defaults, one per override.

    Each filter names the field it removes (``$exists``), so a second run finds nothing
    to do and a run's count is what it removed. ``spare_recent`` (the workers' periodic
    runs): a document written within the tier is not pruned whatever its date, so a
    backfill of old logs keeps its minutes and hours for a tier from its writing.
    """
    site, day = f"{f.metadata}.{f.site}", f"{f.metadata}.{f.date}"
    out = []
    tiers = (
        ("minute", f.minute, "minute_days"),
        ("hourly", f.hourly, "hour_days"),
        # hourly visitors live as long as the hourly counters (docs/visitors.md)
        ("hourly visitor", f.hourly_visitors, "hour_days"),
    )
    for what, field, attr in tiers:
        groups: dict[int, list[str]] = {}
        for s, t in retention.overrides.items():
            groups.setdefault(getattr(t, attr), []).append(s)
        default_days: int = getattr(retention.default, attr)
        others = sorted(retention.overrides)
        if default_days:
            flt: dict[str, Any] = {day: {"$lt": midnight(today - timedelta(days=default_days))}}
            if others:
                flt[site] = {"$nin": others}
            flt[field] = {"$exists": True}
            if spare_recent:
                flt.update(_written_before(f, today - timedelta(days=default_days)))
            out.append(Prune(f"{what} counters older than {default_days} days", field, flt))
        for days, sites in sorted(groups.items()):
            if not days:
                continue
            flt = {
                site: sites[0] if len(sites) == 1 else {"$in": sorted(sites)},
                day: {"$lt": midnight(today - timedelta(days=days))},
                field: {"$exists": True},
            }
            if spare_recent:
                flt.update(_written_before(f, today - timedelta(days=days)))
            out.append(
                Prune(f"{what} counters older than {days} days of {', '.join(sorted(sites))}", field, flt)
            )
    return out


def _written_before(f: DailyFields, d: date) -> dict[str, Any]:
    """Documents last written before ``d`` (or before the stamp existed)."""
    return {"$or": [{f.written: {"$lt": midnight(d)}}, {f.written: {"$exists": False}}]}
