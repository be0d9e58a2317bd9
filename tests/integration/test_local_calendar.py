"""Sites in their own time zones, a zone change, retention on a running pipeline, late events."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest

from pipeline.core.calendar import iso
from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import hits_series
from pipeline.kinds.hits.render import series_rows
from pipeline.kinds.hits.sites.schedule import SCHEDULE_ID, claim
from pipeline.kinds.hits.sites.store import COLLECTION as SITES
from pipeline.ops.lag import wait_caught_up
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

from .helpers import cli, dead_letters, produce, run_cli, run_worker_to_end, with_db

pytestmark = pytest.mark.integration
F = hits_fields()
BERLIN, KOLKATA = ZoneInfo("Europe/Berlin"), ZoneInfo("Asia/Kolkata")


def line(site: str, ts: float, page: str = "/") -> tuple[bytes, bytes]:
    return orjson.dumps({"site": site, "page": page, "ts": ts}), hit_key(site, page)


def local_midnight(d: date, tz: ZoneInfo) -> float:
    """First instant whose local date is ``d`` (brute force, minute steps from a day before)."""
    t = datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp() - 15 * 3600
    while datetime.fromtimestamp(t, tz).date() < d:
        t += 60
    return t


def test_berlin_and_kolkata_across_dst_in_their_local_days(settings: Settings) -> None:
    assert "berlin.test: Europe/Berlin" in cli(settings, "sites", "set-zone", "berlin.test", "Europe/Berlin")
    cli(settings, "sites", "set-zone", "kolkata.test", "Asia/Kolkata")
    rng = random.Random(16)
    lines, times = [], {"berlin.test": [], "kolkata.test": []}  # type: ignore[var-annotated]
    # Berlin's autumn change (25 October 2026, 25 hours) and spring change (29 March 2026, 23 hours).
    for lo in (datetime(2026, 10, 23, tzinfo=UTC), datetime(2026, 3, 27, tzinfo=UTC)):
        for _ in range(3000):
            site = rng.choice(list(times))
            ts = lo.timestamp() + rng.uniform(0, 4 * 86400)
            if rng.random() < 0.2:  # near the changes and the local midnights
                ts = (
                    datetime(lo.year, lo.month, lo.day + 2, tzinfo=UTC).timestamp()
                    + rng.uniform(-3, 3) * 3600
                )
            times[site].append(ts)
            lines.append(line(site, ts))
    asyncio.run(produce(settings, lines, pack=50))
    run_worker_to_end(settings)
    assert "Europe/Berlin" in cli(settings, "sites")

    async def check(db: Any) -> dict[str, Any]:
        out = {}
        for site, tz in (("berlin.test", BERLIN), ("kolkata.test", KOLKATA)):
            days = Counter(datetime.fromtimestamp(t, tz).date() for t in times[site])
            # Local dates in, local days out, each labelled with its midnight's offset.
            got = await hits_series(db, site, None, datetime(2026, 3, 1), datetime(2026, 10, 31), "day", F)
            assert {t.date(): n for t, n in got if n} == dict(days)
            assert all(t.hour == 0 and t.minute == 0 and t.tzinfo is not None for t, _ in got)
            months = Counter((d.year, d.month) for d in days.elements())
            got = await hits_series(db, site, None, datetime(2026, 1, 1), datetime(2026, 12, 1), "month", F)
            assert {(t.year, t.month): n for t, n in got if n} == dict(months)
            for d in (date(2026, 10, 25), date(2026, 3, 29)):
                start, end = local_midnight(d, tz), local_midnight(d + timedelta(days=1), tz)
                want = Counter(int((t - start) // 3600) for t in times[site] if start <= t < end)
                got = await hits_series(
                    db,
                    site,
                    None,
                    datetime(d.year, d.month, d.day),
                    datetime(d.year, d.month, d.day, 23, 59),
                    "hour",
                    F,
                )
                assert len(got) == round((end - start) / 3600)  # 25 or 23 hours in Berlin, 24 in Kolkata
                assert {round((t.timestamp() - start) / 3600): n for t, n in got if n} == dict(want)
                out[f"{site} {d}"] = [r["t"] for r in series_rows(got)]
        return out

    labels = with_db(settings, check)
    autumn = labels["berlin.test 2026-10-25"]
    assert autumn[2:4] == ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00"]
    assert labels["berlin.test 2026-03-29"][2] == "2026-03-29T03:00:00+02:00"
    assert labels["kolkata.test 2026-10-25"][0] == "2026-10-25T00:00:00+05:30"

    # The HTTP API and the CLI answer the same local days, with offsets.
    server = ServeProcess(settings, name="serve-zones").start()
    try:
        import urllib.request

        url = (
            f"{server.url.rstrip('/')}/api/hits?site=berlin.test&from=2026-10-25&to=2026-10-25T23:59&by=hour"
        )
        with urllib.request.urlopen(url, timeout=30) as r:
            rows = orjson.loads(r.read())
    finally:
        server.terminate()
    assert [r["t"] for r in rows] == autumn
    out = orjson.loads(
        cli(
            settings,
            "query",
            "hits",
            "--site",
            "berlin.test",
            "--from",
            "2026-10-25",
            "--to",
            "2026-10-25T23:59",
            "--by",
            "hour",
            "--json",
        )
    )
    assert out == rows


def test_a_zone_change_from_a_date_on_leaves_earlier_days(settings: Settings) -> None:
    site, since = "move.test", date(2026, 2, 10)
    rng = random.Random(9)
    first = [datetime(2026, 2, 5, tzinfo=UTC).timestamp() + rng.uniform(0, 4 * 86400) for _ in range(800)]
    asyncio.run(produce(settings, [line(site, t) for t in first], pack=20))
    run_worker_to_end(settings)

    async def days(db: Any) -> dict[date, int]:
        got = await hits_series(db, site, None, datetime(2026, 2, 1), datetime(2026, 2, 28), "day", F)
        return {t.date(): n for t, n in got if n}

    before = with_db(settings, days)

    # The change, as `preagg sites set-zone move.test Europe/Berlin --from 2026-02-10` stores it
    # (made in time: here written directly, since its date is in the past).
    async def change(db: Any) -> None:
        await db[SITES].update_one(
            {"_id": site},
            {
                "$set": {
                    "zones": [
                        {"since": None, "zone": "UTC"},
                        {"since": datetime(2026, 2, 10), "zone": "Europe/Berlin"},
                    ]
                }
            },
            upsert=True,
        )

    with_db(settings, change)
    boundary = local_midnight(since, BERLIN)  # 2026-02-09T23:00Z
    second = [datetime(2026, 2, 8, tzinfo=UTC).timestamp() + rng.uniform(0, 5 * 86400) for _ in range(800)]
    asyncio.run(produce(settings, [line(site, t) for t in second], pack=20))
    run_worker_to_end(settings)

    def day_of(t: float) -> date:
        if t >= boundary:
            return datetime.fromtimestamp(t, BERLIN).date()
        return min(datetime.fromtimestamp(t, UTC).date(), since - timedelta(days=1))

    after = with_db(settings, days)
    assert after == dict(Counter(day_of(t) for t in first + second))
    for d, n in before.items():  # earlier days kept their UTC days; only late hits were added
        if d < since - timedelta(days=1):
            assert after[d] == n + sum(1 for t in second if day_of(t) == d)

    async def docs(db: Any) -> dict[str, Any]:
        return {d["_id"][:8]: d["m"] async for d in db[F.daily.collection].find({"m.s": site})}

    meta = with_db(settings, docs)
    assert meta["20260208"].get("z") in (None, "UTC") and meta["20260211"]["z"] == "Europe/Berlin"
    assert meta["20260209"].get("z") in (None, "UTC")  # the last UTC day ran to Berlin's midnight: 23 hours
    assert meta["20260210"]["b"] == datetime(2026, 2, 9, 23)


def test_retention_on_a_running_pipeline_with_late_events(settings: Settings) -> None:
    today = datetime.now(UTC).date()
    rng = random.Random(60)
    sites = ("keep.test", "short.test")
    truth: list[tuple[str, float]] = []
    for _ in range(6000):
        d = today - timedelta(days=rng.randrange(60))
        ts = datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp() + rng.uniform(0, 86399)
        truth.append((rng.choice(sites), min(ts, time.time() - 60)))
    cli(settings, "sites", "set-retention", "short.test", "--minutes", "7", "--hours", "45")
    asyncio.run(produce(settings, [line(s, t) for s, t in truth], pack=50))
    worker = WorkerProcess(settings, "retention-worker").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))

        async def sizes(db: Any) -> int:
            return sum([len(orjson.dumps(d, default=str)) async for d in db[F.daily.collection].find({})])

        bytes_before = with_db(settings, sizes)
        late = []
        for _ in range(400):  # late events keep arriving while the run prunes: old days and recent ones
            d = today - timedelta(days=rng.choice([2, 10, 35, 50, 59]))
            late.append(
                (
                    rng.choice(sites),
                    datetime(d.year, d.month, d.day, 12, tzinfo=UTC).timestamp() + rng.uniform(0, 3600),
                )
            )

        def send_late() -> None:
            for i in range(0, len(late), 40):
                asyncio.run(produce(settings, [line(s, t) for s, t in late[i : i + 40]], pack=10))
                time.sleep(2)

        sender = threading.Thread(target=send_late)
        sender.start()
        out = cli(settings, "retention", "run")
        sender.join()
        truth += late
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
    finally:
        assert worker.terminate() == 0, worker.log_path.read_text()[-3000:]
    assert "pruned minute counters older than 30 days" in out and "of short.test" in out
    dry = cli(settings, "retention", "run", "--dry-run")
    assert "would prune minute counters older than 30 days: 0 daily documents" in dry  # nothing recreated

    async def check(db: Any) -> None:
        for site, minute_days, hour_days in (("keep.test", 30, 400), ("short.test", 7, 45)):
            mine = [t for s, t in truth if s == site]
            days = Counter(datetime.fromtimestamp(t, UTC).date() for t in mine)
            got = await hits_series(
                db,
                site,
                None,
                datetime.combine(today - timedelta(days=61), datetime.min.time()),
                datetime.combine(today, datetime.min.time()),
                "day",
                F,
            )
            assert {t.date(): n for t, n in got if n} == dict(days)  # every hit, late ones included
            async for doc in db[F.daily.collection].find({"m.s": site}):
                d = doc["m"]["d"].date()
                age = (today - d).days
                assert (F.daily.minute in doc) == (age <= minute_days), (site, d)
                assert (F.daily.hourly in doc) == (age <= hour_days), (site, d)
                if F.daily.hourly in doc:
                    assert sum(doc[F.daily.hourly].values()) == days[d] == doc["t"]
                if F.daily.minute in doc:
                    assert sum(sum(m.values()) for m in doc[F.daily.minute].values()) == days[d]

    with_db(settings, check)
    bytes_after = with_db(settings, sizes)
    assert bytes_after < bytes_before * 0.8


async def day_total(db: Any, site: str) -> int:
    """A site's hits over the last 40 days, from its daily series."""
    got = await hits_series(
        db, site, None, datetime.now(UTC) - timedelta(days=40), datetime.now(UTC), "day", F
    )
    return sum(n for _, n in got)


