"""Listens: per (user, tag) HyperLogLog sketches by weekday slot and whole, plus a "heard" filter (pure).

One document per (user, tag)::

    {_id: "i7|i13", u: 7, t: 13,
     w: {"1": {d: "20261116", s: BinData}, ..., "7": {...}},   # ISO weekday slots
     a: BinData,                                               # whole history
     b: [BinData, ...]}                                        # heard filters, once past 128 songs

and one summary per user, ``listen_tops`` ``{_id: "i7", u: 7, t: {"i13": BinData}}``:
per tag the estimates of its last 1..7 slot days (:mod:`pipeline.kinds.listens.tops`),
so that top tags read one document. A user's summary is computed after its (user,
tag) documents in the same read-modify-write (the sink runs computes in plan order,
after every read), from the slots those computes leave.

Slot rule (the seed's ``w1..w7``): an event of day D goes to the slot of D's
weekday; a slot holding an older date is replaced (a new week), the same date is
unioned, a newer date means the event is more than a week older than the slot and
only the whole sketch takes it. Sketches merge by union inside the flush's
transaction (read, union, write), so a replayed flush changes nothing. "Heard"
is answered by the explicit sketch, then by growing Bloom filters
(:mod:`pipeline.kinds.listens.heard`), merged in the same read-modify-write; the
seed's ``whole || hash(x) = whole`` is not a membership test: HLL registers keep a
maximum rank per bucket, and a song's rank can be below its bucket's maximum
without the song ever having been added.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import lru_cache
from typing import Any

from bson import Binary

from pipeline.core.fields import FieldMode
from pipeline.core.hll import Sketch, decode, song_hash
from pipeline.core.ids import Id
from pipeline.core.rejection import Rejection
from pipeline.core.times import day_text
from pipeline.core.updates import DocUpdate
from pipeline.kinds.listens.decode import ListenDecoder
from pipeline.kinds.listens.heard import HeardSpec, grown
from pipeline.kinds.listens.layout import listen_fields, listen_id, top_fields, top_id
from pipeline.kinds.listens.tops import entry_of, ordinal, tag_key, too_big

EPOCH = date(1970, 1, 1)


def day_and_slot(ts: float) -> tuple[str, str]:
    """UTC day ``YYYYMMDD`` and its ISO weekday slot ``"1"`` (Monday) to ``"7"``."""
    return _day_and_slot(int(ts // 86400))


@lru_cache(maxsize=8192)
def _day_and_slot(days: int) -> tuple[str, str]:
    """Per day number, computed once (formatting a date was a tenth of a worker's time, profiled)."""
    d = EPOCH + timedelta(days=days)
    return day_text(d), str(d.isoweekday())


def slot_of(day: str) -> str:
    """The weekday slot of a ``YYYYMMDD`` day (day number 1, 0001-01-01, was a Monday)."""
    return str((ordinal(day) - 1) % 7 + 1)


def merge_slot(
    stored: dict[str, Any] | None, day: str, sketch: Sketch, f: dict[str, str]
) -> dict[str, Any] | None:
    """The new content of one weekday slot, or ``None`` to leave it as it is."""
    if stored is None or stored.get(f["date"], "") < day:
        return _slot(day, sketch, f)
    if stored[f["date"]] == day:
        return _slot(day, decode(bytes(stored[f["sketch"]])).union(sketch), f)
    return None  # the slot holds a later week: this event only counts in the whole sketch


def _slot(day: str, sketch: Sketch, f: dict[str, str]) -> dict[str, Any]:
    """A slot as stored: its day, its sketch, and the sketch's estimate as a number any client reads."""
    return {f["date"]: day, f["sketch"]: Binary(sketch.encode()), f["songs"]: round(sketch.estimate())}


@dataclass
class _Pending:
    days: dict[str, Sketch] = field(default_factory=dict)
    whole: Sketch | None = None
    #: The window's songs (their sketch hashes), for the heard filters.
    songs: set[int] = field(default_factory=set)


#: A summary taking more new entries than this is written as one field (``$set`` of the whole
#: ``tags``), not one path per entry: the embedded store's update cost grows with the square
#: of the paths, and a user's first flush brings all its tags at once.
WHOLE_AT = 8

#: (user, tag) → (its slots changed, its slots as they will be stored): what a plan's
#: (user, tag) computes leave for the user's summary compute, which runs after them.
Board = dict[tuple[Id, Id], tuple[bool, dict[str, Any]]]


class ListenSketches:
    """The initialize/agg/result aggregator of listens for one flush window."""

    def __init__(self, decoder: ListenDecoder, p: int, heard: HeardSpec, mode: FieldMode = "compact") -> None:
        self.decoder = decoder
        self.p = p
        self.heard = heard
        self.fields = listen_fields(mode)
        self.top_fields = top_fields(mode)
        self.pending: dict[tuple[Id, Id], _Pending] = {}
        #: Day sketches plus whole sketches pending (``len``, kept in O(1): asked per message).
        self.items = 0
        #: Users with pending listens: one summary each (``documents`` is asked per message too).
        self.users: set[Id] = set()

    def ingest(self, raw: bytes, partition: int = 0) -> Rejection | None:
        """Add one listen to its (user, tag) day sketch, whole sketch and heard filter."""
        ev = self.decoder.decode(raw)
        if isinstance(ev, Rejection):
            return ev
        user, tag, song, ts = ev
        pend = self.pending.get((user, tag))
        if pend is None:
            pend = self.pending[(user, tag)] = _Pending()
            self.users.add(user)
        h = song_hash(song)
        day, _ = day_and_slot(ts)
        sketch = pend.days.get(day)
        if sketch is None:
            sketch = pend.days[day] = Sketch.empty(self.p)
            self.items += 1
        sketch.add_hash(h)
        if pend.whole is None:
            pend.whole = Sketch.empty(self.p)
            self.items += 1
        pend.whole.add_hash(h)
        pend.songs.add(h)
        return None

    def __len__(self) -> int:
        return self.items

    def documents(self) -> int:
        """One document per touched (user, tag), one summary per touched user."""
        return len(self.pending) + len(self.users)

    def plan(self) -> list[DocUpdate]:
        """One read-modify-write upsert per touched (user, tag) document, then one per user's summary."""
        f, tf = self.fields, self.top_fields
        board: Board = {}
        out = []
        tags: dict[Id, list[Id]] = {}
        for (user, tag), pend in self.pending.items():
            out.append(
                DocUpdate(
                    f["collection"],
                    listen_id(user, tag),
                    {f["user"]: user, f["tag"]: tag},
                    compute=_merger(pend, f, self.p, self.heard, board, (user, tag)),
                )
            )
            tags.setdefault(user, []).append(tag)
        for user, touched in tags.items():
            out.append(
                DocUpdate(
                    tf["collection"],
                    top_id(user),
                    {tf["user"]: user},
                    compute=_summary(user, touched, f, tf, board),
                )
            )
        return out


def _same(a: Any, b: Any) -> bool:
    """Equal stored values: BinData compared by bytes (PyMongo reads subtype 0 back as ``bytes``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bytes) and isinstance(b, bytes):
        return bytes(a) == bytes(b)
    return bool(a == b)


def _merger(
    pend: _Pending, f: dict[str, str], p: int, spec: HeardSpec, board: Board, key: tuple[Id, Id]
) -> Any:
    def compute(stored: dict[str, Any] | None) -> dict[str, Any]:
        """Only the fields the union changes: in a steady stream most songs are known, so most
        sketches and filters come out as stored and are not written again (an empty result
        on a stored document means no write at all)."""
        out: dict[str, Any] = {}
        slots = (stored or {}).get(f["slots"], {})
        for day, sketch in sorted(pend.days.items()):
            slot = slot_of(day)
            current = out.get(f"{f['slots']}.{slot}") or slots.get(slot)
            new = merge_slot(current, day, sketch, f)
            if new is not None and not _same(new, current):
                out[f"{f['slots']}.{slot}"] = new
        whole = pend.whole or Sketch.empty(p)
        before = decode(bytes(stored[f["whole"]])) if stored is not None and f["whole"] in stored else None
        if before is not None:
            whole = before.union(whole)
        encoded = Binary(whole.encode())
        if stored is None or not _same(encoded, stored.get(f["whole"])):
            out[f["whole"]] = encoded
        # Heard: the explicit sketch answers; past it, filters (built from its hashes when it leaves).
        filters = [bytes(b) for b in (stored or {}).get(f["filters"]) or ()]
        seed = pend.songs
        if not filters and before is not None and before.hashes is not None:  # leaving the explicit form
            seed = pend.songs | before.hashes
        kept = grown(filters, None if whole.hashes is not None else whole.estimate(), seed, spec)
        if kept is not None and kept != filters:
            out[f["filters"]] = [Binary(b) for b in kept]
        merged = dict(slots)
        prefix = f["slots"] + "."
        changed = stored is None
        for path, value in out.items():
            if path.startswith(prefix):
                merged[path[len(prefix) :]] = value
                changed = True
        board[key] = (changed, merged)
        return out

    return compute


def _summary(user: Id, tags: list[Id], f: dict[str, str], tf: dict[str, str], board: Board) -> Any:
    def compute(stored: dict[str, Any] | None) -> dict[str, Any]:
        """The entries of the user's touched tags whose slots changed (or that it lacks)."""
        if stored is not None and stored.get(tf["full"]):
            return {}  # given up (too big): this user's top tags read the slots
        entries = (stored or {}).get(tf["tags"]) or {}
        out: dict[str, Any] = {}
        for tag in tags:
            got = board.get((user, tag))
            if got is None:  # the sink broke its order: never write a summary from nothing
                raise RuntimeError(f"summary of user {user!r} computed before its tag {tag!r}")
            changed, slots = got
            key = tag_key(tag)
            if not changed and key in entries:
                continue
            entry = entry_of(tag, slots.values(), f)
            if entry is not None and (key not in entries or bytes(entries[key]) != entry):
                out[key] = Binary(entry)
        if out and too_big({**entries, **out}):
            return {tf["full"]: True, tf["tags"]: {}}
        if stored is None or len(out) > WHOLE_AT:  # read in this transaction: the rest is as stored
            return {tf["tags"]: {**entries, **out}} if out else {}
        return {f"{tf['tags']}.{key}": entry for key, entry in out.items()}

    return compute
