"""The embedded SecantusDB as the project starts it: no oplog by default, still a replica-set primary.

Without the oplog its updates cost a third (``make bench-store``); transactions and
retryable writes must behave as before, and ``PREAGG_EMBEDDED_OPLOG=1`` brings the
oplog (change streams) back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from pipeline.services.embedded import EmbeddedServices
from pipeline.services.secantus import KEEP_OPLOG

pytestmark = pytest.mark.integration


@contextmanager
def store(home: Path, keep_oplog: str | None) -> Iterator[MongoClient[dict[str, Any]]]:
    """A private embedded pair started with ``PREAGG_EMBEDDED_OPLOG`` as given (unset: ``None``)."""
    before = os.environ.pop(KEEP_OPLOG, None)
    if keep_oplog is not None:
        os.environ[KEEP_OPLOG] = keep_oplog
    svc = EmbeddedServices(home)
    try:
        endpoints = svc.start()
        client: MongoClient[dict[str, Any]] = MongoClient(endpoints.mongo_url, timeoutMS=30_000)
        try:
            yield client
        finally:
            client.close()
    finally:
        svc.stop()
        os.environ.pop(KEEP_OPLOG, None)
        if before is not None:
            os.environ[KEEP_OPLOG] = before


def transaction_and_oplog(client: MongoClient[dict[str, Any]]) -> int:
    """Run an upsert, a transaction and a retryable write; the oplog entries they left."""
    coll = client["embedded_store"]["docs"]
    coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}, upsert=True)
    with client.start_session() as session, session.start_transaction():
        coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}, session=session)
        coll.insert_one({"_id": "b"}, session=session)
    assert coll.find_one({"_id": "a"}) == {"_id": "a", "n": 2}
    assert coll.count_documents({}) == 2
    assert client.admin.command("hello").get("setName"), "still a replica-set primary"
    return client["local"]["oplog.rs"].count_documents({"ns": "embedded_store.docs"})


def test_no_oplog_by_default_and_transactions_still_work(tmp_path: Path) -> None:
    with store(tmp_path / "default", None) as client:
        assert transaction_and_oplog(client) == 0


def test_the_oplog_is_kept_when_asked(tmp_path: Path) -> None:
    with store(tmp_path / "kept", "1") as client:
        assert transaction_and_oplog(client) >= 3