def test_late_events_go_to_the_dead_letter_topic_and_replay_counts_them_once(settings: Settings) -> None:
    settings = settings.with_stream(HITS, lateness=2 * 86400)
    now = time.time()
    fresh = [line("late.test", now - 3600 * i) for i in range(1, 11)]
    old = [line("late.test", now - 86400 * d) for d in (3, 4, 5, 30)]
    asyncio.run(produce(settings, fresh + old, pack=1))
    run_worker_to_end(settings)
    letters = [d for d in dead_letters(settings) if d["reason"] == "late"]
    assert len(letters) == 4 and "lateness horizon" in letters[0]["detail"]
    status = cli(settings, "status", "--interval", "0")
    assert "late" in status

    def total(db: Any) -> Any:
        return day_total(db, "late.test")

    assert with_db(settings, total) == 10
    shown = cli(settings, "deadletters", "show", "--reason", "late")
    assert "would send 4 late events back to" in shown
    assert "sent 4 late events" in cli(
        settings, "deadletters", "replay", "--reason", "late", "--since", "now-1h"
    )
    assert "nothing to send" in cli(settings, "deadletters", "replay", "--reason", "late")  # once only
    run_worker_to_end(settings)
    assert with_db(settings, total) == 14
    assert len([d for d in dead_letters(settings) if d["reason"] == "late"]) == 4  # not refused again
    assert run_cli(settings, "deadletters", "replay").returncode == 2  # --reason is required
    assert iso(datetime(2026, 1, 1)) == "2026-01-01T00:00:00Z"


