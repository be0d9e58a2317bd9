"""Custom properties end to end in both schema modes: Kafka → worker → name store, daily documents → query."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from datetime import UTC, date, datetime
from typing import Any

import orjson
import pytest

from pipeline.kafka.admin import partition_for
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import hits_series
from pipeline.kinds.hits.query_props import OTHER_LABEL, prop_counts
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.store.names.layout import OTHER
from pipeline.store.names.store import names_fields
from pipeline.worker.process import WorkerProcess

from .helpers import dead_letters, produce, run_worker_to_end, with_db
from .test_cli import preagg

pytestmark = pytest.mark.integration

DAYS = [datetime(2020, 1, 31, 23, 0, tzinfo=UTC), datetime(2020, 2, 1, 0, 30, tzinfo=UTC)]


def hits(pairs: list[tuple[str, dict[str, Any]]], times: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(times):
        for page, props in pairs:
            ts = DAYS[i % 2].timestamp() + i
            out.append(
                (
                    orjson.dumps({"site": "sh.op", "page": page, "ts": ts, "props": props}),
                    hit_key("sh.op", page),
                )
            )
    return out


# Phase 1 registers every admitted name and value (limits: 3 names, 2 values per name).
PHASE1 = [
    ("/a", {"country": "DE", "device": "mobile"}),
    ("/a", {"country": "FR", "plan.v": "$free"}),
    ("/b", {"country": "DE", "device": 1}),
]
# Phase 2: a third country (past the values limit) and unbounded names (past the names limit).
PHASE2 = [
    ("/a", {"country": "IT"}),
    ("/b", {"user-1": "x", "country": "DE"}),
    ("/b", {"user-2": "x"}),
]


def expected(times1: int, times2: int) -> Counter[tuple[str, str]]:
    want: Counter[tuple[str, str]] = Counter()
    for pairs, times in ((PHASE1, times1), (PHASE2, times2)):
        for _, props in pairs:
            for name, value in props.items():
                text = json.dumps(value) if not isinstance(value, str) else value
                if name.startswith("user-"):
                    want[(OTHER_LABEL, OTHER_LABEL)] += times
                elif (name, text) == ("country", "IT"):
                    want[("country", OTHER_LABEL)] += times
                else:
                    want[(name, text)] += times
    return want


@pytest.mark.parametrize("schema", ["compact", "readable"])
def test_props_counted_per_day_under_tokens_with_limits(settings: Settings, schema: str) -> None:
    settings = settings.with_(schema=schema)
    settings = settings.with_stream(
        HITS, props_max_names=3, props_max_values=2, props_max_bytes=20, name_store_doc_cap=2
    )
    asyncio.run(produce(settings, hits(PHASE1, 10), pack=7))
    run_worker_to_end(settings)
    oversize = orjson.dumps(
        {"site": "sh.op", "page": "/a", "ts": DAYS[0].timestamp(), "props": {"k": "v" * 21}}
    )
    asyncio.run(produce(settings, [*hits(PHASE2, 6), (oversize, b"x")], pack=5))
    run_worker_to_end(settings, "worker-2")
    fields = hits_fields(schema)

    async def check(db: Any) -> dict[str, Any]:
        rows = await prop_counts(db, "sh.op", None, date(2020, 1, 31), date(2020, 2, 1), fields=fields)
        one_day = await prop_counts(
            db, "sh.op", "/b", date(2020, 1, 31), date(2020, 1, 31), "country", fields
        )
        series = await hits_series(db, "sh.op", None, DAYS[0], DAYS[1], "day", fields)
        names = names_fields(schema)
        stored = [d async for d in db[names["collection"]].find()]
        sample = await db[fields.daily.collection].find_one({})
        rejected = ledger_totals(await read_ledger(db, settings.group_id)).rejected
        return {
            "rows": rows,
            "one_day": one_day,
            "hits": sum(n for _, n in series),
            "stored": stored,
            "sample": sample,
            "rejected": rejected,
        }

    got = with_db(settings, check)
    assert Counter({(r.name, r.value): r.count for r in got["rows"]}) == expected(10, 6)
    # /b on 31 Jan: phase 1 sends /b's country=DE at even i (5 of 10), phase 2 at even i (3 of 6)
    assert [(r.name, r.value, r.count) for r in got["one_day"]] == [("country", "DE", 8)]
    assert got["hits"] == 10 * len(PHASE1) + 6 * len(PHASE2)
    assert got["rejected"] == {"props": 1}
    assert [d["reason"] for d in dead_letters(settings)] == ["props"]
    nf = names_fields(schema)
    for d in got["stored"]:
        assert len(d[nf["list"]]) <= d[nf["cap"]] <= 2
    by_ns: dict[str, list[str]] = {}
    for d in sorted(got["stored"], key=lambda d: d[nf["least_value"]]):
        by_ns.setdefault(d[nf["namespace"]], []).extend(d[nf["list"]])
    assert sorted(by_ns["n/sh.op"]) == ["country", "device", "plan.v"]
    assert sorted(by_ns["v/sh.op/country"]) == ["DE", "FR"]
    props_field = fields.daily.props
    keys = set(got["sample"][props_field])
    if schema == "compact":
        assert got["sample"].keys() >= {"m", "t", "h", "n", "x"} and keys <= {"0", "1", "2", OTHER}
    else:
        assert got["sample"].keys() >= {"metadata", "total", "hourly", "minute", "props"}
        assert keys <= {"country", "device", "plan%2Ev", "%other"}


def test_query_props_cli_and_schema_guard(settings: Settings) -> None:
    asyncio.run(produce(settings, hits(PHASE1, 2), pack=3))
    run_worker_to_end(settings)
    out = preagg(
        settings,
        "query",
        "props",
        "--site",
        "sh.op",
        "--from",
        "2020-01-31",
        "--to",
        "2020-02-01",
        "--name",
        "device",
        "--json",
    )
    assert json.loads(out) == [
        {"name": "device", "value": "1", "count": 2},
        {"name": "device", "value": "mobile", "count": 2},
    ]
    table = preagg(settings, "query", "props", "--site", "sh.op", "--page", "/a", "--from", "2020-01-31")
    assert "country" in table and "$free" in table
    schema = json.loads(preagg(settings, "schema", "--json"))
    assert (
        schema["mode"] == "compact"
        and {"collection": "hits_daily", "readable": "props"}.items()
        <= next(r for r in schema["fields"] if r["readable"] == "props").items()
    )
    # a worker in the other mode refuses this database instead of mixing names
    w = WorkerProcess(settings.with_(schema="readable"), "wrong-mode").start()
    assert w.proc is not None
    rc = w.proc.wait(timeout=60)
    w.terminate()
    assert rc != 0 and "one database, one schema mode" in w.log_path.read_text()


def _assigned(port: int) -> list[str]:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
    except OSError:
        return []
    assigned: list[str] = json.loads(body).get("assigned", [])
    return assigned


def test_three_worker_processes_meet_the_same_1000_new_names_at_once(settings: Settings) -> None:
    """Real workers, one per partition, each flushing the same 1,000 unseen names in its first batch."""
    settings = settings.with_stream(
        HITS, props_max_per_event=32, props_max_names=1000, name_store_doc_cap=100
    )
    names = [f"attr-{i:04d}" for i in range(1000)]
    ports = [free_port() for _ in range(3)]
    workers = [WorkerProcess(settings.with_(web_port=p), f"w{i}").start() for i, p in enumerate(ports)]
    try:
        deadline = time.monotonic() + 120
        last: list[list[str]] = []
        while True:  # every worker holds hits partitions, the same as a poll ago: the group is settled
            held = [sorted(a for a in _assigned(p) if a.startswith(settings.topic("hits"))) for p in ports]
            if all(held) and held == last:
                break
            assert time.monotonic() < deadline, held
            last = held
            time.sleep(2.0)
        partitions = sum(map(len, held))
        assert partitions == settings.partitions  # the worker created its topics, not the broker's default
        # pages chosen so that every partition gets every name
        pages, seen = [], set()
        i = 0
        while len(seen) < partitions:
            page = f"/p{i}"
            part = partition_for(hit_key("sh.op", page), partitions)
            if part not in seen:
                seen.add(part)
                pages.append(page)
            i += 1
        lines = []
        for page in pages:
            for j in range(0, 1000, 32):
                props = {n: "v" for n in names[j : j + 32]}
                ts = DAYS[0].timestamp()
                lines.append(
                    (
                        orjson.dumps({"site": "sh.op", "page": page, "ts": ts, "props": props}),
                        hit_key("sh.op", page),
                    )
                )
        asyncio.run(produce(settings, lines, pack=100))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=300))
    finally:
        codes = [w.terminate() for w in workers]
    assert codes == [0, 0, 0]

    async def check(db: Any) -> tuple[list[Any], list[dict[str, Any]]]:
        rows = await prop_counts(db, "sh.op", None, date(2020, 1, 31), date(2020, 1, 31))
        stored = [d async for d in db["preagg_names"].find({"ns": "n/sh.op"})]
        return rows, stored

    rows, stored = with_db(settings, check)
    # a token given twice, or read differently by two workers, would misattribute counts here
    assert {(r.name, r.value): r.count for r in rows} == {(n, "v"): len(pages) for n in names}
    listed = [n for d in sorted(stored, key=lambda d: d["lv"]) for n in d["l"]]
    assert sorted(listed) == names and all(len(d["l"]) <= d["c"] == 100 for d in stored)
