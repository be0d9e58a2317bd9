from collections import Counter
from datetime import UTC, datetime

from pipeline.core.ids import escape_part
from pipeline.core.times import minute_of
from pipeline.core.updates import split_wide
from pipeline.kinds.hits.aggregate import HitCounts, plan_hits
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.layout import daily_id, hits_fields, monthly_id

F = hits_fields("readable")


def m(y: int, mo: int, d: int, h: int, mi: int) -> int:
    return minute_of(datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp())


def test_one_upsert_per_document_with_combined_increments() -> None:
    counts = {
        ("s", "/a", m(2020, 1, 31, 23, 59)): 2,
        ("s", "/a", m(2020, 1, 31, 23, 58)): 1,
        ("s", "/a", m(2020, 2, 1, 0, 0)): 4,
        ("s", "/b", m(2020, 1, 31, 1, 0)): 1,
    }
    plan = plan_hits(counts, F)
    ids = Counter((u.collection, u.id) for u in plan)
    assert all(n == 1 for n in ids.values())
    by_id = {u.id: u for u in plan if not u.collection.startswith("hits_site")}
    jan31 = by_id["20200131/s//a"]
    assert jan31.inc == {"total": 3, "hourly.23": 3, "minute.23.59": 2, "minute.23.58": 1}
    # site and page are filter equalities (the shard key); the date is set on insert
    assert jan31.set_on_insert == {"metadata.date": datetime(2020, 1, 31)}
    assert jan31.key == {"metadata.site": "s", "metadata.page": "/a"}
    assert jan31.filter() == {"_id": "20200131/s//a", "metadata.site": "s", "metadata.page": "/a"}
    assert by_id["20200201/s//a"].inc == {"total": 4, "hourly.0": 4, "minute.0.0": 4}
    assert by_id["202001/s//a"].inc == {"total": 3, "daily.31": 3}
    assert by_id["202002/s//a"].inc == {"total": 4, "daily.1": 4}
    assert by_id["202002/s//a"].set_on_insert["metadata.date"] == datetime(2020, 2, 1)
    # daily: 31 Jan /a, 1 Feb /a, 31 Jan /b; monthly: Jan /a, Feb /a, Jan /b; the site's rollups
    assert sorted(u.id for u in plan) == sorted(
        [
            *["20200131/s//a", "20200201/s//a", "20200131/s//b", "202001/s//a", "202002/s//a", "202001/s//b"],
            *["20200131/s", "20200201/s", "202001/s", "202002/s"],  # the site's rollups
            *["20200131/s", "20200201/s", "202001/s", "202002/s"],  # and its top pages
        ]
    )
    site = {(u.collection, u.id): u for u in plan if u.collection.startswith("hits_site")}
    jan31_site = site["hits_site_daily", "20200131/s"]
    assert jan31_site.collection == "hits_site_daily"
    assert jan31_site.inc == {
        "total": 4,
        "hourly.23": 3,
        "hourly.1": 1,
        "minute.23.59": 2,
        "minute.23.58": 1,
        "minute.1.0": 1,
    }
    assert jan31_site.key == {"metadata.site": "s"}
    assert site["hits_site_pages_daily", "20200131/s"].inc == {"pages./a": 3, "pages./b": 1}
    assert site["hits_site_monthly", "202001/s"].inc == {"total": 4, "daily.31": 4}
    assert site["hits_site_pages_monthly", "202001/s"].inc == {"pages./a": 3, "pages./b": 1}


def test_ids_are_unambiguous_with_slashes_in_site() -> None:
    d = datetime(2020, 1, 2).date()
    assert daily_id(d, "a/b", "/c") != daily_id(d, "a", "/b/c")
    assert escape_part("x%2Fy/z") == "x%252Fy%2Fz"
    assert monthly_id(d, "s", "/p") == "202001/s//p"


def test_aggregator_counts_and_rejects() -> None:
    agg = HitCounts(HitDecoder(1000, 300, clock=lambda: 2e9), F)
    t = datetime(2020, 3, 1, 12, 30, 10, tzinfo=UTC).timestamp()
    for _ in range(3):
        assert agg.ingest(b'{"site":"s","page":"/","ts":%f}' % t) is None
    rej = agg.ingest(b"oops")
    assert rej is not None and rej.reason == "invalid_json"
    assert agg.counts == {("s", "/", minute_of(t)): 3}
    assert len(agg) == 1


def test_split_wide_keeps_all_increments_and_insert_fields_in_every_part() -> None:
    counts = {("s", "/", m(2020, 1, 1, h, mi)): 1 for h in range(3) for mi in range(60)}
    plan = plan_hits(counts, F)
    assert split_wide(plan, 0) is plan
    split = split_wide(plan, 64)
    daily = [u for u in split if u.collection == "hits_daily"]
    assert len(daily) > 1 and all(len(u.inc) <= 64 for u in daily)
    merged: Counter[str] = Counter()
    for u in daily:
        merged.update(u.inc)
    assert merged == Counter(next(u for u in plan if u.collection == "hits_daily").inc)
    # whichever part inserts the document (another writer's may come first), its metadata is whole
    first = next(u for u in plan if u.collection == "hits_daily").set_on_insert
    assert all(u.set_on_insert == first for u in daily)