def test_a_replay_killed_after_sending_is_finished_by_the_next_without_sending_twice(
    settings: Settings,
) -> None:
    """The replay dies after its sends reached the topic, before recording its progress."""
    settings = settings.with_stream(HITS, lateness=2 * 86400)
    now = time.time()

    def total(db: Any) -> Any:
        return day_total(db, "cut.test")

    asyncio.run(produce(settings, [line("cut.test", now - 86400 * d) for d in (3, 4, 5)], pack=1))
    run_worker_to_end(settings)
    assert with_db(settings, total) == 0
    killed = run_cli(replace(settings, fault="replay-sent:1"), "deadletters", "replay", "--reason", "late")
    assert killed.returncode == 137, killed.stderr
    run_worker_to_end(settings)
    assert with_db(settings, total) == 3
    # Another late event meanwhile: the next replay sends it, and only it.
    asyncio.run(produce(settings, [line("cut.test", now - 86400 * 6)], pack=1))
    run_worker_to_end(settings)
    out = cli(settings, "deadletters", "replay", "--reason", "late")
    assert "3 late events had gone before the last replay was cut short" in out
    assert "sent 1 late events back to" in out
    run_worker_to_end(settings)
    assert with_db(settings, total) == 4
    assert "nothing to send" in cli(settings, "deadletters", "replay", "--reason", "late")


