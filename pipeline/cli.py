"""The ``preagg`` command line: services, produce, worker, query, status, demo."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from pipeline.settings import Settings, SettingsError

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

_REL = re.compile(r"^now(?:([+-])(\d+)([smhdw]))?$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_time(text: str, now: datetime | None = None) -> datetime:
    """``now``, ``now-60m``, ``now-2d``, an ISO date or datetime (UTC unless an offset is given)."""
    now = now or datetime.now(UTC)
    m = _REL.match(text.strip())
    if m:
        sign, n, unit = m.groups()
        delta = timedelta(**{_UNITS[unit]: int(n)}) if n else timedelta()
        return now + delta if sign == "+" else now - delta
    dt = datetime.fromisoformat(text)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt


def _settings(resolve: bool = True) -> Settings:
    from pipeline.services import resolve as resolve_urls

    s = Settings.from_env()
    return resolve_urls(s) if resolve else s


# -- services -----------------------------------------------------------------


def cmd_services(args: argparse.Namespace) -> int:
    from pipeline.services.embedded import EmbeddedServices, read_state, stop_pids

    s = Settings.from_env()
    state = read_state(s.home)
    if args.action == "up":
        if state:
            print(f"already running: kafka {state['kafka_url']}  mongodb {state['mongo_url']}")
            return 0
        svc = EmbeddedServices(s.home, persistent=True)
        ep = svc.start()
        path = svc.write_state()
        print(f"kafka   {ep.kafka_url}\nmongodb {ep.mongo_url}\nstate   {path}\nlogs    {s.home / 'logs'}")
        print("other preagg commands in this directory use them; `preagg services down` stops them")
        return 0
    if args.action == "status":
        if not state:
            print(f"no embedded services running under {s.home}")
            return 1
        print(json.dumps(state, indent=2))
        return 0
    if not state:
        print("no embedded services running")
        return 0
    stop_pids(list(state["pids"].values()))
    (s.home / "services.json").unlink(missing_ok=True)
    print("stopped")
    return 0


# -- produce ------------------------------------------------------------------


def cmd_produce(args: argparse.Namespace) -> int:
    from pipeline.ingest.hits import HitDecoder
    from pipeline.ingest.impressions import ImpressionDecoder, ListenDecoder, RelationDecoder
    from pipeline.ingest.readers import Record, read_hits, read_jsonl, read_lastfm, read_movielens
    from pipeline.producer import produce_records, with_progress

    s = _settings()
    formats = {
        "hits": ("jsonl", "clf"),
        "impressions": ("jsonl",),
        "relations": ("jsonl", "movielens"),
        "listens": ("jsonl", "lastfm"),
    }
    fmt = args.format or "jsonl"
    if fmt not in formats[args.kind]:
        print(f"{args.kind} read {' or '.join(formats[args.kind])}, not {fmt}", file=sys.stderr)
        return 2
    records: Iterator[Record]
    if args.kind == "hits":
        decoder = HitDecoder.for_settings(s)
        records, topic = read_hits(args.files, fmt, decoder, args.site, args.props), s.hits_topic
    elif args.kind == "impressions":
        imp = ImpressionDecoder(s.max_event_bytes, s.future_skew)
        records, topic = read_jsonl(args.files, imp.decode), s.impressions_topic
    elif args.kind == "listens":
        lis = ListenDecoder(s.max_event_bytes, s.future_skew)
        records = read_lastfm(args.files) if fmt == "lastfm" else read_jsonl(args.files, lis.decode)
        topic = s.listens_topic
    elif fmt == "movielens":
        records, topic = read_movielens(args.files), s.relations_topic
    else:
        records, topic = read_jsonl(args.files, RelationDecoder(s.max_event_bytes).decode), s.relations_topic
    summary = asyncio.run(produce_records(s, topic, with_progress(records), args.pack))
    print(summary.text())
    return 0


T = TypeVar("T")
Db: TypeAlias = "AsyncDatabase[dict[str, Any]]"


def on_db(s: Settings, query: Callable[[Db], Awaitable[T]]) -> T:
    """Run one async query against the configured database, then close the client."""
    from pipeline.sinks.mongo import mongo_client

    async def run() -> T:
        client = mongo_client(s.mongo_url or "")
        try:
            return await query(client[s.db])
        finally:
            await client.close()

    return asyncio.run(run())


# -- worker -------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    from pipeline.worker.app import run_worker

    run_worker(_settings(), loglevel=args.loglevel)
    return 0


# -- query --------------------------------------------------------------------


def cmd_query(args: argparse.Namespace) -> int:
    from pipeline.query.hits import hits_series
    from pipeline.query.render import as_csv, as_json, as_table, plot_png, sparkline
    from pipeline.schemas import hits_fields

    s = _settings()
    start, end = parse_time(args.start), parse_time(args.end)
    if end < start:
        print("--to is before --from", file=sys.stderr)
        return 2

    async def run(db: Db) -> list[tuple[datetime, int]]:
        return await hits_series(db, args.site, args.page, start, end, args.by, hits_fields(s.schema))

    series = on_db(s, run)
    if args.json:
        print(as_json(series))
    elif args.csv:
        print(as_csv(series), end="")
    else:
        print(as_table(series))
        print(f"total {sum(n for _, n in series)}  " + sparkline([n for _, n in series]))
    if args.plot:
        title = f"{args.site}{args.page or ' (all pages)'}: hits per {args.by} (UTC)"
        print(f"plot written to {plot_png(series, Path(args.plot), title)}", file=sys.stderr)
    return 0


def parse_id(text: str) -> int | str:
    """A user or item id from the command line: digits are an integer id, anything else a string."""
    return int(text) if text.isdigit() and len(text) < 10 else text


def _print_rows(rows: list[tuple[Any, Any]], as_json: bool, header: tuple[str, str]) -> None:
    if as_json:
        print(json.dumps([{header[0]: a, header[1]: b} for a, b in rows]))
        return
    print(f"{header[0]:>20}  {header[1]}")
    for a, b in rows:
        print(f"{a!s:>20}  {b}")


def cmd_query_impressions(args: argparse.Namespace) -> int:
    from pipeline.query.impressions import items_of_user, top_items, users_of_item

    s = _settings()

    async def run(db: Db) -> tuple[list[tuple[Any, int]], tuple[str, str]]:
        if args.user is not None:
            return await items_of_user(db, parse_id(args.user), args.limit, s.schema), ("item", "count")
        if args.item is not None:
            return await users_of_item(db, parse_id(args.item), args.limit, s.schema), ("user", "count")
        return await top_items(db, args.top, args.day, s.schema), ("item", "count")

    rows, header = on_db(s, run)
    _print_rows(rows, args.json, header)
    return 0


def cmd_query_related(args: argparse.Namespace) -> int:
    from pipeline.aggregate.relations import relation_sides
    from pipeline.query.relations import related_items, related_users

    s = _settings()
    sides = relation_sides(s.relation_user_capacity, s.relation_item_capacity, s.relation_fpr, s.schema)

    async def run(db: Db) -> list[Any]:
        if args.user is not None:
            return await related_items(db, parse_id(args.user), sides)
        return await related_users(db, parse_id(args.item), sides)

    found = on_db(s, run)
    if args.json:
        print(json.dumps(found))
    else:
        print("\n".join(str(x) for x in found))
        print(
            f"{len(found)} found (Bloom filters: false positives possible, false negatives never)",
            file=sys.stderr,
        )
    return 0


def cmd_query_listens(args: argparse.Namespace) -> int:
    from pipeline.aggregate.bloom import BloomSpec
    from pipeline.query.listens import heard, top_tags

    s = _settings()
    spec = BloomSpec.for_capacity(s.listen_heard_capacity, s.listen_heard_fpr)

    async def run(db: Db) -> Any:
        if args.what == "heard":
            return await heard(
                db, parse_id(args.user), parse_id(args.tag), parse_id(args.song), spec, s.schema
            )
        today = datetime.fromisoformat(args.today).date() if args.today else None
        return await top_tags(db, parse_id(args.user), args.days, args.limit, today, s.schema)

    result = on_db(s, run)
    if args.what == "heard":
        print("yes" if result else "no")
        return 0
    rows = [(tag, round(n, 1)) for tag, n in result]
    _print_rows(rows, args.json, ("tag", "distinct_songs"))
    return 0


def cmd_query_props(args: argparse.Namespace) -> int:
    from pipeline.query.props import prop_counts
    from pipeline.schemas import hits_fields

    s = _settings()
    start: date = args.start
    end: date = args.end or start

    async def run(db: Db) -> Any:
        return await prop_counts(db, args.site, args.page, start, end, args.name, hits_fields(s.schema))

    rows = on_db(s, run)
    if args.json:
        print(json.dumps([{"name": r.name, "value": r.value, "count": r.count} for r in rows]))
        return 0
    width = max([len(r.name) for r in rows] + [4])
    print(f"{'name':<{width}}  {'count':>9}  value")
    for r in rows:
        print(f"{r.name:<{width}}  {r.count:>9}  {r.value}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from pipeline.schemas import check_mode, schema_table

    mode = check_mode(args.mode or Settings.from_env().schema)
    rows = schema_table(mode)
    if args.json:
        print(json.dumps({"mode": mode, "fields": rows}, indent=2))
        return 0
    print(f"stored field names ({mode}); queries and CLI output always use the readable names")
    last = None
    for r in rows:
        if r["collection"] != last:
            print(f"\n{r['collection']}")
            last = r["collection"]
        print(f"  {r['stored']:<6} {r['readable']:<12} {r['meaning']}")
    print("\npreagg_offsets and preagg_meta keep readable names in both modes (one small document each).")
    return 0


# -- status -------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from pipeline.ops.status import group_status, status_text

    s = _settings()

    async def run(db: Db) -> dict[str, Any]:
        return await group_status(s, db, args.interval)

    st = on_db(s, run)
    print(json.dumps(st, indent=2, default=str) if args.json else status_text(st))
    return 0


# -- demo ---------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from pipeline.demo.run import run_demo

    return run_demo(
        Settings.from_env(), args.events, args.file or [], args.format, args.site, Path(args.chart)
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``preagg``."""
    p = argparse.ArgumentParser(prog="preagg", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("services", help="start/inspect/stop the embedded Kafka and MongoDB")
    sp.add_argument("action", choices=["up", "status", "down"])
    sp.set_defaults(func=cmd_services)

    pp = sub.add_parser("produce", help="send events from files (or - for stdin) to Kafka")
    pp.add_argument("kind", choices=["hits", "impressions", "relations", "listens"])
    pp.add_argument("files", nargs="+")
    pp.add_argument(
        "--format",
        choices=["jsonl", "clf", "movielens", "lastfm"],
        help="jsonl (default); clf for hits (access logs); movielens u.data for relations (rating >= 4)",
    )
    pp.add_argument("--site", help="site of clf lines (default: file name); fills missing sites")
    pp.add_argument("--pack", type=int, help="events per Kafka message (default PREAGG_PACK_SIZE=100)")
    pp.add_argument(
        "--props",
        action="store_true",
        help="clf hits: add status, method, referrer host and user-agent family as custom properties",
    )
    pp.set_defaults(func=cmd_produce)

    wp = sub.add_parser("worker", help="run a Faust worker (replicas share partitions)")
    wp.add_argument("--loglevel", default="info")
    wp.set_defaults(func=cmd_worker)

    qp = sub.add_parser("query", help="query pre-aggregated documents")
    qsub = qp.add_subparsers(dest="what", required=True)
    qh = qsub.add_parser("hits", help="zero-filled hit series of a site or page")
    qh.add_argument("--site", required=True)
    qh.add_argument("--page", help="one page (default: all pages of the site)")
    qh.add_argument("--from", dest="start", default="now-60m", help="ISO time or now-60m (default)")
    qh.add_argument("--to", dest="end", default="now", help="ISO time or now (default)")
    qh.add_argument("--by", choices=["minute", "hour", "day", "month"], default="minute")
    fmt = qh.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    qh.add_argument("--plot", metavar="FILE.png")
    qh.set_defaults(func=cmd_query)
    qi = qsub.add_parser("impressions", help="impression counts by user, by item, or the top items")
    who = qi.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", help="items this user has seen, with counts")
    who.add_argument("--item", help="users who saw this item, with counts")
    who.add_argument("--top", type=int, metavar="N", help="the N most viewed items")
    qi.add_argument("--day", help="with --top: that UTC day (YYYY-MM-DD)")
    qi.add_argument("--limit", type=int, default=0, help="at most this many rows (0: all)")
    qi.add_argument("--json", action="store_true")
    qi.set_defaults(func=cmd_query_impressions)
    qr = qsub.add_parser("related", help="relations through the Bloom filters (server side)")
    side = qr.add_mutually_exclusive_group(required=True)
    side.add_argument("--user", help="items whose filter contains this user")
    side.add_argument("--item", help="users whose filter contains this item")
    qr.add_argument("--json", action="store_true")
    qr.set_defaults(func=cmd_query_related)
    qt = qsub.add_parser("top-tags", help="a user's tags by estimated distinct songs over the last N days")
    qt.add_argument("--user", required=True)
    qt.add_argument("--days", type=int, default=7, choices=range(1, 8), metavar="N (1-7)")
    qt.add_argument("--limit", type=int, default=10)
    qt.add_argument("--today", help="the last day of the window (YYYY-MM-DD, default: today UTC)")
    qt.add_argument("--json", action="store_true")
    qt.set_defaults(func=cmd_query_listens)
    qd = qsub.add_parser("heard", help="has this user heard this song under this tag (Bloom filter)")
    qd.add_argument("--user", required=True)
    qd.add_argument("--tag", required=True)
    qd.add_argument("--song", required=True)
    qd.set_defaults(func=cmd_query_listens)
    qp2 = qsub.add_parser("props", help="custom property counts of a site or page over a range of days")
    qp2.add_argument("--site", required=True)
    qp2.add_argument("--page", help="one page (default: all pages of the site)")
    qp2.add_argument(
        "--from", dest="start", type=date.fromisoformat, required=True, help="first UTC day, YYYY-MM-DD"
    )
    qp2.add_argument(
        "--to", dest="end", type=date.fromisoformat, help="last UTC day, YYYY-MM-DD (default: --from)"
    )
    qp2.add_argument("--name", help="one property (default: all)")
    qp2.add_argument("--json", action="store_true")
    qp2.set_defaults(func=cmd_query_props)

    sc = sub.add_parser("schema", help="the stored field names of every collection, and what they mean")
    sc.add_argument("--mode", choices=["compact", "readable"], help="default: PREAGG_SCHEMA (compact)")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_schema)

    st = sub.add_parser("status", help="lag, throughput and dead letters of the whole worker group")
    st.add_argument(
        "--interval",
        type=float,
        default=2.0,
        help="seconds between the two ledger reads that measure throughput (0: skip)",
    )
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    dp = sub.add_parser("demo", help="run everything on the embedded services and summarise")
    dp.add_argument("--events", type=int, default=60_000)
    dp.add_argument("--file", action="append", help="replay this file instead of generated traffic")
    dp.add_argument("--format", choices=["jsonl", "clf"], default="jsonl")
    dp.add_argument("--site")
    dp.add_argument("--chart", default="preagg-demo.png", help="PNG of the busiest page")
    dp.set_defaults(func=cmd_demo)
    return p


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``preagg``."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except SettingsError as exc:
        print(f"preagg: {exc}", file=sys.stderr)
        code = 2
    sys.exit(code)
