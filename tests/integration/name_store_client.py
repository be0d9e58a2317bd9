"""One name-store client process for the concurrency test: wait, register names, print tokens.

Usage: python -m tests.integration.name_store_client URL DB MODE CAP LIMIT START NAMES_FILE
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from pipeline.store.client import mongo_client
from pipeline.store.names import NameCache, NameStore


async def main(url: str, db: str, mode: str, cap: int, limit: int, start: float, names: list[str]) -> None:
    client = mongo_client(url)
    try:
        cache = NameCache(NameStore(client[db], mode), lambda ns: limit, cap)
        await client.admin.command("ping")
        time.sleep(max(0.0, start - time.time()))
        await cache.resolve({"n/site": names})
        tokens = {n: cache.token("n/site", n) for n in names}
        print(json.dumps({"tokens": tokens, "reads": cache.store.reads, "writes": cache.store.writes}))
    finally:
        await client.close()


if __name__ == "__main__":
    url, db, mode, cap, limit, start, path = sys.argv[1:]
    with open(path, encoding="utf-8") as f:
        wanted = json.load(f)
    asyncio.run(main(url, db, mode, int(cap), int(limit), float(start), wanted))