def test_copies_of_a_dead_letter_are_replayed_once_by_their_source_key(settings: Settings) -> None:
    """Dead letters are at least once (a worker that dies before its commit sends them again)."""
    settings = settings.with_stream(HITS, lateness=2 * 86400)
    now = time.time()

    def total(db: Any) -> Any:
        return day_total(db, "dup.test")

    asyncio.run(produce(settings, [line("dup.test", now - 86400 * d) for d in (3, 4)], pack=1))
    run_worker_to_end(settings)
    first = [d for d in dead_letters(settings) if d["reason"] == "late"]
    assert len(first) == 2
    copies = [(orjson.dumps({**d, "worker": "restarted"}), b"k") for d in first]
    asyncio.run(send_lines(settings, settings.deadletter_topic, copies, 1))
    out = cli(settings, "deadletters", "replay", "--reason", "late")
    assert "sent 2 late events back to" in out and "2 copies of dead letters already replayed" in out, out
    run_worker_to_end(settings)
    assert with_db(settings, total) == 2
    # A copy arriving after that replay: a later run finds its claim and sends nothing.
    asyncio.run(send_lines(settings, settings.deadletter_topic, copies[:1], 1))
    out = cli(settings, "deadletters", "replay", "--reason", "late")
    assert "1 copies of dead letters already replayed" in out and "nothing to send" in out, out
    run_worker_to_end(settings)
    assert with_db(settings, total) == 2


