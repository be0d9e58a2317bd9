"""What a commit mode reads and counts of its sink (:class:`~pipeline.store.sink.MongoSink`): its
connections, bounds and counters, as a protocol, so that the modes and the sink that
dispatches to them import each other in one direction only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pymongo import AsyncMongoClient
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.updates import DocUpdate
from pipeline.store.statements import Operation


class SinkState(Protocol):
    client: AsyncMongoClient[dict[str, Any]]
    #: Majority writes, and the same read with majority read concern.
    db: AsyncDatabase[dict[str, Any]]
    durable: AsyncDatabase[dict[str, Any]]
    group: str
    worker: str
    commit_timeout: float
    read_chunk: int
    statement_ops: int
    max_bytes: int
    first_inserts: bool
    first_inserted: int
    already_applied: int
    raced_inserts: int
    split_shares: int
    unknown_commits: int
    fault_point: Callable[[str], None]

    @property
    def exactly_once(self) -> bool: ...

    def shard_keys_matched(self) -> bool: ...

    def operations(self, updates: Sequence[DocUpdate]) -> tuple[dict[str, list[Operation]], int]: ...

    async def stored(
        self,
        updates: Sequence[DocUpdate],
        session: AsyncClientSession | None = None,
        durable: bool = False,
    ) -> dict[tuple[str, Any], dict[str, Any]]: ...
