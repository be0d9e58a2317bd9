"""``preagg status``: lag, throughput and dead letters of the whole worker group.

Read from the two places that hold the truth, not from any one worker: the broker
(end offsets, Kafka-committed offsets) and MongoDB's partition ledgers (positions
committed with the aggregates, exact event and refusal counts). Throughput is the
ledger's event count sampled twice, ``interval`` seconds apart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kafka.group import GroupView, describe_group
from pipeline.kafka.options import KafkaConnection
from pipeline.kinds import kind_named, stream_topics
from pipeline.ops.lag import group_lag
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.ops.pending import STALLED_AFTER
from pipeline.settings import Settings
from pipeline.store.members import recorded_assignments


def partition_problems(where: str, p: Any, doc: Mapping[str, Any]) -> tuple[list[str], bool]:
    """What an operator must know of one partition's ledger, and whether ``preagg positions
    reset`` decides it (a partition held back, or a log ending before its ledger)."""
    problems, positional = [], False
    if stuck := doc.get("stuck"):
        problems.append(
            f"{where}: worker {stuck.get('worker')} cannot write its flush: {stuck.get('reason')} "
            "(fix or remove that document; the flush then goes through by itself)"
        )
    if diverged := doc.get("diverged"):
        positional = True
        problems.append(f"{where}: held back by worker {diverged.get('worker')}: {diverged.get('reason')}")
    elif doc.get("next") is not None and p.end < doc["next"]:
        positional = True
        problems.append(
            f"{where}: Kafka's log ends at {p.end} but the ledger counted up to {doc['next']} "
            "(topic recreated or data lost?)"
        )
    if lost := doc.get("lost"):
        first, end = int(lost.get("from", 0)), int(lost.get("to", 0))
        problems.append(
            f"{where}: offsets {first}..{end - 1} were deleted from Kafka (retention or deletion) "
            f"before they were counted ({end - first} lost, found by worker {lost.get('worker')}); "
            "once accounted for: `preagg positions acknowledge "
            f"--topic {p.topic} --partition {p.partition}`"
        )
    return problems, positional


def partition_row(p: Any, doc: Mapping[str, Any]) -> dict[str, Any]:
    """One partition as ``preagg status --json`` lists it."""
    position = max(p.committed, doc.get("next", 0))
    return {
        "topic": p.topic,
        "partition": p.partition,
        "end": p.end,
        "kafka_committed": p.committed,
        "mongo_position": doc.get("next"),
        "lag": max(0, p.end - position),
        "events": doc.get("events", 0),
        "worker": doc.get("worker"),
        "worker_rss_mb": round(doc["rss"] / 1e6) if doc.get("rss") else None,
        "last_flush": doc.get("at"),
        "diverged": (doc.get("diverged") or {}).get("reason"),
    }


def idle_problem(idle: list[str], last_flush: float, now: float, group: GroupView | None) -> str:
    """The line for partitions with messages waiting that nothing counts, naming who is in the group."""
    since = f"no flush for {now - last_flush:.0f} s" if last_flush else "never counted"
    if group is None:
        members = "the broker does not describe the group"
    elif not group.members:
        members = "no worker is in the group: start `preagg worker`"
    elif not group.holding():
        members = (
            f"{len(group.members)} worker(s) in the group (state {group.state or '?'}) hold no "
            'partition: the group is not assigning (docs/operations.md, "A worker the group never '
            'lets start")'
        )
    else:
        members = f"{group.holding()} of {len(group.members)} worker(s) hold partitions"
    return (
        f"nothing counts {len(idle)} partition(s) with messages waiting: {', '.join(idle[:8])}"
        f"{' ...' if len(idle) > 8 else ''}; the group's last flush: {since}; {members}"
    )


async def group_status(
    settings: Settings, db: AsyncDatabase[dict[str, Any]], interval: float = 0.0
) -> dict[str, Any]:
    """Lag per partition, throughput, per-partition ledgers, dead letters by reason, as one dict."""
    topics = stream_topics(settings)
    before = ledger_totals(await read_ledger(db, settings.group_id, topics)).events if interval > 0 else 0
    if interval > 0:
        await asyncio.sleep(interval)
    ledger = await read_ledger(db, settings.group_id, topics)
    totals = ledger_totals(ledger)
    lags = await group_lag(settings, topics)
    dead_end = sum(p.end for p in await group_lag(settings, [settings.deadletter_topic]))
    stored = {(d["topic"], d["partition"]): d for d in ledger}
    partitions, problems, idle = [], [], []  # idle: messages waiting and no flush for a while
    now = time.time()
    positional = False  # a problem `preagg positions reset` decides
    for p in lags:
        doc = stored.get((p.topic, p.partition), {})
        where = f"{p.topic}[{p.partition}]"
        found, decides = partition_problems(where, p, doc)
        problems += found
        positional = positional or decides
        row = partition_row(p, doc)
        if row["lag"] and not doc.get("diverged") and now - float(doc.get("at") or 0.0) > STALLED_AFTER:
            idle.append(f"{where} ({row['lag']} waiting)")
        partitions.append(row)
    group = await describe_group(KafkaConnection.of(settings), settings.group_id)
    if group is not None:
        group = with_recorded(group, await recorded_assignments(db, settings.group_id))
    if idle:
        problems.append(idle_problem(idle, totals.last_flush_at, now, group))
    workers: dict[str, list[int]] = {}
    for d in ledger:
        workers.setdefault(d.get("worker", "?"), []).append(d["partition"])
    notes = [line for k in settings.kinds for line in await kind_named(k).status_notes(db, settings)]
    if positional:
        problems.append(
            "decide with: preagg positions reset --topic T [--partition P] --to earliest|latest|OFFSET"
        )
    return {
        "problems": problems,
        "lag": sum(p["lag"] for p in partitions),
        "events_per_second": (totals.events - before) / interval if interval > 0 else None,
        "events": totals.events,
        "flushes": totals.flushes,
        "docs": totals.docs,
        "last_flush": totals.last_flush_at or None,
        "partitions": partitions,
        "last_writers": {w: sorted(ps) for w, ps in sorted(workers.items())},
        "deadletters": dict(sorted(totals.rejected.items())),
        "deadletter_topic_messages": dead_end,
        "notes": notes,
        "group": None
        if group is None
        else {
            "state": group.state,
            "members": [
                {"member_id": m.member_id, "host": m.host, "partitions": m.partitions} for m in group.members
            ],
        },
    }


def with_recorded(group: GroupView, recorded: dict[str, list[str]]) -> GroupView:
    """The group with each member's partitions as its worker recorded them, where it did.

    A broker that names no agreed protocol (the embedded one) answers assignments empty:
    those are unknown, not "no partitions"."""
    members = []
    for m in group.members:
        held: tuple[str, ...] | None = m.partitions
        if m.member_id in recorded:
            held = tuple(recorded[m.member_id])
        elif not group.protocol and not held:
            held = None
        members.append(replace(m, partitions=held))
    return replace(group, members=tuple(members))


def status_text(st: dict[str, Any], now: float | None = None) -> str:
    """Human rendering of :func:`group_status`."""
    now = time.time() if now is None else now
    rate = st["events_per_second"]
    age = f"{now - st['last_flush']:.0f}s ago" if st["last_flush"] else "never"
    out = [f"PROBLEM {p}" for p in st.get("problems", [])]
    out += [
        f"lag: {st['lag']} messages"
        + (f"   throughput: {rate:,.0f} events/s" if rate is not None else "")
        + f"   last flush: {age}",
        f"counted: {st['events']} events in {st['flushes']} flushes, {st['docs']} document writes",
        "partitions:",
    ]
    if group := st.get("group"):
        held = [
            f"{m['member_id']} ({'?' if m['partitions'] is None else len(m['partitions'])} partitions)"
            for m in group["members"]
        ]
        out.insert(
            out.index("partitions:"),
            f"group: {group['state'] or '?'}, {len(held)} member(s): {', '.join(held) or 'none'}",
        )
    for p in st["partitions"]:
        flushed = f"{now - p['last_flush']:.0f}s ago" if p["last_flush"] else "never"
        out.append(
            f"  {p['topic']}[{p['partition']}] end={p['end']} mongo={p['mongo_position']} "
            f"kafka={p['kafka_committed']} lag={p['lag']} events={p['events']} "
            f"last writer={p['worker']} ({flushed}"
            + (f", {p['worker_rss_mb']} MB resident" if p.get("worker_rss_mb") else "")
            + ")"
            + (" DIVERGED" if p.get("diverged") else "")
        )
    dl = st["deadletters"]
    out.append(f"dead letters: {sum(dl.values())} counted, {st['deadletter_topic_messages']} on the topic")
    for reason, n in dl.items():
        out.append(f"  {reason}: {n}")
    out += st.get("notes", [])
    return "\n".join(out)
