"""The name store under concurrent registration, on the embedded MongoDB, with separate processes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from pipeline.settings import Settings
from pipeline.store.names.layout import OTHER
from pipeline.store.names.store import names_fields

ROOT = Path(__file__).resolve().parents[2]


def _register_concurrently(
    settings: Settings, tmp_path: Path, workers: int, names: list[str], cap: int, limit: int
) -> list[dict[str, str]]:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = []
    for w in range(workers):
        order = names[:]
        random.Random(w).shuffle(order)  # each worker meets the names in its own order
        path = tmp_path / f"names-{w}.json"
        path.write_text(json.dumps(order))
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.integration.name_store_client",
                    settings.mongo_url or "",
                    settings.db,
                    settings.schema,
                    str(cap),
                    str(limit),
                    str(barrier),
                    str(workers),
                    str(path),
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        answer = json.loads(out)
        results.append(answer["tokens"])
        # Every client read the namespace empty before any wrote (the barrier): each one's
        # first write created the same document, so all but one lost that race at least.
        assert answer["first_seen"] == 0 and answer["writes"] >= 1
    return results


def _docs(settings: Settings) -> tuple[dict[str, str], list[dict[str, Any]]]:
    f = names_fields(settings.schema)
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    try:
        docs = list(client[settings.db][f["collection"]].find({f["namespace"]: "n/site"}))
    finally:
        client.close()
    return f, sorted(docs, key=lambda d: d[f["least_value"]])


@pytest.mark.parametrize("schema", ["compact", "readable"])
def test_workers_registering_the_same_names_agree(settings: Settings, tmp_path: Path, schema: str) -> None:
    settings = settings.with_(schema=schema)
    names = [f"prop-{i:04d}" for i in range(1000)]
    cap = 64  # small documents: many "next document" races
    results = _register_concurrently(settings, tmp_path, 4, names, cap, limit=10_000)
    assert all(r == results[0] for r in results), "workers disagree on tokens"
    tokens = results[0]
    assert sorted(int(t) for t in tokens.values()) == list(range(1000)), "a token given twice or skipped"
    f, docs = _docs(settings)
    stored = [n for d in docs for n in d[f["list"]]]
    assert len(stored) == len(set(stored)) == 1000, "a name stored twice"
    least = 0
    for d in docs:
        assert d[f["least_value"]] == least and len(d[f["list"]]) <= d[f["cap"]] == cap
        for pos, n in enumerate(d[f["list"]]):
            assert tokens[n] == str(least + pos)
        least += len(d[f["list"]])


def test_limit_holds_under_concurrency_and_the_rest_is_other(settings: Settings, tmp_path: Path) -> None:
    names = [f"user-{i}" for i in range(300)]
    results = _register_concurrently(settings, tmp_path, 3, names, cap=50, limit=120)
    assert all(r == results[0] for r in results)
    given = {n: t for n, t in results[0].items() if t != OTHER}
    assert len(given) == 120 and sorted(int(t) for t in given.values()) == list(range(120))
    f, docs = _docs(settings)
    stored = [n for d in docs for n in d[f["list"]]]
    assert sorted(stored) == sorted(given) and all(len(d[f["list"]]) <= d[f["cap"]] for d in docs)
