"""Which consumer group counted a topic into this database: a new group id must not count it again.

Ledgers (``preagg_offsets``) are per consumer group while the counters are shared by
everything writing the database. A worker started with a new ``PREAGG_GROUP_ID`` found
no ledger of its own, started from Kafka's earliest offset, and counted the whole
retained log a second time. A worker now looks first: when another group holds ledgers
of one of its topics and its own group holds none, it refuses to start with one line
naming ``preagg positions adopt``, which moves the other group's ledgers to it
(:func:`adopt`): the new group then goes on from exactly what was counted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.families import base_topic
from pipeline.store.client import Db, transaction
from pipeline.store.offsets import OFFSETS_COLLECTION, offset_id


async def groups_by_topic(db: Db, topics: Iterable[str]) -> dict[str, set[str]]:
    """Per topic, the consumer groups holding ledgers of it in this database."""
    out: dict[str, set[str]] = {t: set() for t in topics}
    cursor = db[OFFSETS_COLLECTION].find({"topic": {"$in": list(out)}}, {"topic": 1, "group": 1})
    async for d in cursor:
        if d.get("group"):
            out[d["topic"]].add(d["group"])
    return out


def refusal(group: str, held: Mapping[str, set[str]]) -> str | None:
    """Why group ``group`` must not start (pure): topics counted by other groups only."""
    foreign = {t: sorted(gs) for t, gs in held.items() if gs and group not in gs}
    if not foreign:
        return None
    where = "; ".join(f"topic {t} by group {', '.join(gs)}" for t, gs in sorted(foreign.items()))
    first = next(iter(sorted(foreign.values())))[0]
    return (
        f"this database already counted {where}, and consumer group {group!r} has no ledger of it: "
        f"starting would count the retained log again. Stop that group's workers, then run "
        f"`preagg positions adopt --from-group {first} --apply` (or set PREAGG_GROUP_ID back, "
        f"or use another PREAGG_DB)"
    )


async def adopt(
    db: Db, from_group: str, group: str, topics: Iterable[str], apply: bool
) -> list[dict[str, Any]]:
    """Move ``from_group``'s ledgers of ``topics`` to ``group``; returns them (a dry run unless ``apply``).

    In one transaction the ledgers are copied under the new group (position, fingerprint
    and figures) with a new flush id, and the old ones deleted: a worker of the old group
    still running then fails its next fence and stops (exit 75), and its restart refuses
    to start (this module), so the two groups never both count.
    """
    coll = db[OFFSETS_COLLECTION]
    wanted = list(topics)
    # A topic's ledgers and its families' (``<topic>@<family>``: pipeline/core/families.py).
    old = [d async for d in coll.find({"group": from_group}) if base_topic(str(d.get("topic"))) in wanted]
    mine = {
        base_topic(str(d.get("topic")))
        async for d in coll.find({"group": group}, {"topic": 1})
        if base_topic(str(d.get("topic"))) in wanted
    }
    clash = sorted({base_topic(d["topic"]) for d in old} & mine)
    if clash:
        raise ValueError(f"group {group!r} already has ledgers of {', '.join(clash)}: nothing moved")
    now = time.time()
    moved = []
    for d in sorted(old, key=lambda d: (d["topic"], d["partition"])):
        new = {k: v for k, v in d.items() if k not in ("_id", "diverged")}
        new.update(
            _id=offset_id(group, d["topic"], d["partition"]),
            group=group,
            flush=f"adopted-{uuid.uuid4().hex}",
            at=now,
            worker="preagg positions adopt",
            adopted={"from": from_group, "at": now},
        )
        moved.append(new)
    if apply and moved:
        async with transaction(db.client) as session:
            await coll.insert_many(moved, session=session)
            await coll.delete_many({"_id": {"$in": [d["_id"] for d in old]}}, session=session)
    return moved
