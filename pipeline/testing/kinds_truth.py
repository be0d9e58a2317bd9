"""Known streams of the kinds other than hits, with their truth and audits (for drills and schedules).

Keyless messages (a log shipper's), so that every document meets several partitions and workers:
impressions (exact counts per user and item), relations (Bloom filters: no false negative) and
listens (HyperLogLog sketches: exact below their explicit threshold, and written in transactions).
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

import orjson
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kafka.producer import EventProducer
from pipeline.kinds.impressions.query import items_of_user
from pipeline.kinds.listens.query import top_tags
from pipeline.kinds.relations import KIND as RELATIONS
from pipeline.kinds.relations.layout import relation_sides
from pipeline.kinds.relations.query import related_items
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.settings import Settings

#: The day the listens are dated (top tags are asked for it).
LISTEN_DAY = datetime(2026, 11, 20, 12, tzinfo=UTC)
TAGS = ("rock", "jazz", "folk", "ambient")


@dataclass
class OtherKinds:
    """The lines of each kind's topic and what they must produce."""

    users: int
    impressions: list[bytes] = field(default_factory=list)
    relations: list[bytes] = field(default_factory=list)
    listens: list[bytes] = field(default_factory=list)
    seen: Counter[tuple[int, int]] = field(default_factory=Counter)
    related: set[tuple[int, int]] = field(default_factory=set)
    heard: dict[tuple[int, str], set[int]] = field(default_factory=lambda: defaultdict(set))

    def lines(self) -> dict[str, list[bytes]]:
        return {"impressions": self.impressions, "relations": self.relations, "listens": self.listens}


def generate_other_kinds(seed: int, events: int, users: int = 30) -> OtherKinds:
    """About ``events`` events of each kind, drawn from ``seed``."""
    rng = random.Random(f"other-kinds-{seed}")
    out = OtherKinds(users)
    for _ in range(events):
        user, item = rng.randrange(users), rng.randrange(25)
        out.seen[(user, item)] += 1
        ts = 1_700_000_000 + rng.randrange(86400)
        out.impressions.append(orjson.dumps({"user": user, "item": item, "ts": ts}))
        if rng.random() < 0.3:
            out.related.add((user, item))
            out.relations.append(orjson.dumps({"user": user, "item": item}))
        if rng.random() < 0.3:
            tag, song = rng.choice(TAGS), rng.randrange(60)
            out.heard[(user, tag)].add(song)
            out.listens.append(
                orjson.dumps({"user": user, "tag": tag, "song": song, "ts": LISTEN_DAY.timestamp()})
            )
    return out


async def produce_other_kinds(settings: Settings, kinds: OtherKinds) -> None:
    """Each kind's lines to its topic, one event per message, without keys."""
    for kind, lines in kinds.lines().items():
        async with EventProducer(settings, settings.topic(kind), 1) as p:
            for line in lines:
                await p.send_raw(line, None)


async def audit_other_kinds(
    db: AsyncDatabase[dict[str, Any]], settings: Settings, kinds: OtherKinds
) -> list[str]:
    """Mismatches between the stored documents and ledgers and the truth (empty: exact)."""
    problems: list[str] = []
    mode = settings.schema
    for kind, lines in kinds.lines().items():
        got = ledger_totals(await read_ledger(db, settings.group_id, [settings.topic(kind)])).events
        if got != len(lines):
            problems.append(f"{kind}: the ledgers count {got} events, {len(lines)} were produced")
    r = settings.of(RELATIONS)
    sides = relation_sides(r.user_capacity, r.item_capacity, r.fpr)
    day: date = LISTEN_DAY.date()
    for user in range(kinds.users):
        seen = dict(await items_of_user(db, user, mode=mode))
        want = {i: n for (u, i), n in kinds.seen.items() if u == user}
        if seen != want:
            problems.append(f"impressions of user {user}: {seen} stored, {want} true")
        related = set(await related_items(db, user, sides))
        missed = sorted(i for u, i in kinds.related if u == user and i not in related)
        if missed:
            problems.append(f"relations of user {user}: items {missed} missing (a false negative)")
        tops = dict(await top_tags(db, user, 1, today=day, mode=mode))
        heard = {t: len(s) for (u, t), s in kinds.heard.items() if u == user}
        if tops != heard:
            problems.append(f"listens of user {user}: top tags {tops}, distinct songs {heard}")
    return problems
