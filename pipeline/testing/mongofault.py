"""A MongoDB wire-protocol proxy that plays, from a seed, the outcomes a real server returns and the
embedded store never does.

The embedded SecantusDB answers one request at a time and never fails the way a replica set
does, so tests that only run on it never meet what preagg must handle on a real cluster. This
proxy sits between the real driver (PyMongo, in real worker processes) and the store, parses
each ``OP_MSG`` (MongoDB's wire protocol: a 16-byte header, flag bits, a body section and
document-sequence sections), and on demand:

* **rival insert**: before a marked upsert (a flush's idempotent write) of a document that does
  not exist yet, inserts that document as another worker would (the filter's equalities and
  ``$setOnInsert``, none of our counts or marks) and answers the upsert with E11000, as MongoDB
  does when two upserts race to insert one ``_id`` and the filter is more than equalities on it
  (SERVER-14322, SERVER-37124);
* **lost reply**: forwards a write, lets the server apply it, then drops the connection instead
  of delivering the answer (a network error after the write applied; the driver's retryable
  write runs it again, and when that answer is lost too the caller sees the error);
* **write conflict**: answers a statement inside a transaction with ``WriteConflict`` (code 112,
  label ``TransientTransactionError``) without forwarding it, as a server does when another
  transaction wrote the same document;
* **a lagging shard, then a failover** (:meth:`MongoFaultProxy.lag`, :meth:`~MongoFaultProxy.failover`):
  every write to the lagging collections applies and is answered with a write concern error
  (code 64, ``wtimeout``), beside whatever write errors it met, as a primary answers past
  ``wtimeout`` when its secondaries fall behind; reads with majority read concern see those
  documents as they were before the lag (the majority-committed snapshot); the failover rolls
  every lagged write back ("Rollbacks During Replica Set Failover", MongoDB's manual);
* **a mongos** (:attr:`MongoFaultProxy.mongos`: each sharded collection's shard key): ``hello``
  answers ``msg: isdbgrid`` as a mongos does, reached through ``directConnection=true`` (or a
  load balancer), so the driver's topology is not ``Sharded``; an upsert on a sharded collection
  whose filter lacks a shard key field is refused with ShardKeyNotFound (code 61), as mongos
  refuses it; ``enableSharding`` and ``shardCollection`` are answered ``ok``.

Everything else passes through unchanged (handshakes, monitoring's streamed ``hello``, reads).
Each decision draws from one ``random.Random(seed)``, so a schedule is reproducible for the same
order of requests. Counts of what was injected are in :attr:`MongoFaultProxy.injected`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import bson
from pymongo import AsyncMongoClient
from pymongo.errors import DuplicateKeyError

log = logging.getLogger(__name__)

OP_MSG = 2013
HEADER = struct.Struct("<iiii")
CHECKSUM_PRESENT = 1
MORE_TO_COME = 2
#: What :meth:`_Connection._outgoing` returns for a request the proxy answered itself.
ANSWERED = b""
#: Our own replies' request ids (any value the client has not used; it only reads responseTo).
REPLY_IDS = 1 << 30


@dataclass
class FaultRates:
    """The share of eligible requests that meet each fault (0: never)."""

    #: Marked upserts of a document that does not exist yet, raced by a rival insert.
    rival_insert: float = 0.0
    #: ``update`` / ``findAndModify`` commands (outside transactions) whose answer is lost.
    lost_reply: float = 0.0
    #: ``update`` statements inside a transaction answered ``WriteConflict``.
    write_conflict: float = 0.0
    #: ``commitTransaction`` answered with ``UnknownTransactionCommitResult``, half of them
    #: after the server committed (the answer lost in a failover), half without forwarding.
    commit_unknown: float = 0.0
    #: ``update`` commands (outside transactions) of two statements or more of which only the
    #: first half reaches the server, answered ``InterruptedDueToReplStateChange`` (a primary
    #: stepping down in the middle of an unordered bulk write).
    partial_bulk: float = 0.0
    #: The first this many such commands are cut whatever the draw: a test sees the fault it
    #: is about even when its flushes are few (at 5% a run of ten bulk writes had none).
    first_partial_bulks: int = 0
    #: Likewise, the first this many ``update`` answers are lost whatever the draw.
    first_lost_replies: int = 0
    #: Commands held :attr:`SLOW_SECONDS` before they are forwarded (a slow or paused server).
    slow: float = 0.0


#: How long a "slow" command is held.
SLOW_SECONDS = 2.0
#: Commands that write (their write concern is recorded in ``MongoFaultProxy.write_concerns``).
WRITES = frozenset({"insert", "update", "delete", "findAndModify", "commitTransaction"})


@dataclass
class Msg:
    """One parsed ``OP_MSG``: its header fields, flags, body and document sequences."""

    request_id: int
    response_to: int
    flags: int
    body: dict[str, Any]
    sequences: dict[str, list[dict[str, Any]]]

    def encode(self) -> bytes:
        parts = [struct.pack("<I", self.flags & ~CHECKSUM_PRESENT), b"\x00", bson.encode(self.body)]
        for ident, docs in self.sequences.items():
            payload = ident.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
            parts += [b"\x01", struct.pack("<i", 4 + len(payload)), payload]
        data = b"".join(parts)
        return HEADER.pack(16 + len(data), self.request_id, self.response_to, OP_MSG) + data


def parse_msg(request_id: int, response_to: int, data: bytes) -> Msg | None:
    """An ``OP_MSG`` body (after the header); ``None`` for one with a checksum (passed as it is)."""
    (flags,) = struct.unpack_from("<I", data, 0)
    if flags & CHECKSUM_PRESENT:
        return None
    at, body, sequences = 4, None, {}
    while at < len(data):
        kind = data[at]
        at += 1
        if kind == 0:
            (size,) = struct.unpack_from("<i", data, at)
            body = bson.decode(data[at : at + size])
            at += size
        else:
            (size,) = struct.unpack_from("<i", data, at)
            end = at + size
            name_end = data.index(b"\x00", at + 4)
            ident = data[at + 4 : name_end].decode()
            sequences[ident] = bson.decode_all(data[name_end + 1 : end])
            at = end
    if body is None:
        return None
    return Msg(request_id, response_to, flags, body, sequences)


def rival_document(statement: dict[str, Any]) -> dict[str, Any] | None:
    """What another worker's upsert of the same document would have inserted, without its counts.

    The filter's equalities (``_id`` and the shard key) and ``$setOnInsert``: the fields every
    writer of the document puts there alike. ``None`` when the filter has no ``_id``.
    """
    q, u = statement.get("q", {}), statement.get("u", {})
    if "_id" not in q or not isinstance(u, dict):
        return None
    doc: dict[str, Any] = {}
    equalities = {
        k: v for k, v in q.items() if not (isinstance(v, dict) and any(str(key).startswith("$") for key in v))
    }
    for path, value in (*equalities.items(), *(u.get("$setOnInsert") or {}).items()):
        at = doc
        *parents, last = path.split(".")
        for p in parents:
            at = at.setdefault(p, {})
        at[last] = value
    return doc


@cache
def set_on_insert_keys() -> dict[str, frozenset[str]]:
    """Per collection of our kinds (both schema modes), the top-level fields every writer's insert
    holds alike, whatever its share: what their plans set on insert (metadata, the ids a
    document is about). Read from the kinds' layouts."""
    from pipeline.core.fields import FIELD_MODES
    from pipeline.kinds.hits.layout import hits_fields, visit_pages_fields
    from pipeline.kinds.impressions.layout import impression_fields
    from pipeline.kinds.listens.layout import listen_fields, top_fields
    from pipeline.kinds.relations.layout import relation_sides

    out: dict[str, set[str]] = {}
    for mode in FIELD_MODES:
        h = hits_fields(mode)
        r = h.rollups
        visit_pages = visit_pages_fields(mode)
        for f in (h.daily, h.monthly, r.daily, r.monthly, r.top_daily, r.top_monthly, visit_pages):
            out.setdefault(f.collection, set()).add(f.metadata.split(".")[0])
        im = impression_fields(mode)
        rel = relation_sides(10, 10, 0.01, mode)
        lf, tf = listen_fields(mode), top_fields(mode)
        for fields, names in (
            (im.pairs, ("user", "item")),
            (im.items, ("item",)),
            (im.daily, ("day", "item")),
            (rel.users, ()),
            (rel.items, ("item",)),
            (lf, ("user", "tag")),
            (tf, ("user",)),
        ):
            out.setdefault(fields["collection"], set()).update(fields[n] for n in names)
    return {c: frozenset(keys) for c, keys in out.items()}


