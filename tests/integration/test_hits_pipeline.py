"""Hits end to end with exact truth: Kafka → worker process → MongoDB → query API."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from pipeline.core.series import floor
from pipeline.core.times import minute_of
from pipeline.kafka.admin import missing_topics
from pipeline.kafka.options import KafkaConnection
from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.pages import PageRules
from pipeline.kinds.hits.query import hits_series
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.settings import Settings
from pipeline.testing.traffic import generate

from .helpers import dead_letters, produce, run_worker_to_end, schema_violations, with_db

pytestmark = pytest.mark.integration


def iso(y: int, mo: int, d: int, h: int, mi: int, s: int = 0) -> str:
    return datetime(y, mo, d, h, mi, s, tzinfo=UTC).isoformat()


# (site, page, ts) in SEND order: later times first (out of order), across midnight and a month end
CRAFTED = [
    ("shop", "/cart", iso(2020, 2, 1, 0, 0, 10)),
    ("shop", "/cart", iso(2020, 2, 1, 0, 0, 50)),
    ("shop", "/cart", iso(2020, 1, 31, 23, 59, 30)),  # late: before midnight, sent after
    ("shop", "/cart", "2020-02-01T05:30:05+05:30"),  # = 2020-02-01T00:00:05Z
    ("shop", "/cart", datetime(2020, 1, 31, 23, 59, 59, tzinfo=UTC).timestamp()),
    ("shop", "/ünïcödé/页面", iso(2020, 1, 31, 12, 0)),
    ("shop", "/a b?x=1&y=%20", iso(2020, 1, 31, 12, 0)),
    ("shop", "//double//slash", iso(2020, 1, 31, 12, 1)),
    ("odd/site", "/p", iso(2020, 1, 31, 12, 2)),
    ("odd", "site/p", iso(2020, 1, 31, 12, 2)),
]
BAD = {
    "invalid_json": [b'{"site": "shop", "page": "/x", "ts": '],
    "schema": [b'{"site": "shop", "ts": 1}', b'{"site": 1, "page": "/", "ts": 1}', b'"just a string"'],
    "bad_time": [
        b'{"site": "shop", "page": "/", "ts": "2020-01-31T23:59:30"}',
        b'{"site": "shop", "page": "/", "ts": "someday at noon"}',
    ],
    "future": [orjson.dumps({"site": "shop", "page": "/", "ts": 4_000_000_000})],
    "oversize": [orjson.dumps({"site": "shop", "page": "/" + "x" * 20_000, "ts": 1})],
}
NOT_UTF8 = b'{"site": "shop", "page": "/\xff\xfe", "ts": 1}'


@pytest.mark.parametrize("schema", ["compact", "readable"])
def test_exact_counts_by_minute_hour_day_month_and_dead_letters(settings: Settings, schema: str) -> None:
    settings = settings.with_(schema=schema)
    fields = hits_fields(schema)
    truth: Counter[tuple[str, str, int]] = Counter()
    lines: list[tuple[bytes, bytes]] = []
    for site, page, ts in CRAFTED:
        lines.append((orjson.dumps({"site": site, "page": page, "ts": ts}), hit_key(site, page)))
        t = ts if isinstance(ts, float) else datetime.fromisoformat(ts).timestamp()
        truth[(site, PageRules()(page), minute_of(t))] += 1  # counted as normalised: queries dropped
    traffic = generate(4000, end=datetime(2020, 3, 2, 6, tzinfo=UTC).timestamp(), days=3, seed=11)
    lines.extend(traffic.lines)  # includes late events and bad lines of its own
    truth.update(traffic.per_minute)
    bad_lines = [(b, b"bad") for bs in BAD.values() for b in bs] + [(NOT_UTF8, b"bad")]
    expected_dead = Counter({k: len(v) for k, v in BAD.items()}) + traffic.bad
    expected_dead["invalid_json"] += 1  # NOT_UTF8 is not valid JSON text

    # packed messages and single-event messages both go through
    asyncio.run(produce(settings, lines[: len(lines) // 2] + bad_lines, pack=50))
    asyncio.run(produce(settings, lines[len(lines) // 2 :], pack=1))
    run_worker_to_end(settings)

    async def check(db):  # type: ignore[no-untyped-def]
        pages = {(s, p) for s, p, _ in truth}
        for site, page in sorted(pages):
            mins = {m: n for (s, p, m), n in truth.items() if (s, p) == (site, page)}
            lo = datetime.fromtimestamp(min(mins) * 60, UTC)
            hi = datetime.fromtimestamp(max(mins) * 60, UTC)
            for by in ("minute", "hour", "day", "month"):
                crafted = site in ("shop", "odd", "odd/site")
                if by == "minute" and (hi - lo) > timedelta(days=1) and not crafted:
                    continue  # long minute series are checked for the crafted pages only
                want: Counter[datetime] = Counter()
                for m, n in mins.items():
                    want[floor(datetime.fromtimestamp(m * 60, UTC), by)] += n  # type: ignore[arg-type]
                got = await hits_series(db, site, page, lo, hi, by, fields)  # type: ignore[arg-type]
                assert {t: n for t, n in got if n} == dict(want), (site, page, by)
                assert len(got) >= len(want)  # zero-filled
        # site-wide series sums all pages of the site
        site_total = sum(n for (s, _, _), n in truth.items() if s == "shop")
        got = await hits_series(
            db, "shop", None, datetime(2020, 1, 1), datetime(2020, 3, 31), "month", fields
        )
        assert sum(n for _, n in got) == site_total
        return ledger_totals(await read_ledger(db, settings.group_id)).rejected

    counted_dead = with_db(settings, check)
    assert counted_dead == dict(expected_dead)
    assert not schema_violations(settings)  # what the workers wrote is what schemas/ declares
    letters = dead_letters(settings)
    assert Counter(d["reason"] for d in letters) == expected_dead
    assert all(d["topic"] == settings.topic("hits") and "detail" in d for d in letters)
    assert any(d.get("raw_b64") for d in letters)  # the non-UTF-8 line kept byte for byte
    import base64

    assert NOT_UTF8 in {base64.b64decode(d["raw_b64"]) for d in letters if "raw_b64" in d}


def test_indexes_exist_and_no_faust_leader_topic(settings: Settings) -> None:
    asyncio.run(produce(settings, [(b'{"site":"s","page":"/","ts":1}', b"k")], pack=1))
    run_worker_to_end(settings)
    # Faust's leader topic (replication factor 1, created at every start) is not used here:
    # clusters that restrict replication factors or deny CREATE refused it.
    leader = f"{settings.group_id}-__assignor-__leader"
    assert asyncio.run(missing_topics(KafkaConnection.of(settings), [leader])) == [leader]

    async def idx(db):  # type: ignore[no-untyped-def]
        return {c: await db[c].index_information() for c in ("hits_daily", "hits_monthly")}

    info = with_db(settings, idx)
    for c in info.values():
        keys = [("m.s", 1), ("m.p", 1), ("m.d", 1)]  # compact names, the default
        assert c["site_page_date"]["key"] == keys
        assert c["site_date"]["key"] == [("m.s", 1), ("m.d", 1)]  # a site's charts, all pages
