"""A lease in ``preagg_meta``: one owner at a time for an operator run that must not run twice at once.

Two ``preagg deadletters replay`` runs at once would both read the same progress, both send
what neither had recorded, and one's "release the claims of a run cut short" could drop the
other's live claims. The lease makes a second run refuse at once, naming the holder.

Taken atomically by one single-document upsert whose filter matches only a lease that is free
(expired, or this owner's): a held lease fails the upsert's insert with a duplicate key, which
here means exactly "someone else holds it" (the filter matched no document with that ``_id``).
A run killed without releasing it frees it when it expires (``ttl``), or at once for a run of
this machine whose process has ended; a long run renews it before each step that writes, and
stops when it finds that it lost it.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any, ClassVar

from pymongo import ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from pipeline.core.errors import EXIT_BUSY, PreaggError
from pipeline.store.meta import META_COLLECTION

#: Seconds a lease lasts without a renewal (a run killed holds it this long at most).
LEASE_TTL = 120.0


class LeaseHeld(PreaggError, RuntimeError):
    exit_code: ClassVar[int] = EXIT_BUSY

    """Another run holds the lease: this one must not start (or must stop)."""


class Lease:
    """One owner's hold on ``preagg_meta`` document ``lease/<name>``."""

    def __init__(self, db: AsyncDatabase[dict[str, Any]], name: str, ttl: float = LEASE_TTL) -> None:
        self.coll = db[META_COLLECTION]
        self.id = f"lease/{name}"
        self.name = name
        self.ttl = ttl
        self.owner = uuid.uuid4().hex
        self.host = f"{socket.gethostname()}:{os.getpid()}"

    async def take(self) -> None:
        """Take the lease or renew it; :class:`LeaseHeld` when another owner holds it unexpired."""
        now = time.time()
        try:
            got = await self.coll.find_one_and_update(
                {"_id": self.id, "$or": [{"owner": self.owner}, {"until": {"$lt": now}}]},
                {"$set": {"owner": self.owner, "host": self.host, "until": now + self.ttl, "at": now}},
                upsert=True,
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError:
            got = None
        if got is None or got.get("owner") != self.owner:
            held = await self.coll.find_one({"_id": self.id}) or {}
            if _dead_here(str(held.get("host", ""))) and await self._steal(held, now):
                return
            left = max(0.0, float(held.get("until", now)) - now)
            raise LeaseHeld(
                f"another {self.name} run holds its lease ({held.get('host', '?')}, for {left:.0f} s more "
                "unless it renews it); wait for it to finish, or for the lease to expire if it was killed"
            )

    async def _steal(self, held: dict[str, Any], now: float) -> bool:
        """Take over the lease of a run of this machine that no longer runs (killed), if still its."""
        got = await self.coll.find_one_and_update(
            {"_id": self.id, "owner": held.get("owner")},
            {"$set": {"owner": self.owner, "host": self.host, "until": now + self.ttl, "at": now}},
            return_document=ReturnDocument.AFTER,
        )
        return got is not None and got.get("owner") == self.owner

    async def release(self) -> None:
        """Give the lease up (only if still ours)."""
        await self.coll.delete_one({"_id": self.id, "owner": self.owner})


def _dead_here(host: str) -> bool:
    """Whether ``host`` (``name:pid``) names a process of this machine that has ended."""
    name, _, pid = host.rpartition(":")
    if name != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