def rival_of_insert(collection: str, doc: dict[str, Any]) -> dict[str, Any]:
    """What another worker's insert of the same new document would have held, without its counts:
    a flush's insert (:mod:`pipeline.store.upsert_insert`) reduced to its ``_id`` and the fields
    every writer sets on insert (:func:`set_on_insert_keys`)."""
    keep = set_on_insert_keys().get(collection, frozenset())
    return {k: v for k, v in doc.items() if k == "_id" or k in keep}


def is_marked_insert(doc: Any) -> bool:
    """A flush's idempotent insert of a document found absent: it holds marks (``_a``)."""
    return isinstance(doc, dict) and isinstance(doc.get("_a"), dict)


def is_marked_upsert(statement: dict[str, Any]) -> bool:
    """A flush's idempotent write: an upsert that sets marks (``_a.<topic>|<partition>``)."""
    u = statement.get("u")
    return bool(
        statement.get("upsert")
        and isinstance(u, dict)
        and any(k.startswith("_a.") for k in (u.get("$set") or {}))
    )


class MongoFaultProxy:
    """A TCP proxy on 127.0.0.1 in front of one MongoDB server, injecting faults at :attr:`rates`."""

    def __init__(self, upstream_url: str, rates: FaultRates, seed: int = 0) -> None:
        host_port = upstream_url.split("://", 1)[1].split("/", 1)[0].split(",")[0]
        host, _, port = host_port.rpartition(":")
        self.upstream = (host or "127.0.0.1", int(port))
        self.upstream_url = upstream_url
        self.rates = rates
        self.random = random.Random(seed)
        #: What was injected, by fault.
        self.injected: Counter[str] = Counter()
        #: Answers marked to be lost (``first_lost_replies`` counts them).
        self.lost_marked = 0
        #: The write concern of every write outside a transaction (and of every commit), by ``w``:
        #: what the server would have waited for before answering.
        self.write_concerns: Counter[str] = Counter()
        #: The same by ``(w, command, collection)``.
        self.writes_by_concern: Counter[tuple[str, str, str]] = Counter()
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._rival: AsyncMongoClient[dict[str, Any]] | None = None
        self._ready = threading.Event()
        self._ids = REPLY_IDS
        #: Which collections sit on a lagging shard (``None``: none lags).
        self.lagging: Callable[[str], bool] | None = None
        #: What the majority has of each document a lagged write touched, by (db, collection,
        #: ``_id``): the document before its first lagged write (``None``: it did not exist).
        self.preimages: dict[tuple[str, str, Any], dict[str, Any] | None] = {}
        #: Answer as a mongos whose sharded collections have these shard keys (``None``: as the store).
        self.mongos: dict[str, tuple[str, ...]] | None = None
        #: Writes forwarded and not answered yet, by (connection, request id).
        self.in_flight: set[tuple[int, int]] = set()
        #: The lagged ones among them (answered with a write concern error).
        self.lagged_in_flight: set[tuple[int, int]] = set()
        #: While a failover rolls the lagged writes back, new writes wait (for the new primary).
        self.failing_over = False
        #: Writes seen to the collections a lag is armed for, and the write it starts at.
        self.collection_writes = 0
        self.lag_armed: tuple[int, Callable[[str], bool]] | None = None
        #: Those in flight when the lag began: replicated, so pre-images are read after them.
        self.replicated_before: set[tuple[int, int]] = set()
        #: Cursors opened by majority reads of lagging collections: their later batches are rewritten too.
        self.majority_cursors: dict[int, tuple[str, str]] = {}
        #: Failovers so far: a pre-image read while one rolled back belongs to no lag.
        self.failovers = 0

    @property
    def url(self) -> str:
        """The URL workers use: straight to the proxy (no discovery of the store's own address)."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> MongoFaultProxy:
        """Serve in a thread of its own (its own event loop) until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="mongo-fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread."""
        loop = self._loop
        if loop is not None and self._thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)

    def lag(self, collections: Callable[[str], bool]) -> None:
        """From now on the shard of ``collections`` lags: their writes apply unreplicated.

        Writes forwarded before now are replicated: the first lagged write's pre-images are read
        once every one of them has been answered (:meth:`capture` waits), else a write still in
        flight would land after the pre-image was read and be rolled back with the lagged ones.
        """
        self.replicated_before = set(self.in_flight)
        self.lagging = collections

    def lag_after(self, writes: int, collections: Callable[[str], bool]) -> None:
        """The shard of ``collections`` starts to lag at their ``writes``-th write from now (counted
        in writes, not seconds: a schedule meets the lag whatever the machine's speed)."""
        self.lag_armed = (self.collection_writes + writes, collections)

    def failover(self, settle: float = 10.0) -> int:
        """The lagging shard's primary fails over: every write since :meth:`lag` is rolled back
        (each document put back as it was before its first lagged write); the number rolled back.

        Lagged writes already forwarded land first (up to ``settle`` seconds), as on the old
        primary before it stepped down; writes sent meanwhile wait for the new primary (they
        would otherwise land before the rollback and be rolled back with the lagged ones, though
        answered as durable), which has no lag.
        """
        loop = self._loop
        assert loop is not None

        async def roll_back() -> int:
            self.failing_over = True
            try:
                for _ in range(int(settle / 0.05)):
                    if not self.lagged_in_flight & self.in_flight:
                        break
                    await asyncio.sleep(0.05)
                return await restore()
            finally:
                self.lagging = None
                self.failing_over = False

        async def restore() -> int:
            assert self._rival is not None
            images, self.preimages = self.preimages, {}
            self.failovers += 1
            self.majority_cursors.clear()
            for (db, coll, _id), before in images.items():
                if before is None:
                    await self._rival[db][coll].delete_one({"_id": _id})
                else:
                    await self._rival[db][coll].replace_one({"_id": _id}, before, upsert=True)
            self.injected["rolled_back"] += len(images)
            return len(images)

        return asyncio.run_coroutine_threadsafe(roll_back(), loop).result(60)

    async def capture(self, db: str, collection: str, ids: list[Any], queries: list[dict[str, Any]]) -> None:
        """Remember the documents a lagged write is about to touch, as the majority has them.

        Nothing is kept once a failover began meanwhile: a pre-image stored after the rollback
        emptied them would make majority reads show the document as it was, for ever after (every
        flush of it then met its own marks as "not applied", and the drill stalled)."""
        assert self._rival is not None
        epoch = self.failovers
        for _ in range(200):  # writes forwarded before the lag land first (10 s at most)
            if not self.replicated_before & self.in_flight:
                break
            await asyncio.sleep(0.05)
        coll = self._rival[db][collection]
        found: dict[tuple[str, str, Any], dict[str, Any] | None] = {}
        for _id in ids:
            if (db, collection, _id) not in self.preimages:
                found[(db, collection, _id)] = await coll.find_one({"_id": _id})
        for q in queries:
            async for d in coll.find(q):
                found.setdefault((db, collection, d["_id"]), d)
        if epoch != self.failovers or self.failing_over:
            return
        for key, before in found.items():
            self.preimages.setdefault(key, before)

    def as_majority_sees(self, db: str, collection: str, docs: list[Any]) -> list[Any]:
        """``docs`` of a majority read: lagged documents as they were before the lag (absent: left out)."""
        out = []
        for d in docs:
            key = (db, collection, d.get("_id")) if isinstance(d, dict) else None
            if key is None or key not in self.preimages:
                out.append(d)
                continue
            before = self.preimages[key]
            if before is not None:
                out.append(before)
        return out

    def set_rates(self, rates: FaultRates) -> None:
        """Change the rates from now on (``FaultRates()``: pass everything through, to let work finish)."""
        self.rates = rates

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        async def open_() -> None:
            self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._rival = AsyncMongoClient(self.upstream_url, directConnection=True, timeoutMS=20_000)

        loop.run_until_complete(open_())
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            if self._server is not None:
                self._server.close()
            if self._rival is not None:
                with contextlib.suppress(Exception):
                    loop.run_until_complete(self._rival.close())
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _connection(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            sreader, swriter = await asyncio.open_connection(*self.upstream)
        except OSError:
            cwriter.close()
            return
        conn = _Connection(self, creader, cwriter, sreader, swriter)
        await conn.run()

    def next_reply_id(self) -> int:
        self._ids += 1
        return self._ids

    def draw(self, rate: float) -> bool:
        return rate > 0 and self.random.random() < rate

    async def exists(self, db: str, collection: str, _id: Any) -> bool:
        assert self._rival is not None
        return await self._rival[db][collection].find_one({"_id": _id}, {"_id": 1}) is not None

    async def insert_rival(self, db: str, collection: str, doc: dict[str, Any]) -> bool:
        assert self._rival is not None
        try:
            await self._rival[db][collection].insert_one(doc)
        except DuplicateKeyError:
            return False
        return True


@dataclass
class _Rewrite:
    """How to turn the server's answer to an altered ``update`` into the answer to the original."""

    forwarded: list[int]  # original index of each statement forwarded, in order
    injected: list[dict[str, Any]]  # write errors of the statements not forwarded (original indexes)


class _Connection:
    """One client connection and its upstream connection, with the requests in flight."""

    def __init__(
        self,
        proxy: MongoFaultProxy,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        sreader: asyncio.StreamReader,
        swriter: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.creader, self.cwriter = creader, cwriter
        self.sreader, self.swriter = sreader, swriter
        self.rewrites: dict[int, _Rewrite] = {}
        self.lose: set[int] = set()
        #: Commits the server applied whose answer becomes "outcome unknown".
        self.unknown: set[int] = set()
        #: Bulk writes cut in the middle: the server's answer becomes a step-down error.
        self.interrupted: set[int] = set()
        #: Lagged writes: the server's answer gains a write concern error.
        self.unreplicated: set[int] = set()
        #: Majority reads of lagging collections (and their getMores): their documents rewritten.
        self.majority: dict[int, tuple[str, str]] = {}

    async def run(self) -> None:
        up = asyncio.ensure_future(self._client_to_server())
        down = asyncio.ensure_future(self._server_to_client())
        try:
            await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (up, down):
                t.cancel()
            for w in (self.cwriter, self.swriter):
                with contextlib.suppress(Exception):
                    w.close()

    async def _client_to_server(self) -> None:
        while True:
            header, data = await _read_message(self.creader)
            _, request_id, response_to, op = HEADER.unpack(header)
            if op == OP_MSG:
                msg = parse_msg(request_id, response_to, data)
                out = await self._outgoing(msg) if msg is not None else None
                if out == ANSWERED:
                    await self.cwriter.drain()
                    continue
                if out is not None:
                    self.swriter.write(out)
                    await self.swriter.drain()
                    continue
            self.swriter.write(header + data)  # unchanged: the bytes the client sent
            await self.swriter.drain()

    async def _server_to_client(self) -> None:
        while True:
            header, data = await _read_message(self.sreader)
            _, request_id, response_to, op = HEADER.unpack(header)
            self.proxy.in_flight.discard((id(self), response_to))
            self.proxy.lagged_in_flight.discard((id(self), response_to))
            if response_to in self.lose:
                self.lose.discard(response_to)
                self.proxy.injected["lost_reply"] += 1
                return  # the write applied; its answer never arrives: the connection drops
            if response_to in self.unknown or response_to in self.interrupted:
                body = _unknown_commit() if response_to in self.unknown else _stepped_down()
                self.unknown.discard(response_to)
                self.interrupted.discard(response_to)
                reply = Msg(self.proxy.next_reply_id(), response_to, 0, body, {})
                self.cwriter.write(reply.encode())
                await self.cwriter.drain()
                continue
            if self.proxy.mongos is not None and op == OP_MSG:
                hello = parse_msg(request_id, response_to, data)
                if hello is not None and ("isWritablePrimary" in hello.body or "ismaster" in hello.body):
                    self.cwriter.write(_as_mongos(hello).encode())
                    await self.cwriter.drain()
                    continue
            rewrite = self.rewrites.pop(response_to, None)
            lagged = response_to in self.unreplicated
            read = self.majority.pop(response_to, None)
            self.unreplicated.discard(response_to)
            if (rewrite is not None or lagged or read is not None) and op == OP_MSG:
                msg = parse_msg(request_id, response_to, data)
                if msg is not None:
                    if rewrite is not None:
                        msg = _merge_reply(msg, rewrite)
                    if lagged:
                        msg = self._unreplicated(msg)
                    if read is not None:
                        msg = self._majority_reply(msg, *read)
                    self.cwriter.write(msg.encode())
                    await self.cwriter.drain()
                    continue
            self.cwriter.write(header + data)
            await self.cwriter.drain()

    def _unreplicated(self, reply: Msg) -> Msg:
        """A lagged write's answer: what the server said, plus a ``wtimeout`` write concern error."""
        body = dict(reply.body)
        if body.get("ok"):
            body["writeConcernError"] = {
                "code": 64,
                "codeName": "WriteConcernFailed",
                "errmsg": "waiting for replication timed out",
                "errInfo": {"wtimeout": True, "writeConcern": {"w": "majority", "wtimeout": 0}},
            }
            self.proxy.injected["write_concern_error"] += 1
            if any(e.get("code") == 11000 for e in body.get("writeErrors", [])) or body.get("code") == 11000:
                self.proxy.injected["write_concern_error_beside_duplicate"] += 1
        return Msg(reply.request_id, reply.response_to, reply.flags, body, reply.sequences)

    def _majority_reply(self, reply: Msg, db: str, collection: str) -> Msg:
        """A majority read's answer, as the majority-committed snapshot has its documents."""
        body = dict(reply.body)
        cursor = body.get("cursor")
        if isinstance(cursor, dict):
            cursor = dict(cursor)
            for batch in ("firstBatch", "nextBatch"):
                if batch in cursor:
                    cursor[batch] = self.proxy.as_majority_sees(db, collection, cursor[batch])
            if cursor.get("id"):
                self.proxy.majority_cursors[int(cursor["id"])] = (db, collection)
            body["cursor"] = cursor
        return Msg(reply.request_id, reply.response_to, reply.flags, body, reply.sequences)

    async def _lagged(self, msg: Msg, command: str, in_txn: bool) -> None:
        """Note a write to a lagging collection (its documents' pre-images first), or a majority read."""
        lagging = self.proxy.lagging
        body = msg.body
        db = str(body.get("$db", ""))
        if command == "getMore" and int(body.get("getMore") or 0) in self.proxy.majority_cursors:
            self.majority[msg.request_id] = self.proxy.majority_cursors[int(body["getMore"])]
            return
        collection = body.get(command)
        if not isinstance(collection, str):
            return
        if command == "find" and self.proxy.preimages:
            level = (body.get("readConcern") or {}).get("level")
            if level == "majority":
                self.majority[msg.request_id] = (db, collection)
            return
        armed = self.proxy.lag_armed
        if armed is not None and command in WRITES and not in_txn and armed[1](collection):
            self.proxy.collection_writes += 1
            if self.proxy.collection_writes >= armed[0]:
                self.proxy.lag_armed = None
                self.proxy.lag(armed[1])
                lagging = self.proxy.lagging
        if lagging is None or in_txn or command not in WRITES or not lagging(collection):
            return
        ids: list[Any] = []
        queries: list[dict[str, Any]] = []
        if command == "insert":
            ids = [d.get("_id") for d in msg.sequences.get("documents", body.get("documents", []))]
        else:
            field = {"update": "updates", "delete": "deletes"}.get(command)
            statements = (
                msg.sequences.get(field, body.get(field, [])) if field else [{"q": body.get("query", {})}]
            )
            for st in statements:
                q = st.get("q") or {}
                if "_id" in q and not isinstance(q["_id"], dict):
                    ids.append(q["_id"])
                else:
                    queries.append(q)
        # Lagged before its pre-images are read: a failover starting meanwhile waits for it.
        self.proxy.lagged_in_flight.add((id(self), msg.request_id))
        await self.proxy.capture(db, collection, ids, queries)
        self.unreplicated.add(msg.request_id)

    async def _outgoing(self, msg: Msg) -> bytes | None:
        """The altered request to forward, :data:`ANSWERED` when the proxy answered it, ``None``: as sent."""
        body = msg.body
        command = next(iter(body), "")
        rates = self.proxy.rates
        in_txn = body.get("autocommit") is False
        if command in WRITES:
            while self.proxy.failing_over:  # no primary while it fails over
                await asyncio.sleep(0.02)
            self.proxy.in_flight.add((id(self), msg.request_id))
        await self._lagged(msg, command, in_txn)
        if self.proxy.mongos is not None:
            if command in ("enableSharding", "shardCollection"):
                self._answer(msg, {"ok": 1.0})
                return ANSWERED
            if command == "update":
                keys = self.proxy.mongos.get(str(body.get("update")), ())
                updates = msg.sequences.get("updates", body.get("updates", []))
                unkeyed = [
                    i
                    for i, st in enumerate(updates)
                    if keys and st.get("upsert") and any(k not in (st.get("q") or {}) for k in keys)
                ]
                if unkeyed:
                    self.proxy.injected["shard_key_not_found"] += len(unkeyed)
                    return self._forward_without(msg, updates, unkeyed, code=61)
        if command in WRITES and (not in_txn or command == "commitTransaction"):
            w = str((body.get("writeConcern") or {}).get("w", "default"))
            self.proxy.write_concerns[w] += 1
            self.proxy.writes_by_concern[(w, command, str(body.get(command, "")))] += 1
        if command in WRITES and self.proxy.draw(rates.slow):
            self.proxy.injected["slow"] += 1
            await asyncio.sleep(SLOW_SECONDS)
        if command == "commitTransaction" and self.proxy.draw(rates.commit_unknown):
            applied = self.proxy.random.random() < 0.5
            self.proxy.injected["commit_unknown_applied" if applied else "commit_unknown_not_applied"] += 1
            if applied:
                self.unknown.add(msg.request_id)
                return None
            self._answer(msg, _unknown_commit())
            return ANSWERED
        statements = msg.sequences.get("updates", body.get("updates", [])) if command == "update" else []
        # A flush's inserts of new documents (pipeline/store/upsert_insert.py) meet the same faults.
        inserts = msg.sequences.get("documents", body.get("documents", [])) if command == "insert" else []
        flushed = not in_txn and any(is_marked_insert(d) for d in inserts)
        if flushed:
            statements = inserts
        forced = self.proxy.injected["partial_bulk"] < rates.first_partial_bulks
        if not in_txn and len(statements) >= 2 and (forced or self.proxy.draw(rates.partial_bulk)):
            self.proxy.injected["partial_bulk"] += 1
            self.interrupted.add(msg.request_id)
            return self._forward_only(msg, statements[: len(statements) // 2])
        if command == "update":
            if in_txn:
                if statements and self.proxy.draw(rates.write_conflict):
                    self.proxy.injected["write_conflict"] += 1
                    self._answer(msg, _write_conflict())
                    return ANSWERED
            else:
                raced = await self._race(body, statements)
                if raced:
                    return self._forward_without(msg, statements, raced)
        if flushed:
            raced = await self._race(body, statements, inserts=True)
            if raced:
                return self._forward_without(msg, statements, raced)
        forced = self.proxy.lost_marked < rates.first_lost_replies
        if (
            (command in ("update", "findAndModify") or flushed)
            and not in_txn
            and (forced or self.proxy.draw(rates.lost_reply))
        ):
            self.lose.add(msg.request_id)
            self.proxy.lost_marked += 1
        return None

    async def _race(
        self, body: dict[str, Any], statements: list[dict[str, Any]], inserts: bool = False
    ) -> list[int]:
        """Indexes of the statements (upserts, or ``inserts``) a rival insert beat (their documents
        inserted now)."""
        rate = self.proxy.rates.rival_insert
        if rate <= 0:
            return []
        db, collection = body.get("$db", ""), body["insert" if inserts else "update"]
        raced = []
        for i, st in enumerate(statements):
            marked = is_marked_insert(st) if inserts else is_marked_upsert(st)
            if not marked or not self.proxy.draw(rate):
                continue
            doc = rival_of_insert(collection, st) if inserts else rival_document(st)
            if doc is None or await self.proxy.exists(db, collection, doc["_id"]):
                continue  # only a new document's insert races
            if await self.proxy.insert_rival(db, collection, doc):
                self.proxy.injected["rival_insert"] += 1
                raced.append(i)
        return raced

    def _forward_without(
        self, msg: Msg, statements: list[dict[str, Any]], raced: list[int], code: int = 11000
    ) -> bytes | None:
        """Forward all but the ``raced`` statements, answered as refused with ``code`` (duplicate
        key, or 61: a mongos that cannot target an upsert without its shard key)."""
        name = msg.body.get("update", msg.body.get("insert"))
        skip = set(raced)
        forwarded = [i for i in range(len(statements)) if i not in skip]
        injected = [
            {
                "index": i,
                "code": code,
                "errmsg": f"E11000 duplicate key error collection: {msg.body.get('$db')}.{name}"
                f" index: _id_ dup key: {{ _id: {_statement_id(statements[i])!r} }}"
                if code == 11000
                else "Failed to target upsert by query :: could not extract exact shard key",
            }
            for i in raced
        ]
        if not forwarded:
            self._answer(msg, {"n": 0, "nModified": 0, "writeErrors": injected, "ok": 1.0})
            return ANSWERED
        self.rewrites[msg.request_id] = _Rewrite(forwarded, injected)
        return self._forward_only(msg, [statements[i] for i in forwarded])

    def _forward_only(self, msg: Msg, kept: list[dict[str, Any]]) -> bytes:
        field = "documents" if "insert" in msg.body else "updates"
        if field in msg.sequences:
            msg.sequences[field] = kept
        else:
            msg.body[field] = kept
        return msg.encode()

    def _answer(self, request: Msg, body: dict[str, Any]) -> None:
        self.proxy.in_flight.discard((id(self), request.request_id))
        reply = Msg(self.proxy.next_reply_id(), request.request_id, 0, body, {})
        self.cwriter.write(reply.encode())


def _statement_id(statement: dict[str, Any]) -> Any:
    """The ``_id`` an update statement's filter names, or an inserted document's."""
    return statement["q"].get("_id") if "q" in statement else statement.get("_id")


def _merge_reply(reply: Msg, rewrite: _Rewrite) -> Msg:
    """The server's answer to the forwarded statements, as the answer to the original command."""
    body = dict(reply.body)
    errors = [{**e, "index": rewrite.forwarded[e["index"]]} for e in body.get("writeErrors", [])]
    body["writeErrors"] = sorted([*errors, *rewrite.injected], key=lambda e: e["index"])
    if "upserted" in body:
        body["upserted"] = [{**u, "index": rewrite.forwarded[u["index"]]} for u in body["upserted"]]
    return Msg(reply.request_id, reply.response_to, reply.flags, body, reply.sequences)


def _as_mongos(hello: Msg) -> Msg:
    """A ``hello`` answer as a mongos gives it: ``msg: isdbgrid``, no replica set fields."""
    body = {
        k: v
        for k, v in hello.body.items()
        if k not in ("setName", "setVersion", "hosts", "primary", "me", "secondary", "electionId")
    }
    body["msg"] = "isdbgrid"
    return Msg(hello.request_id, hello.response_to, hello.flags, body, hello.sequences)


def _unknown_commit() -> dict[str, Any]:
    """What a commit whose outcome the server could not confirm answers (a write concern timeout
    during a failover): the drivers' rule is to run ``commitTransaction`` again."""
    return {
        "ok": 0.0,
        "code": 50,
        "codeName": "MaxTimeMSExpired",
        "errmsg": "operation exceeded time limit",
        "errorLabels": ["UnknownTransactionCommitResult"],
    }


def _stepped_down() -> dict[str, Any]:
    """A primary that stepped down in the middle of a command (no retryable label: the driver
    does not run it again; the caller sees the error, part of the bulk applied)."""
    return {
        "ok": 0.0,
        "code": 11602,
        "codeName": "InterruptedDueToReplStateChange",
        "errmsg": "operation was interrupted because a client disconnected (stepdown)",
    }


def _write_conflict() -> dict[str, Any]:
    return {
        "ok": 0.0,
        "code": 112,
        "codeName": "WriteConflict",
        "errmsg": "WriteConflict error: this operation conflicted with another operation. "
        "Please retry your operation or multi-document transaction.",
        "errorLabels": ["TransientTransactionError"],
    }


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    header = await reader.readexactly(16)
    (length,) = struct.unpack_from("<i", header, 0)
    return header, await reader.readexactly(length - 16)
