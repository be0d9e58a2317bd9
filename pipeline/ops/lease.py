"""A fenced lease in ``preagg_meta``: one owner at a time for an operator run that must not run twice.

Two ``preagg deadletters replay`` runs at once would both read the same progress, both send
what neither had recorded, and one's "release the claims of a run cut short" could drop the
other's live claims. The lease makes a second run refuse at once, naming the holder.

* **Taken on the server's clock.** One single-document pipeline update decides, on the store's
  own clock (``$$NOW``), whether the lease is free (no owner, expired, or this owner's) and takes
  it; two hosts' clocks are never compared. ``until`` is milliseconds since the epoch, read with
  ``$toLong`` (the embedded store compares dates with ``$$NOW`` wrongly; numbers it compares right).
* **Fenced.** Each take-over adds one to the lease's ``token``; a holder keeps the token it took.
  Every write a run makes under the lease goes through :meth:`Lease.fenced`: a transaction whose
  first statement touches the lease document on condition that owner and token are still this
  run's. A holder that was paused past its expiry and comes back after another run took over
  finds no match, and its claim or release is refused (``LeaseHeld``) with nothing written; a
  take-over racing the fenced write meets a write conflict on the lease document.
* **A dead holder.** A run killed without releasing frees the lease when it expires (``ttl``), or
  at once when the holder ran on this machine in this PID namespace and boot, and its process is
  gone (or the PID now names a process started later). A PID from another namespace (another
  container of the same pod) or another boot proves nothing and is left to expire.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.errors import EXIT_BUSY, PreaggError
from pipeline.store.client import transaction
from pipeline.store.meta import META_COLLECTION

#: Seconds a lease lasts without a renewal (a run killed holds it this long at most).
LEASE_TTL = 120.0

T = TypeVar("T")


class LeaseHeld(PreaggError, RuntimeError):
    exit_code: ClassVar[int] = EXIT_BUSY

    """Another run holds the lease: this one must not start (or must stop)."""


def process_identity() -> dict[str, Any]:
    """What tells this process apart from any other: host name, PID, PID namespace, boot, start time."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "ns": _pid_namespace(),
        "boot": _boot_id(),
        "start": _start_ticks(pid),
    }


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat``, field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def dead_here(proc: Any) -> bool:
    """Whether ``proc`` (a holder's :func:`process_identity`) names a process of this machine, PID
    namespace and boot that has ended. Anything less certain is ``False``: the lease then expires."""
    if not isinstance(proc, dict):
        return False
    here = process_identity()
    if any(proc.get(k) != here[k] or here[k] is None for k in ("host", "ns", "boot")):
        return False
    pid = proc.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    started = _start_ticks(pid)
    if started is None:
        return True  # no such process
    return proc.get("start") is not None and started != proc.get("start")  # the PID was reused


def _take(owner: str, proc: dict[str, Any], ttl_ms: int, force: bool = False) -> list[dict[str, Any]]:
    """The pipeline update that takes the lease for ``owner`` if it is free, on the server's clock."""
    now = {"$toLong": "$$NOW"}
    free: Any = (
        True
        if force
        else {
            "$or": [
                {"$eq": ["$owner", owner]},
                {"$eq": [{"$type": "$owner"}, "missing"]},
                {"$lt": [{"$toLong": {"$ifNull": ["$until", 0]}}, now]},
            ]
        }
    )
    over = {"$and": [{"$ne": ["$owner", owner]}, free]}
    return [
        {
            "$set": {
                "token": {"$cond": [over, {"$add": [{"$ifNull": ["$token", 0]}, 1]}, "$token"]},
                "until": {"$cond": [free, {"$add": [now, ttl_ms]}, "$until"]},
                "proc": {"$cond": [free, {"$literal": proc}, "$proc"]},
                "host": {"$cond": [free, f"{proc['host']}:{proc['pid']}", "$host"]},
                "owner": {"$cond": [free, owner, "$owner"]},
            }
        }
    ]


class Lease:
    """One owner's hold on ``preagg_meta`` document ``lease/<name>``."""

    def __init__(self, db: AsyncDatabase[dict[str, Any]], name: str, ttl: float = LEASE_TTL) -> None:
        self.db = db
        self.coll = db[META_COLLECTION]
        self.id = f"lease/{name}"
        self.name = name
        self.ttl = ttl
        self.owner = uuid.uuid4().hex
        self.proc = process_identity()
        self.host = f"{self.proc['host']}:{self.proc['pid']}"
        #: The take-over this run holds the lease by (``None``: not taken yet).
        self.token: int | None = None

    async def take(self) -> None:
        """Take the lease or renew it; :class:`LeaseHeld` when another owner holds it unexpired."""
        got = await self.coll.find_one_and_update(
            {"_id": self.id},
            _take(self.owner, self.proc, int(self.ttl * 1000)),
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        if got is not None and got.get("owner") == self.owner and self._keeps(got):
            return
        held = got or {}
        if held.get("owner") != self.owner and dead_here(held.get("proc")) and await self._steal(held):
            return
        if self.token is not None and held.get("owner") == self.owner:
            # Taken over and given up while this run was away: it took the lease again under a new
            # token, but what it read before is stale. It gives the lease back and stops.
            await self._give_back(held.get("token"))
            raise LeaseHeld(f"the {self.name} lease was taken over while this run was away; it stops here")
        raise LeaseHeld(
            f"another {self.name} run holds its lease ({held.get('host', '?')}, until the store's clock "
            "passes its expiry unless it renews it); wait for it to finish, or for the lease to expire "
            "if it was killed"
        )

    def _keeps(self, doc: dict[str, Any]) -> bool:
        """Whether ``doc`` is this run's lease by the token it holds (the first take learns it)."""
        token = int(doc.get("token") or 0)
        if self.token is None:
            self.token = token
        return token == self.token

    async def _steal(self, held: dict[str, Any]) -> bool:
        """Take over the lease of a run of this machine that no longer runs (killed), if still its."""
        got = await self.coll.find_one_and_update(
            {"_id": self.id, "owner": held.get("owner"), "token": held.get("token")},
            _take(self.owner, self.proc, int(self.ttl * 1000), force=True),
            return_document=ReturnDocument.AFTER,
        )
        if got is None or got.get("owner") != self.owner:
            return False
        self.token = int(got.get("token") or 0)
        return True

    async def fenced(self, write: Callable[[AsyncClientSession], Awaitable[T]]) -> T:
        """Run ``write`` in a transaction that first checks, by writing the lease document, that this
        run still holds the lease by its token: refused (:class:`LeaseHeld`) with nothing written
        once another run took it over."""
        async with transaction(self.db.client) as session:
            touched = await self.coll.update_one(
                {"_id": self.id, "owner": self.owner, "token": self.token},
                {"$inc": {"writes": 1}},
                session=session,
            )
            if touched.matched_count != 1:
                await session.abort_transaction()
                raise LeaseHeld(
                    f"the {self.name} lease was taken over by another run (token {self.token} is stale): "
                    "this run's write is refused and it stops here"
                )
            return await write(session)

    async def release(self) -> None:
        """Give the lease up (only if still ours, by our token). The document stays, with its token:
        the next take-over counts on from it, so a token is never handed out twice."""
        await self._give_back(self.token)
        self.token = None  # given up: a later take is a new hold

    async def _give_back(self, token: Any) -> None:
        """Free the lease if this owner holds it by ``token``; the document and its token stay."""
        await self.coll.update_one(
            {"_id": self.id, "owner": self.owner, "token": token},
            {"$set": {"owner": None, "until": 0}, "$unset": {"proc": ""}},
        )
