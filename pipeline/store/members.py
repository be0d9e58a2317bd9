"""What each worker holds, as it says so itself: one small record per group member in ``preagg_meta``.

A broker's DescribeGroups answer carries each member's assignment in the assignor's
encoding, and some brokers (the embedded one) answer it empty; ``preagg status`` then
showed a member holding 16 partitions as holding none. Each worker records the
partitions of its assignment when it gets them (the same list it logs), keyed by its
member id, and drops the records of its earlier member ids; ``preagg status`` shows,
for each member the broker lists, the worker's own record when there is one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.store.meta import META_COLLECTION

KIND = "member"


async def record_assignment(
    db: AsyncDatabase[dict[str, Any]], group: str, member: str, worker: str, partitions: Iterable[str]
) -> None:
    """This worker, as ``member`` of ``group``, holds ``partitions`` (``topic[p]``) from now on."""
    meta = db[META_COLLECTION]
    await meta.update_one(
        {"_id": f"{KIND}|{group}|{member}"},
        {
            "$set": {
                "kind": KIND,
                "group": group,
                "member": member,
                "worker": worker,
                "partitions": sorted(partitions),
                "at": time.time(),
            }
        },
        upsert=True,
    )
    await meta.delete_many({"kind": KIND, "group": group, "worker": worker, "member": {"$ne": member}})


async def recorded_assignments(db: AsyncDatabase[dict[str, Any]], group: str) -> dict[str, list[str]]:
    """Member id → the partitions its worker last recorded."""
    found = db[META_COLLECTION].find({"kind": KIND, "group": group}, {"member": 1, "partitions": 1})
    return {str(d["member"]): list(d.get("partitions") or []) async for d in found}
