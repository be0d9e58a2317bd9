"""The documents one plan writes, each made on its first touch.

A plan touches a page's day and month, its site's day and month, and the site's top
lists; each gets exactly one update per flush, whatever number of counts touch it, and
the plan's updates come out in the order the documents were first touched (the order
of an update's fields, which the commit's splitting follows). Whether a page may have
documents of its own (the day's page cap) and which counters a day keeps (retention)
are decided here once per page-day.
"""

from __future__ import annotations

from datetime import date, datetime

from pipeline.core.calendar import Calendar, minute_dt
from pipeline.core.updates import DocUpdate
from pipeline.kinds.hits.layout import (
    DailyFields,
    HitsFields,
    daily_id,
    monthly_id,
    site_daily_id,
    site_monthly_id,
)
from pipeline.kinds.hits.planning.inputs import Calendars, DayKey, cap_key
from pipeline.kinds.hits.sites.caps import PageCaps


class Touched:
    """The plan's documents by kind, and the decisions taken once per page-day."""

    def __init__(
        self,
        fields: HitsFields,
        calendars: Calendars,
        caps: PageCaps,
        written: datetime | None,
        refused: frozenset[bytes] | None,
        record: set[bytes] | None,
    ) -> None:
        self.fields, self.calendars, self.caps = fields, calendars, caps
        self.refused, self.record = refused, record
        self.retention = calendars.retention()
        self.page_days: dict[DayKey, DocUpdate] = {}
        self.page_months: dict[tuple[str, str, int, int], DocUpdate] = {}
        self.site_days: dict[tuple[str, int], DocUpdate] = {}
        self.site_months: dict[tuple[str, int, int], DocUpdate] = {}
        self.tops: dict[tuple[str, str, int], DocUpdate] = {}
        self._keeps: dict[tuple[str, int], tuple[bool, bool]] = {}
        self._admitted: dict[DayKey, bool] = {}
        # the workers' retention runs do not prune what was written within its tier (a backfill)
        self._stamp: dict[str, object] = {fields.daily.written: written} if written is not None else {}

    def updates(self, *more: DocUpdate) -> list[DocUpdate]:
        """Every touched document's update: pages' days and months, sites', top lists, ``more``."""
        return [
            *self.page_days.values(),
            *self.page_months.values(),
            *self.site_days.values(),
            *self.site_months.values(),
            *self.tops.values(),
            *more,
        ]

    def keeps(self, site: str, ordinal: int) -> tuple[bool, bool]:
        """(minutes kept, hours kept) of a site's local day under retention."""
        keep = self._keeps.get((site, ordinal))
        if keep is None:
            keep = self._keeps[site, ordinal] = self.retention.keeps(site, ordinal)
        return keep

    def admits(self, site: str, page: str, ordinal: int) -> bool:
        """Whether the page has documents of its own that day (else only its site's rollups).

        A redo decides as its flush did (``refused``); a first plan asks the caps and
        records what it refuses (``record``)."""
        ok = self._admitted.get((site, page, ordinal))
        if ok is None:
            if self.refused is not None:
                ok = cap_key(site, page, ordinal) not in self.refused
            else:
                ok = self.caps.admits(site, ordinal, page)
            if not ok and self.record is not None:
                self.record.add(cap_key(site, page, ordinal))
            self._admitted[site, page, ordinal] = ok
        return ok

    @staticmethod
    def day_meta(f: DailyFields, cal: Calendar, ordinal: int, start: int) -> dict[str, object]:
        """What a day's document is given on insert: its date, and for a local day its start
        (UTC), zone and length in minutes. Site and page are the shard key: equalities of the
        filter (an upsert inserts them); the date is set by its dotted path, so they never conflict."""
        day = date.fromordinal(ordinal)
        meta: dict[str, object] = {f"{f.metadata}.{f.date}": datetime(day.year, day.month, day.day)}
        if not cal.utc:
            meta[f"{f.metadata}.{f.start}"] = minute_dt(start).replace(tzinfo=None)
            meta[f"{f.metadata}.{f.zone}"] = cal.zone_of_day(ordinal)
            meta[f"{f.metadata}.{f.length}"] = -(-(cal.end(ordinal) - start) // 60)
        return meta

    def page_day(self, site: str, page: str, cal: Calendar, ordinal: int, start: int) -> DocUpdate:
        fd = self.fields.daily
        upd = self.page_days.get((site, page, ordinal))
        if upd is None:
            upd = self.page_days[site, page, ordinal] = DocUpdate(
                fd.collection,
                daily_id(date.fromordinal(ordinal), site, page),
                self.day_meta(fd, cal, ordinal, start),
                key={f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.page}": page},
                max=dict(self._stamp),
            )
        return upd

    def site_day(self, site: str, cal: Calendar, ordinal: int, start: int) -> DocUpdate:
        rd = self.fields.rollups.daily
        upd = self.site_days.get((site, ordinal))
        if upd is None:
            upd = self.site_days[site, ordinal] = DocUpdate(
                rd.collection,
                site_daily_id(date.fromordinal(ordinal), site),
                self.day_meta(rd, cal, ordinal, start),
                key={f"{rd.metadata}.{rd.site}": site},
                max=dict(self._stamp),
            )
        return upd

    def page_month(self, site: str, page: str, day: date) -> DocUpdate:
        fm = self.fields.monthly
        upd = self.page_months.get((site, page, day.year, day.month))
        if upd is None:
            upd = self.page_months[site, page, day.year, day.month] = DocUpdate(
                fm.collection,
                monthly_id(day, site, page),
                {f"{fm.metadata}.{fm.date}": datetime(day.year, day.month, 1)},
                key={f"{fm.metadata}.{fm.site}": site, f"{fm.metadata}.{fm.page}": page},
            )
        return upd

    def site_month(self, site: str, day: date) -> DocUpdate:
        rm = self.fields.rollups.monthly
        upd = self.site_months.get((site, day.year, day.month))
        if upd is None:
            upd = self.site_months[site, day.year, day.month] = DocUpdate(
                rm.collection,
                site_monthly_id(day, site),
                {f"{rm.metadata}.{rm.date}": datetime(day.year, day.month, 1)},
                key={f"{rm.metadata}.{rm.site}": site},
            )
        return upd

    def top(self, site: str, period: str, day: date) -> DocUpdate:
        """The site's top pages of a day (``period`` "d") or a month ("m", ``day`` its first)."""
        key = (site, period, day.toordinal())
        upd = self.tops.get(key)
        if upd is None:
            td, tm = self.fields.rollups.top_daily, self.fields.rollups.top_monthly
            f, doc_id = (td, site_daily_id(day, site)) if period == "d" else (tm, site_monthly_id(day, site))
            upd = self.tops[key] = DocUpdate(
                f.collection,
                doc_id,
                {f"{f.metadata}.{f.date}": datetime(day.year, day.month, day.day)},
                key={f"{f.metadata}.{f.site}": site},
            )
        return upd
