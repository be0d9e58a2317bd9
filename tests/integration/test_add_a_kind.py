"""The "add a stream kind" walkthrough of docs/design.md, followed by a test.

``tests/kinds/purchases/`` is a whole kind (settings, event schema, field names,
decoder, aggregator, index, query subcommand) that nothing in ``pipeline/`` knows.
Registered through ``PREAGG_KINDS`` only, it is produced, aggregated exactly once and
queried through the real CLI and a real worker on the embedded services.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.command import on_db
from pipeline.worker.process import WorkerProcess
from tests.kinds.purchases import KIND as PURCHASES

from .helpers import cli

pytestmark = pytest.mark.integration

DAY = 1_700_000_000  # 2023-11-14 22:13 UTC


def test_a_kind_defined_outside_the_package_runs_end_to_end(settings: Settings, tmp_path: Path) -> None:
    settings = settings.with_(kinds=("hits", "tests.kinds.purchases:KIND"))
    settings = settings.with_stream(PURCHASES, topic=f"purchases-{settings.group_id}")
    truth: Counter[tuple[str, str]] = Counter()
    lines = []
    for i in range(300):
        site, ts = ("a.example", "b.example")[i % 2], DAY + (i % 3) * 40_000
        lines.append(orjson.dumps({"site": site, "cents": 100 + i, "ts": ts}))
        truth[(site, "20231114" if ts < 1_700_006_400 else "20231115")] += 100 + i
    lines.append(b'{"site": "a.example", "cents": -5, "ts": 1700000000}')  # refused by its schema
    events = tmp_path / "purchases.jsonl"
    events.write_bytes(b"\n".join(lines) + b"\n")

    out = cli(settings, "produce", "purchases", str(events), "--pack", "7")
    assert "sent 300 events" in out and "rejected 1 lines: schema=1" in out

    worker = WorkerProcess(settings, "purchases-worker").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.of(PURCHASES).topic], timeout=120))
    finally:
        assert worker.terminate() == 0, worker.log_path.read_text()[-3000:]

    for site in ("a.example", "b.example"):
        rows = json.loads(cli(settings, "query", "purchases", "--site", site, "--json"))
        assert {(site, r["day"]): r["cents"] for r in rows} == {
            k: v for k, v in truth.items() if k[0] == site
        }

    async def indexes(db: Any) -> list[str]:
        return [ix["name"] async for ix in await db["purchases_daily"].list_indexes()]

    assert "site_day" in on_db(settings, indexes)
    assert "purchases_daily" in cli(settings, "schema")
