"""One name-store client process for the concurrency test: register names, print tokens.

Usage: python -m tests.integration.name_store_client URL DB MODE CAP LIMIT BARRIER_DIR WORKERS NAMES_FILE

Every process reads the namespace, then waits at a file barrier until all of them
have read it before writing anything: they all see it empty and all plan the same
first document, so the guards' race is certain, not left to the scheduler (a start
time shared by the clock let a late process, on a loaded machine, find everything
registered and the test prove nothing).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pipeline.store.client import mongo_client
from pipeline.store.names import NameCache, NameStore

#: Seconds a process waits at the barrier for the others (they start in a few seconds).
BARRIER_TIMEOUT = 240.0


class BarrierStore(NameStore):
    """A name store whose first read ends only once every client's first read has."""

    def __init__(self, *args: Any, barrier: Path, me: str, workers: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier, self.me, self.workers = barrier, me, workers
        #: Names the first read found (0 for every process: the race is certain).
        self.first_seen: int | None = None

    async def read(self, namespaces: Collection[str]) -> dict[str, list[dict[str, Any]]]:
        out = await super().read(namespaces)
        if self.first_seen is None:
            self.first_seen = sum(len(d[self.f["list"]]) for docs in out.values() for d in docs)
            (self.barrier / self.me).touch()
            deadline = time.monotonic() + BARRIER_TIMEOUT
            while len(list(self.barrier.iterdir())) < self.workers:
                if time.monotonic() > deadline:
                    raise TimeoutError("name store client: the other clients never read")
                await asyncio.sleep(0.01)
        return out


async def main(
    url: str, db: str, mode: str, cap: int, limit: int, barrier: Path, workers: int, names: list[str], me: str
) -> None:
    client = mongo_client(url)
    try:
        store = BarrierStore(client[db], mode, barrier=barrier, me=me, workers=workers)
        cache = NameCache(store, lambda ns: limit, cap)
        await cache.resolve({"n/site": names})
        tokens = {n: cache.token("n/site", n) for n in names}
        print(json.dumps({"tokens": tokens, "first_seen": store.first_seen, "writes": store.writes}))
    finally:
        await client.close()


if __name__ == "__main__":
    url, db, mode, cap, limit, barrier, workers, path = sys.argv[1:]
    with open(path, encoding="utf-8") as f:
        wanted = json.load(f)
    asyncio.run(
        main(url, db, mode, int(cap), int(limit), Path(barrier), int(workers), wanted, Path(path).stem)
    )