def test_workers_prune_by_themselves_and_one_claim_wins_each_interval(settings: Settings) -> None:
    """``PREAGG_HITS_RETENTION_EVERY``: a worker prunes on its own, one run per interval for the group.

    A backfill is spared: the 45-day-old day written moments ago keeps
    its minutes through the periodic runs; once its ``written`` stamp is as old as the
    tier, the next run prunes it, and the answers flag its buckets as pruned.
    """

    async def race(db: Any) -> list[bool]:
        await db["preagg_meta"].delete_one({"_id": SCHEDULE_ID})
        now = time.time()
        first = await asyncio.gather(*(claim(db, 60, now, w) for w in ("a", "b", "c")))
        again = await claim(db, 60, now + 30, "d")  # within the interval: no
        later = await asyncio.gather(*(claim(db, 60, now + 61, w) for w in ("e", "f")))
        await db["preagg_meta"].delete_one({"_id": SCHEDULE_ID})
        return [sum(first) == 1, not again, sum(later) == 1]

    assert with_db(settings, race) == [True, True, True]

    settings = settings.with_stream(HITS, retention_every=15 / 3600)  # every 15 s, first after 15 s
    today = datetime.now(UTC).date()
    noon = lambda d: datetime(d.year, d.month, d.day, 12, tzinfo=UTC).timestamp()  # noqa: E731
    old, recent = today - timedelta(days=45), today - timedelta(days=2)
    asyncio.run(
        produce(
            settings,
            [line("auto.test", noon(old) + i) for i in range(30)]
            + [line("auto.test", noon(recent) + i) for i in range(20)],
            pack=10,
        )
    )
    worker = WorkerProcess(settings, "pruning-worker").start()

    async def last_run(db: Any) -> Any:
        return (await db["preagg_meta"].find_one({"_id": SCHEDULE_ID}) or {}).get("last") or {}

    async def docs(db: Any) -> dict[date, Any]:
        return {d["m"]["d"].date(): d async for d in db[F.daily.collection].find({"m.s": "auto.test"})}

    async def backdate(db: Any) -> None:  # as if the old day had been written 40 days ago
        long_ago = datetime.combine(today - timedelta(days=40), datetime.min.time())
        for coll in (F.daily.collection, F.rollups.daily.collection):
            await db[coll].update_many(
                {"m.s": "auto.test", "m.d": {"$lt": long_ago}}, {"$set": {"w": long_ago}}
            )

    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
        deadline = time.monotonic() + 150
        while not with_db(settings, last_run) and time.monotonic() < deadline:
            time.sleep(2)
        spared = with_db(settings, last_run)
        assert spared and spared["by"], spared
        got = with_db(settings, docs)
        assert F.daily.minute in got[old], "a backfill written minutes ago was pruned"
        with_db(settings, backdate)
        deadline = time.monotonic() + 150
        while F.daily.minute in with_db(settings, docs)[old] and time.monotonic() < deadline:
            time.sleep(2)
        run = with_db(settings, last_run)
    finally:
        assert worker.terminate() == 0, worker.log_path.read_text()[-3000:]
    assert "minute counters older than 30 days" in run["pruned"], run
    assert (
        "periodic retention: minute counters older than 30 days: 1 documents" in worker.log_path.read_text()
    )

    got = with_db(settings, docs)
    assert (
        F.daily.minute not in got[old]
        and got[old]["t"] == 30
        and sum(got[old][F.daily.hourly].values()) == 30
    )
    assert sum(sum(m.values()) for m in got[recent][F.daily.minute].values()) == 20
    assert "workers' periodic retention: every 0.00416667 h; last run" in cli(
        settings, "retention", "run", "--dry-run"
    )
    # a pruned bucket is not a zero: the CLI says so, JSON (and /api/hits) flag it
    day = ["query", "hits", "--site", "auto.test", "--from", old.isoformat(), "--to", f"{old}T23:59"]
    table = cli(settings, *day, "--by", "minute")
    assert f"past the site's retention (minute counters pruned on {old})" in table, table
    rows = orjson.loads(cli(settings, *day, "--by", "minute", "--json"))
    assert len(rows) == 1440 and all(r.get("pruned") for r in rows)
    hours = orjson.loads(cli(settings, *day, "--by", "hour", "--json"))
    assert sum(r["hits"] for r in hours) == 30 and not any(r.get("pruned") for r in hours)
    recent_day = ["--from", recent.isoformat(), "--to", f"{recent}T23:59", "--by", "minute", "--json"]
    assert not any(r.get("pruned") for r in orjson.loads(cli(settings, *day[:4], *recent_day)))
