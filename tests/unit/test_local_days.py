"""Hits planned into local days, retention at plan time, zone-change rules, late events (pure)."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import orjson
import pytest

from pipeline.core.calendar import Calendar, ZoneChange, dt_minute, minute_dt
from pipeline.core.rejection import Rejection
from pipeline.core.replay import wrap
from pipeline.kinds.hits.aggregate import HitCounts, plan_hits
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import _buckets
from pipeline.kinds.hits.sites.store import SiteConfig, SiteConfigError, plan_zone_change
from pipeline.kinds.hits.sites.tiers import NOTHING_PRUNED, Pruned, Retention, Tiers, cutoffs, prunes

F = hits_fields("readable")
NOW = datetime(2026, 11, 23, 12, tzinfo=UTC).timestamp()


class Zones:
    """Sites' calendars and retention as a worker's cache would hold them."""

    def __init__(self, zones: dict[str, str], pruned: Pruned = NOTHING_PRUNED) -> None:
        self.cals = {s: Calendar([ZoneChange(None, z)]) for s, z in zones.items()}
        self.pruned = pruned

    def calendar(self, site: str) -> Calendar:
        return self.cals[site]

    def retention(self) -> Pruned:
        return self.pruned


def hit(site: str, ts: float, props: dict[str, str] | None = None) -> bytes:
    ev: dict[str, object] = {"site": site, "page": "/", "ts": ts}
    if props:
        ev["props"] = props
    return orjson.dumps(ev)


def test_a_stream_across_dst_lands_in_local_days_hours_and_months() -> None:
    zones = Zones({"berlin": "Europe/Berlin", "kolkata": "Asia/Kolkata", "utc": "UTC"})
    agg = HitCounts(HitDecoder(10_000, 1e12), F, None, zones)
    rng = random.Random(7)
    lo = datetime(2026, 10, 24, tzinfo=UTC).timestamp()
    want: dict[str, Counter[tuple[str, int]]] = {s: Counter() for s in zones.cals}
    for _ in range(5000):
        site = rng.choice(list(zones.cals))
        ts = lo + rng.uniform(0, 3 * 86400)
        assert agg.ingest(hit(site, ts)) is None
        local = datetime.fromtimestamp(ts, UTC).astimezone(ZoneInfo(zones.cals[site].zone))
        midnight = datetime(local.year, local.month, local.day, tzinfo=ZoneInfo(zones.cals[site].zone))
        want[site][local.date().isoformat(), int((ts - midnight.timestamp()) // 3600)] += 1
    docs = {u.id: u for u in agg.plan()}
    got: dict[str, Counter[tuple[str, int]]] = {s: Counter() for s in zones.cals}
    for u in docs.values():
        if u.collection != F.daily.collection:
            continue
        day, site = str(u.id).split("/")[:2]
        for k, n in u.inc.items():
            if k.startswith("hourly."):
                got[site][f"{day[:4]}-{day[4:6]}-{day[6:]}", int(k.split(".")[1])] += n
    assert got == want
    # Berlin's 25-hour day has hour 24; its document says when it starts and in which zone.
    berlin = docs["20261025/berlin//"]
    assert "hourly.24" in berlin.inc
    assert berlin.set_on_insert["metadata.start"] == datetime(2026, 10, 24, 22)
    assert berlin.set_on_insert["metadata.zone"] == "Europe/Berlin"
    assert "metadata.start" not in docs["20261025/utc//"].set_on_insert  # UTC days stay as they were
    # Kolkata's day starts at 18:30 UTC the day before.
    assert docs["20261025/kolkata//"].set_on_insert["metadata.start"] == datetime(2026, 10, 24, 18, 30)
    monthly = sum(v for u in docs.values() if u.collection == F.monthly.collection for v in [u.inc["total"]])
    assert monthly == 5000


def test_properties_follow_their_hit_into_the_local_day() -> None:
    class Keys:
        def keys(self, site: str, name: str, value: str) -> tuple[str, str]:
            return name, value

    zones = Zones({"berlin": "Europe/Berlin"})
    agg = HitCounts(HitDecoder(10_000, 1e12), F, Keys(), zones)
    # 23:30 UTC on the 24th is 01:30 on the 25th in Berlin.
    agg.ingest(hit("berlin", datetime(2026, 10, 24, 23, 30, tzinfo=UTC).timestamp(), {"ab": "x"}))
    agg.ingest(hit("berlin", datetime(2026, 10, 24, 21, 30, tzinfo=UTC).timestamp(), {"ab": "y"}))
    docs = {u.id: u for u in agg.plan()}
    assert docs["20261025/berlin//"].inc["props.ab.x"] == 1
    assert docs["20261024/berlin//"].inc["props.ab.y"] == 1


def test_a_day_past_its_tier_gets_no_minute_or_hour_counter() -> None:
    today = date(2026, 11, 23)
    everything = {"a": "UTC", "b": "UTC"}
    counts = {("a", "/", dt_minute(datetime(2016, 1, 1, tzinfo=UTC))): 1}
    docs = {u.id: u.inc for u in plan_hits(counts, F, calendars=Zones(everything))}
    assert "minute.0.0" in docs["20160101/a//"]  # before a first run nothing is dropped (backfills)
    zones = Zones(everything, cutoffs(Retention(Tiers(30, 400), {"b": Tiers(7, 30)}), today))
    counts = {
        ("a", "/", dt_minute(datetime(2026, 10, 20, 5, tzinfo=UTC))): 1,  # 34 days ago: no minute
        ("a", "/", dt_minute(datetime(2026, 10, 25, 5, tzinfo=UTC))): 1,  # 29 days: kept
        ("a", "/", dt_minute(datetime(2026, 10, 24, 5, tzinfo=UTC))): 1,  # 30 days: the margin day, no minute
        ("b", "/", dt_minute(datetime(2026, 11, 10, 5, tzinfo=UTC))): 1,  # b keeps minutes 7 days
        ("b", "/", dt_minute(datetime(2026, 10, 1, 5, tzinfo=UTC))): 1,  # and hours 30
    }
    docs = {u.id: u.inc for u in plan_hits(counts, F, calendars=zones)}
    assert "minute.5.0" not in docs["20261020/a//"] and docs["20261020/a//"]["hourly.5"] == 1
    assert docs["20261025/a//"]["minute.5.0"] == 1
    assert "minute.5.0" not in docs["20261024/a//"]
    assert "minute.5.0" not in docs["20261110/b//"] and "hourly.5" in docs["20261110/b//"]
    assert set(docs["20261001/b//"]) == {"total"}
    assert docs["202610/b//"]["daily.1"] == 1  # the month still counts it


def test_cutoffs_round_trip_through_their_stored_form() -> None:
    p = cutoffs(Retention(Tiers(30, 0), {"b.example": Tiers(7, 30)}), date(2026, 11, 23))
    assert p.minute == {"*": date(2026, 10, 24).toordinal(), "b.example": date(2026, 11, 16).toordinal()}
    assert p.hour == {"b.example": date(2026, 10, 24).toordinal()}
    assert Pruned.of_doc(p.as_doc()) == p
    assert p.keeps("other", date(2026, 10, 25).toordinal()) == (True, True)
    assert p.keeps("other", date(2026, 10, 24).toordinal()) == (False, True)
    assert p.keeps("b.example", date(2026, 10, 24).toordinal()) == (False, False)
    # An override of 0 keeps that tier forever: no fallback to the deployment's cutoff.
    f = cutoffs(Retention(Tiers(30, 400), {"c": Tiers(0, 0)}), date(2026, 11, 23))
    assert f.keeps("c", date(2020, 1, 1).toordinal()) == (True, True)
    assert f.keeps("d", date(2020, 1, 1).toordinal()) == (False, False)
    assert Pruned.of_doc(f.as_doc()) == f


def test_a_retention_run_is_a_few_statements() -> None:
    ret = Retention(Tiers(30, 400), {"b": Tiers(7, 30), "c": Tiers(7, 0)})
    ps = prunes(F.daily, ret, date(2026, 11, 23))
    assert [p.what for p in ps] == [
        "minute counters older than 30 days",
        "minute counters older than 7 days of b, c",
        "hourly counters older than 400 days",
        "hourly counters older than 30 days of b",
        "hourly visitor counters older than 400 days",
        "hourly visitor counters older than 30 days of b",
    ]
    assert ps[0].filter == {
        "metadata.date": {"$lt": datetime(2026, 10, 24)},
        "metadata.site": {"$nin": ["b", "c"]},
        "minute": {"$exists": True},
    }
    assert prunes(F.daily, Retention(Tiers(0, 0), {}), date(2026, 11, 23)) == []


def test_hour_buckets_of_dst_days() -> None:
    cal = Calendar([ZoneChange(None, "Europe/Berlin")])
    d = date(2026, 10, 25).toordinal()
    hours = _buckets("hour", cal.start(d), cal.end(d) - 1, d, d, cal)
    assert len(hours) == 25
    labels = [cal.at(b).isoformat() for b in hours[1:5]]
    assert labels == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    spring = date(2026, 3, 29).toordinal()
    assert len(_buckets("hour", cal.start(spring), cal.end(spring) - 1, spring, spring, cal)) == 23


def test_zone_change_rules() -> None:
    site = SiteConfig("shop")
    assert plan_zone_change(site, "Europe/Berlin", None, False, NOW, 300) == (
        ZoneChange(None, "Europe/Berlin"),
    )
    with pytest.raises(SiteConfigError, match="already has hits"):
        plan_zone_change(site, "Europe/Berlin", None, True, NOW, 300)
    with pytest.raises(SiteConfigError, match="notice"):  # the 24th began in Auckland an hour ago
        plan_zone_change(site, "Pacific/Auckland", date(2026, 11, 24), True, NOW, 300)
    with pytest.raises(SiteConfigError, match="notice"):  # Norfolk's 24th begins now: no notice
        plan_zone_change(site, "Pacific/Norfolk", date(2026, 11, 24), True, NOW, 300)
    assert plan_zone_change(site, "Asia/Tokyo", date(2026, 11, 24), True, NOW, 300)  # 3 h ahead
    with pytest.raises(SiteConfigError, match="IANA"):
        plan_zone_change(site, "Europe/Bërlin", date(2026, 12, 1), True, NOW, 300)
    changes = plan_zone_change(site, "Europe/Berlin", date(2026, 12, 1), True, NOW, 300)
    assert changes == (ZoneChange(None, "UTC"), ZoneChange(date(2026, 12, 1), "Europe/Berlin"))


def test_late_events_are_refused_unless_replayed_as_late() -> None:
    dec = HitDecoder(10_000, 300, clock=lambda: NOW)
    dec.lateness = 86400
    old = hit("s", NOW - 2 * 86400)
    got = dec.decode(old)
    assert isinstance(got, Rejection) and got.reason == "late" and "replay" in got.detail
    assert dec.decode(hit("s", NOW - 3600))[0] == "s"  # type: ignore[index]
    record = orjson.loads(orjson.dumps({"reason": "late", "raw": old.decode()}))
    assert dec.decode(wrap("late", record)) == ("s", "/", NOW - 2 * 86400, ())
    # Replayed for another reason, the horizon still holds; a broken wrapper is a rejection.
    again = dec.decode(wrap("schema", record))
    assert isinstance(again, Rejection) and again.reason == "late"
    broken = dec.decode(b'{"preagg_replay": "late"}')
    assert isinstance(broken, Rejection) and broken.reason == "schema"
    dec.lateness = 0
    assert not isinstance(dec.decode(old), Rejection)  # off by default: backfills count


def test_minute_labels_keep_their_offsets() -> None:
    cal = Calendar([ZoneChange(None, "Australia/Lord_Howe")])
    # 2026-04-05 02:00 +11:00 → 01:30 +10:30: the half hour after 15:00 UTC repeats.
    m = dt_minute(datetime(2026, 4, 4, 14, 45, tzinfo=UTC))
    labels = [cal.at(m + i).isoformat() for i in (0, 15, 30)]
    assert labels == ["2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30"]
    assert (minute_dt(m) + timedelta(minutes=15)).timestamp() == cal.at(m + 15).timestamp()


def test_relative_days_and_wall_clock_ranges_follow_the_site() -> None:
    from pipeline.core.params import local_day, parse_day
    from pipeline.kinds.hits.grafana import choose_by

    now = datetime(2026, 11, 23, 23, 30, tzinfo=UTC)  # already the 24th in Berlin
    asked = parse_day("today-1d", now)
    assert asked == date(2026, 11, 22)  # the UTC reading, for kinds without a calendar
    assert local_day(asked, date(2026, 11, 24)) == date(2026, 11, 23)
    assert local_day(parse_day("2026-01-05", now), date(2026, 11, 24)) == date(2026, 1, 5)
    # A naive (wall-clock) start with an aware end: no TypeError, a resolution as usual.
    assert choose_by(datetime(2026, 10, 25), datetime(2026, 10, 26, tzinfo=UTC), 60_000, 2000) == "minute"
