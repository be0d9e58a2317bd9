"""The Quix Streams job of ``make bench-peers``: hits per (site, page, minute) into daily/monthly documents.

Run by :mod:`benchmarks.peers` in a virtual environment of its own (Quix Streams is
no dependency of preagg), with only Quix Streams and PyMongo; it imports nothing of
preagg. The job is Quix's idiomatic one: a tumbling one-minute window counted per
message key (``site\\0page``) on the event's ``ts``, emitted when final (closed
per partition by a later timestamp: the benchmark sends a tick after the last event),
into a :class:`BatchingSink` writing ``$inc`` upserts of the same documents preagg
writes (ids, compact field names, the site and page as the filter's equalities).
Keyless events (``--keyless``) are first repartitioned by page (``group_by``, Quix's way
to count by a field), with a grace period as long as the backlog's event time: the
repartitioned events of a page come from every input partition, each read at its own
pace, so they are not in time order.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pymongo
from quixstreams import Application
from quixstreams.sinks import BatchingSink, SinkBatch

#: The site of the tick messages that close the last windows (never written).
TICK_SITE = "__tick__"


def escape_part(text: str) -> str:
    """As preagg's ``pipeline.core.ids.escape_part``."""
    return text.replace("%", "%25").replace("/", "%2F")


Docs = dict[str, tuple[dict[str, Any], dict[str, int]]]


def counters(docs: Docs, f: dict[str, str], doc_id: str, site: str, page: str) -> dict[str, int]:
    """The ``$inc`` counters of one document of the batch (its site and page as the filter's equalities)."""
    meta = {f"{f['metadata']}.{f['site']}": site, f"{f['metadata']}.{f['page']}": page}
    return docs.setdefault(doc_id, (meta, defaultdict(int)))[1]


class MongoIncSink(BatchingSink):  # type: ignore[misc]
    """``$inc`` upserts of the daily and monthly documents of a batch of final windows."""

    def __init__(self, url: str, db: str, fields: dict[str, Any]) -> None:
        super().__init__()
        self.client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(url)
        self.db = self.client[db]
        self.f = fields

    def write(self, batch: SinkBatch) -> None:
        fd, fm = self.f["daily"], self.f["monthly"]
        daily: Docs = {}
        monthly: Docs = {}
        events = 0
        for item in batch:
            key = item.key.decode() if isinstance(item.key, bytes) else str(item.key)
            site, _, page = key.partition("\x00")
            if site == TICK_SITE:
                continue
            start = datetime.fromtimestamp(item.value["start"] / 1000, UTC)
            n = int(item.value["value"])
            events += n
            day = start.date()
            inc = counters(daily, fd, f"{day:%Y%m%d}/{escape_part(site)}/{page}", site, page)
            inc[fd["total"]] += n
            inc[f"{fd['hourly']}.{start.hour}"] += n
            inc[f"{fd['minute']}.{start.hour}.{start.minute}"] += n
            minc = counters(monthly, fm, f"{day:%Y%m}/{escape_part(site)}/{page}", site, page)
            minc[fm["total"]] += n
            minc[f"{fm['daily']}.{day.day}"] += n
        written, began = 0, time.perf_counter()
        for coll, docs, date_path, digits in (
            (fd["collection"], daily, f"{fd['metadata']}.{fd['date']}", 8),
            (fm["collection"], monthly, f"{fm['metadata']}.{fm['date']}", 6),
        ):
            ops = [
                pymongo.UpdateOne(
                    {"_id": i, **meta},
                    {
                        "$inc": dict(inc),
                        "$setOnInsert": {date_path: datetime.strptime((i[:digits] + "01")[:8], "%Y%m%d")},
                    },
                    upsert=True,
                )
                for i, (meta, inc) in docs.items()
            ]
            if ops:
                self.db[coll].bulk_write(ops, ordered=False)
                written += len(ops)
        if written:
            took = time.perf_counter() - began
            figures = {"upserts": written, "calls": 1, "write_s": took, "events": events}
            self.db["peer_stats"].update_one({"_id": "quix"}, {"$inc": figures}, upsert=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--mongo", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--guarantee", choices=["at-least-once", "exactly-once"], default="at-least-once")
    ap.add_argument("--fields", required=True, help="JSON: preagg's compact field names (hits_fields)")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--keyless", action="store_true", help="repartition by site and page first")
    ap.add_argument("--grace-minutes", type=float, default=0.0, help="with --keyless: windows' grace period")
    args = ap.parse_args()
    app = Application(
        broker_address=args.broker,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee=args.guarantee,
        state_dir=args.state_dir,
        # The consumer timeouts preagg's workers use on the embedded broker.
        consumer_extra_config={"session.timeout.ms": 10000, "heartbeat.interval.ms": 3000},
    )

    def event_time(value: Any, headers: Any, timestamp: float, timestamp_type: Any) -> int:
        return int(float(value["ts"]) * 1000)

    topic = app.topic(
        args.topic, key_deserializer="bytes", value_deserializer="json", timestamp_extractor=event_time
    )
    sdf = app.dataframe(topic)
    grace = timedelta(0)
    if args.keyless:
        sdf = sdf.group_by(lambda v: f"{v['site']}\x00{v['page']}", name="page")
        grace = timedelta(minutes=args.grace_minutes)
    sdf = (
        sdf.tumbling_window(timedelta(minutes=1), grace_ms=grace).count().final(closing_strategy="partition")
    )
    sdf.sink(MongoIncSink(args.mongo, args.db, json.loads(args.fields)))
    app.run()


if __name__ == "__main__":
    main()
