"""Shared steps of integration tests: produce, run a worker until caught up, read back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from pipeline.kafka.options import kafka_client_kwargs
from pipeline.kafka.producer import send_lines
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import uncounted, wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.settings import Settings
from pipeline.store.command import on_db
from pipeline.testing.audit import audit_hits
from pipeline.testing.traffic import Traffic
from pipeline.worker.process import WorkerProcess


async def produce(settings: Settings, lines: Iterable[tuple[bytes, bytes | None]], pack: int) -> None:
    await send_lines(settings, settings.topic("hits"), lines, pack)


def run_worker_to_end(
    settings: Settings, name: str = "worker", timeout: float = 180, topics: list[str] | None = None
) -> None:
    """Start a worker, wait until the group committed everything, SIGTERM it (exit code 0)."""
    w = WorkerProcess(settings, name)
    before = w.log_path.stat().st_size if w.log_path.exists() else 0
    w.start()
    try:
        asyncio.run(wait_caught_up(settings, topics or [settings.topic("hits")], timeout=timeout))
        # Nothing new to count returns at once: a SIGTERM before the worker installed its
        # handlers would kill it (-15), so wait until it has started.
        deadline = time.monotonic() + 60
        while (
            w.alive()
            and "ready: topics" not in w.log_path.read_text()[before:]
            and time.monotonic() < deadline
        ):
            time.sleep(0.1)
    finally:
        rc = w.terminate()
    assert rc == 0, f"exit {rc}: " + w.log_path.read_text()[-3000:]


async def read_topic(settings: Settings, topic: str, timeout: float = 10) -> list[bytes]:
    """Every message value of ``topic`` from the beginning."""
    c = AIOKafkaConsumer(
        topic,
        **kafka_client_kwargs(settings),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await c.start()
    out: list[bytes] = []
    try:
        while True:
            batch = await c.getmany(timeout_ms=int(timeout * 1000) if not out else 1500)
            if not batch:
                return out
            for msgs in batch.values():
                out.extend(m.value for m in msgs if m.value is not None)
    finally:
        await c.stop()


def dead_letters(settings: Settings) -> list[dict[str, Any]]:
    return [orjson.loads(v) for v in asyncio.run(read_topic(settings, settings.deadletter_topic))]


def audit_traffic(settings: Settings, traffic: Traffic) -> tuple[list[str], int]:
    """Mismatches of every hits counter against ``traffic``'s truth, and the events the ledgers count."""

    async def check(db):  # type: ignore[no-untyped-def]
        problems = await audit_hits(db, traffic.per_minute, hits_fields())
        stage = settings.of(HITS).visits_topic  # its records are forwarded hits, not events
        ledgers = [d for d in await read_ledger(db, settings.group_id) if d.get("topic") != stage]
        return problems, ledger_totals(ledgers).events

    result: tuple[list[str], int] = with_db(settings, check)
    return result


def with_db(settings: Settings, fn: Any) -> Any:
    """``fn(db)`` on the test's database (the CLI's helper)."""
    return on_db(settings, fn)


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``preagg ARGS`` in a child process with these settings (stdin empty)."""
    env = {**os.environ, **settings.to_env()}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        input="",
    )


def cli(settings: Settings, *args: str) -> str:
    """``preagg ARGS``'s output; the command must succeed."""
    done = run_cli(settings, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _wait_done(settings: Settings, left: Any, what: str, timeout: float) -> None:
    """Poll ``left(db, fields)`` (the ``_id`` still waiting) until it is empty."""
    f = hits_fields(settings.schema)
    deadline = time.monotonic() + timeout
    while waiting := with_db(settings, lambda db: left(db, f)):
        assert time.monotonic() < deadline, f"{what}: {waiting[:5]}"
        time.sleep(0.5)


def wait_counted(settings: Settings, timeout: float = 180.0) -> None:
    """Wait until the workers have stored every day's and month's visitors as its sketch's estimate."""
    from pipeline.kinds.hits.visitor_counts import uncounted

    _wait_done(settings, uncounted, "visitors never counted", timeout)


def wait_sealed(settings: Settings, timeout: float = 180.0) -> None:
    """Wait until the workers have made every top-pages list exact (a few seconds after their last write)."""
    from pipeline.kinds.hits.sites.seal import unsealed

    _wait_done(settings, unsealed, "top pages never sealed", timeout)


def schema_violations(settings: Settings) -> dict[str, list[Any]]:
    """Per collection or view of the deployment, the documents (rows) its JSON Schema refuses
    (``$jsonSchema`` in the store itself; the schemas of the deployment's field-name mode)."""
    from pipeline.core.doc_schema import document_schema, view_schema
    from pipeline.core.fields import STORE_SCHEMAS, check_mode, documents
    from pipeline.kinds import load_kinds

    mode = check_mode(settings.schema)
    kinds = load_kinds(settings.kinds)
    wanted: dict[str, dict[str, Any]] = {}
    for folder in [k.folder for k in kinds] + [STORE_SCHEMAS]:
        for doc, spec in documents(folder).items():
            wanted[spec["collection"]] = document_schema(folder, doc, mode)
    for view in (v for k in kinds for v in k.views(mode)):
        wanted[view.name] = view_schema(view)

    async def check(db: Any) -> dict[str, list[Any]]:
        out = {}
        for name, schema in wanted.items():
            bad = [d async for d in db[name].find({"$nor": [{"$jsonSchema": schema}]}).limit(3)]
            if bad:
                out[name] = bad
        return out

    found: dict[str, list[Any]] = with_db(settings, check)
    return found


def wait_ledgers_at_end(settings: Settings, topic: str, timeout: float = 180.0) -> None:
    """Wait until the group's ledgers of ``topic`` stand at each partition's end as a fetch reads
    it. The group's committed offsets against ListOffsets can pass early on the embedded broker
    (its latest offset lags a batch): the last batch of a file just produced, or of the hits a
    flush just forwarded to the visits stage (which flushes every few seconds), not counted yet."""
    deadline = time.monotonic() + timeout
    while (left := asyncio.run(uncounted(settings, [topic]))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"{topic}: partitions not counted to their ends (topic, partition, ledgers, end): {left}"
