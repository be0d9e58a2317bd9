"""The ``preagg`` command line: services, produce, worker, query, schema, status, demo.

Each stream kind adds its own ``produce`` formats and ``query`` subcommands (pipeline/kinds/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.cli_params import Commands, add_command
from pipeline.core.errors import PreaggError
from pipeline.core.parse import UsageError, parse_time
from pipeline.files import SEND_AS, Accepted, Record, shipped
from pipeline.kinds import stream_topics
from pipeline.services.embedded import STATE_FILE
from pipeline.services.urls import command_settings
from pipeline.settings import Settings
from pipeline.store.command import on_db

#: What ``preagg --help`` says (plain text: the module docstring is for readers of the code).
DESCRIPTION = (
    "Pre-aggregate event streams from Kafka into MongoDB documents, exactly once, and query them. "
    "Start the embedded Kafka and MongoDB with `preagg services up` (or point PREAGG_KAFKA_URL and "
    "PREAGG_MONGO_URL at yours), send events with `preagg produce`, count them with `preagg worker`, "
    "read them with `preagg query`, `preagg serve` or any MongoDB client. Each stream kind (hits, "
    "listens, impressions, relations) adds its own produce formats and query commands. "
    "Exit status: 0 done, 2 a wrong command line, setting or input, 3 another operator action "
    "holds the lease, 75 restart from MongoDB's positions, 1 anything else."
)

if TYPE_CHECKING:
    from pipeline.store.client import Db

# -- services -----------------------------------------------------------------


def cmd_services(args: argparse.Namespace) -> int:
    from pipeline.services.embedded import EmbeddedServices, read_state, stop_pids

    if args.action == "url":  # PREAGG_*_URL, else this directory's embedded services
        resolved = command_settings()
        print(resolved.mongo_url if args.which == "mongodb" else resolved.kafka_url)
        return 0
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
        rebased = _rebase_embedded(ep.mongo_url, s.db)
        if rebased:
            print(
                f"the embedded broker starts empty (it keeps topics in memory): {rebased} partition "
                "ledgers now start at offset 0 of the new topics; the counts in the store are kept"
            )
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
    (s.home / STATE_FILE).unlink(missing_ok=True)
    print(
        f"stopped. Kept: the store's documents (counts, ledgers, dead-letter records) under {s.home}. "
        "Lost: the broker's topics (kept in memory), with any event sent and not counted yet; "
        "`preagg services up` starts them empty and moves the ledgers to the new topics"
    )
    return 0


def _rebase_embedded(mongo_url: str, db: str) -> int:
    """After the embedded broker (re)starts empty: the ledgers of ``db`` moved to its new topics."""
    import asyncio

    from pipeline.ops.positions import rebase_on_empty_broker
    from pipeline.store.client import mongo_client

    async def run() -> int:
        client = mongo_client(mongo_url)
        try:
            return await rebase_on_empty_broker(
                client[db], "preagg services up: the embedded broker started empty"
            )
        finally:
            await client.close()

    return asyncio.run(run())


# -- produce ------------------------------------------------------------------


def cmd_produce(args: argparse.Namespace) -> int:
    try:
        return _produce(args)
    except RuntimeError as exc:  # a missing topic, said in one line
        print(f"preagg produce: {exc}", file=sys.stderr)
        return 2


def _produce(args: argparse.Namespace) -> int:
    from pipeline.kafka.producer import produce_records, with_progress
    from pipeline.kinds import kind_in

    s = command_settings()
    kind = kind_in(s.kinds, args.kind)
    ks = s.of(kind)
    pack = args.pack
    records: Iterable[Record]
    if args.send_as != "event":
        records = shipped(args.files, args.send_as, args.host or socket.gethostname(), time.time)
        pack = pack or 1  # shippers send one line per message
    else:
        records = kind.records(args.files, args.format or kind.formats[0], s, ks, args)
        if args.keyless:
            records = (Accepted(r.raw, None) if isinstance(r, Accepted) else r for r in records)
    if getattr(args, "site", "") is None and (args.format or kind.formats[0]) == "clf":
        names = ", ".join(sorted({Path(f).stem for f in args.files}))
        print(f"preagg produce: no --site: the site is the file name ({names})", file=sys.stderr)
    summary = asyncio.run(produce_records(s, ks.topic, with_progress(records), pack))
    print(summary.text())
    return _rejected_verdict(summary.sent, sum(summary.refused.values()), args)


#: An access-log line (common or combined log format): what forgetting ``--format clf`` looks like.
_ACCESS_LOG = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "')


def _rejected_verdict(sent: int, rejected: int, args: argparse.Namespace) -> int:
    """Exit 1 when more than ``--max-rejected`` of the lines were refused, with a hint if one fits."""
    total = sent + rejected
    if not total or rejected / total <= args.max_rejected:
        return 0
    hint = ""
    first = _first_line(args.files)
    if args.format is None and first is not None and _ACCESS_LOG.match(first):
        hint = " The file looks like an access log: add --format clf."
    print(
        f"preagg produce: {rejected} of {total} lines refused, more than --max-rejected "
        f"{args.max_rejected:g}.{hint}",
        file=sys.stderr,
    )
    return 1


def _first_line(files: list[str]) -> str | None:
    """The first non-empty line of the first file (not stdin), for a format hint."""
    if not files or files[0] == "-":
        return None
    try:
        with open(files[0], encoding="utf-8", errors="replace") as f:
            return next((line for line in f if line.strip()), None)
    except OSError:
        return None


# -- worker -------------------------------------------------------------------


def cmd_worker(args: argparse.Namespace) -> int:
    from pipeline.kinds import stream_topics
    from pipeline.ops.setup import worker_setup
    from pipeline.store.worker_store import WorkerStore, worker_ready
    from pipeline.worker.app import run_worker
    from pipeline.worker.exits import restart_in_place

    if not args.no_restart:  # the same command again, in this process, after an exit 75
        restart_in_place(["-m", "pipeline", "worker", "--loglevel", args.loglevel])
    s = command_settings()
    # The worker on MongoDB: its checks before joining, and its store (made with its fault hook).
    run_worker(
        s,
        lambda: worker_ready(s, worker_setup, stream_topics(s)),
        lambda fault: WorkerStore(s, fault),
        loglevel=args.loglevel,
    )
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from pipeline.core.fields import STORE_SCHEMAS, check_mode, schema_table
    from pipeline.kinds import load_kinds

    env = Settings.from_env()
    mode = check_mode(args.mode or env.schema)
    kinds = load_kinds(env.kinds)
    rows = schema_table([k.folder for k in kinds] + [STORE_SCHEMAS], mode)
    views = [v for k in kinds for v in k.views(mode)]
    if args.json_schema:
        return _print_json_schema(args.json_schema, mode, kinds, views)
    if args.json:
        listed = [
            {
                "view": v.name,
                "reads": v.source,
                "about": v.about,
                "fields": [{"name": n, "meaning": a} for n, _, a in v.fields],
            }
            for v in views
        ]
        print(json.dumps({"mode": mode, "fields": rows, "views": listed}, indent=2))
        return 0
    print(
        f"stored field names in {mode} mode ({'--mode' if args.mode else 'PREAGG_SCHEMA'}) -> readable "
        "name: queries, CLI output and the views always use the readable names"
    )
    last = None
    for r in rows:
        if r["collection"] != last:
            print(f"\n{r['collection']}")
            last = r["collection"]
        print(f"  {r['stored']:<6} -> {r['readable']:<16} {r['meaning']}")
    print("\npreagg_offsets and preagg_meta keep readable names in both modes (one small document each).")
    print(
        "_a, in every document a flush writes: idempotency marks (per source partition, the last flush "
        "applied; docs/exactly-once.md), bookkeeping that never counts"
    )
    print("\nviews (read-only, for analysts: docs/analysts.md)")
    for v in views:
        print(f"\n{v.name}  ({v.about}; reads {v.source})")
        for name, _, about in v.fields:
            print(f"  {name:<16} {about}")
    return 0


def _print_json_schema(name: str, mode: str, kinds: list[Any], views: list[Any]) -> int:
    """One document kind's (by collection) or view's JSON Schema in the deployment's mode."""
    from pipeline.core.doc_schema import document_schema, view_schema
    from pipeline.core.fields import STORE_SCHEMAS, check_mode, documents

    for folder in [k.folder for k in kinds] + [STORE_SCHEMAS]:
        for doc, spec in documents(folder).items():
            if spec["collection"] == name:
                print(json.dumps(document_schema(folder, doc, check_mode(mode)), indent=2))
                return 0
    for v in views:
        if v.name == name:
            print(json.dumps(view_schema(v), indent=2))
            return 0
    raise UsageError(f"--json-schema {name}: no such collection or view (`preagg schema` lists them)")


def cmd_mongosh(args: argparse.Namespace) -> int:
    from pipeline.ops.shell import mongosh_argv

    s = command_settings()
    argv = mongosh_argv(s.mongo_url or "", s.db, list(args.args))
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 0  # never reached: the shell replaces this process


# -- status -------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    from pipeline.ops.status import group_status, status_text

    s = command_settings()

    async def run(db: Db) -> dict[str, Any]:
        return await group_status(s, db, args.interval)

    st = on_db(s, run, primary_reads=True)
    print(json.dumps(st, indent=2, default=str) if args.json else status_text(st))
    return 0


def cmd_deadletters(args: argparse.Namespace) -> int:
    from pipeline.ops.deadletters import replay
    from pipeline.ops.lease import LeaseHeld
    from pipeline.ops.replay_recovery import ReadBackFailed
    from pipeline.worker.faults import fault_hook

    s = command_settings()
    since = parse_time(args.since).timestamp() if args.since else None
    dry = args.action == "show" or args.dry_run

    async def run(db: Db) -> Any:
        return await replay(s, db, args.reason, since, args.topic, dry_run=dry, fault=fault_hook(s.fault))

    try:
        out = on_db(s, run, primary_reads=True)
    except ReadBackFailed as exc:  # a replay cut short could not be checked: sending now could count twice
        print(f"preagg deadletters {args.action}: {exc}; run it again", file=sys.stderr)
        return exc.exit_code
    except LeaseHeld as exc:  # two replays at once would send events twice or drop live claims
        print(f"preagg deadletters {args.action}: {exc}", file=sys.stderr)
        return exc.exit_code
    others = ", ".join(f"{r} {n}" for r, n in sorted(out.by_reason.items())) or "none"
    print(f"read {out.read} dead letters not yet replayed for {args.reason!r} ({others})")
    if out.already_sent:
        print(
            f"{out.already_sent} {args.reason} events had gone before the last replay was cut short:"
            " not sent again"
        )
    if out.duplicates:
        print(f"{out.duplicates} copies of dead letters already replayed (same source event): not sent again")
    verb = "would send" if dry else "sent"
    for topic, n in sorted(out.sent.items()):
        print(f"{verb} {n} {args.reason} events back to {topic}")
    if not out.sent:
        print(f"nothing to send: no {args.reason} dead letters" + (" since then" if since else ""))
    for rec in out.examples:
        print(f"  {rec.get('topic')}[{rec.get('partition')}]@{rec.get('offset')}: {rec.get('detail')}")
    return 0


def cmd_setup(args: argparse.Namespace) -> int:
    from pipeline.ops.setup import NotSetUp, missing, setup
    from pipeline.store.client import mongo_client, reach

    s = command_settings()

    async def run() -> list[str]:
        client = mongo_client(s.mongo_url or "", timeout=s.mongo_timeout)
        try:
            await reach(client, s.connect_timeout)
            return await (missing(s, client) if args.check else setup(s, client))
        finally:
            await client.close()

    try:
        lines = asyncio.run(run())
    except NotSetUp as exc:
        print(f"preagg setup: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.check:
        print("\n".join(f"missing: {x}" for x in lines) or "set up: nothing missing")
        return 1 if lines else 0
    print("\n".join(lines) or "already set up: nothing to change")
    return 0


def cmd_positions(args: argparse.Namespace) -> int:
    from pipeline.ops.positions import apply, follow_in_kafka, show

    s = command_settings()
    if args.action == "adopt":
        return _adopt(s, args)
    if not args.topic:
        print(f"{args.action} needs --topic", file=sys.stderr)
        return 2
    if args.action == "acknowledge":
        return _acknowledge(s, args)
    if args.action == "rebuild":
        return _rebuild(s, args)
    to = args.to if args.action == "reset" else None
    if args.action == "reset" and to is None:
        print("reset needs --to earliest|latest|OFFSET", file=sys.stderr)
        return 2

    kafka = ""

    async def run(db: Db) -> Any:
        nonlocal kafka
        rows = await show(s, db, args.topic, args.partition, to)
        if args.apply and to is not None:
            await apply(s, db, rows)
            kafka = await follow_in_kafka(
                s, {(r.topic, r.partition): r.new_next for r in rows if r.new_next is not None}
            )
        return rows

    rows = _on_ledgers(s, run)
    if not rows:
        print(f"topic {args.topic!r} has no partitions in Kafka", file=sys.stderr)
        return 1
    print(f"group {s.group_id}, topic {args.topic}")
    for r in rows:
        print("  " + r.text())
    if to is not None:
        print("applied: the workers restart from these positions" if args.apply else "dry run: add --apply")
    if kafka:
        print(kafka)
    return 0


def _rebuild(s: Settings, args: argparse.Namespace) -> int:
    """``preagg positions rebuild``: ledgers rebuilt from the marks their documents hold."""
    from pipeline.ops import ledger_rebuild
    from pipeline.ops.positions import follow_in_kafka

    kafka = ""

    async def run(db: Db) -> Any:
        nonlocal kafka
        rows = await ledger_rebuild.plan(s, db, args.topic, args.partition)
        if args.apply:
            rows = await ledger_rebuild.apply(s, db, rows)
            done = ledger_rebuild.kafka_positions(rows)
            kafka = await follow_in_kafka(s, done) if done else ""
        return rows

    rows = _on_ledgers(s, run)
    if not rows:
        print(f"no document holds a mark of {args.topic}: nothing to rebuild")
        return 0
    print(f"group {s.group_id}, topic {args.topic}")
    for r in rows:
        print("  " + r.text())
    refused = [r for r in rows if r.refused]
    if args.apply:
        print("applied: the workers holding these partitions restart from the rebuilt ledgers")
    else:
        print("dry run: add --apply")
    if kafka:
        print(kafka)
    return 1 if refused else 0


def _acknowledge(s: Settings, args: argparse.Namespace) -> int:
    """``preagg positions acknowledge``: the operator has accounted for offsets lost before counting."""
    from pipeline.ops.positions import acknowledge

    async def run(db: Db) -> Any:
        return await acknowledge(s, db, args.topic, args.partition)

    found = _on_ledgers(s, run)
    if not found:
        print(f"no ledger of {args.topic} records offsets lost before they were counted")
        return 0
    for d in found:
        lost = d["lost"]
        print(
            f"acknowledged: {d['topic']}[{d['partition']}] offsets "
            f"{lost.get('from')}..{int(lost.get('to', 0)) - 1} lost before they were counted"
        )
    return 0


def _on_ledgers(s: Settings, run: Callable[[Db], Awaitable[Any]]) -> Any:
    """``run`` on the primary; an operation the ledgers refuse (``ValueError``) is one line, exit 2."""
    try:
        return on_db(s, run, primary_reads=True)
    except ValueError as exc:
        raise UsageError(f"positions: {exc}") from None


def _adopt(s: Settings, args: argparse.Namespace) -> int:
    """``preagg positions adopt --from-group G``: this group goes on from G's ledgers."""
    from pipeline.store.owners import adopt

    if not args.from_group:
        print("adopt needs --from-group GROUP (the group whose ledgers this one takes over)", file=sys.stderr)
        return 2
    topics = [args.topic] if args.topic else stream_topics(s)

    async def run(db: Db) -> Any:
        return await adopt(db, args.from_group, s.group_id, topics, args.apply)

    moved = _on_ledgers(s, run)
    if not moved:
        print(f"group {args.from_group!r} has no ledgers of {', '.join(topics)}", file=sys.stderr)
        return 1
    print(f"group {args.from_group} -> group {s.group_id}")
    for d in moved:
        print(f"  {d['topic']}[{d['partition']}] next={d.get('next')} events={d.get('events', 0)}")
    print(
        "applied: workers of this group go on from these positions; the old group's workers stop"
        if args.apply
        else "dry run: stop the old group's workers, then add --apply"
    )
    return 0


# -- serve --------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from pipeline.core.logs import configure
    from pipeline.kinds import stream_topics
    from pipeline.ops.group_metrics import GroupWatch
    from pipeline.serve.server import serve

    s = command_settings()
    logging.basicConfig(level=args.loglevel.upper())
    configure(logging.getLogger(), logging.getLogger().level, s.log_format)
    if args.port is not None:
        s = s.with_(serve_port=args.port)
    if args.bind is not None:
        s = s.with_(serve_bind=args.bind)

    def ready(url: str) -> None:
        print(f"dashboard {url}\nAPI       {url}api/hits?site=...  (OpenAPI: {url}openapi.json)", flush=True)
        print(f"grafana   {url}grafana (JSON API data source) and {url}grafana/hits (Infinity)", flush=True)

    asyncio.run(serve(s, ready, lambda db: GroupWatch(s, db, stream_topics(s))))
    return 0


# -- demo ---------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from pipeline.demo.run import run_demo

    return run_demo(
        Settings.from_env(),
        args.events,
        args.file or [],
        args.format,
        args.site,
        Path(args.chart),
        args.serve,
    )


#: ``preagg worker --help``: the settings an operator sets first (all: docs/design.md).
#: The settings ``preagg worker --help`` lists (their text is each field's comment: pipeline/settings_doc.py).
WORKER_SETTINGS = (
    "kafka_url",
    "mongo_url",
    "group_id",
    "kinds",
    "flush_interval",
    "backlog_flush_interval",
    "max_pending_keys",
    "web_port",
    "log_format",
)


def cmd_completion(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the completion script of this parser (every kind's commands included)."""
    from pipeline.completion import bash_script

    print(bash_script(parser), end="")
    return 0


def _worker_help() -> str:
    from pipeline.settings_doc import worker_help

    return worker_help(WORKER_SETTINGS)


def _lazy_epilog(parser: argparse.ArgumentParser, make: Callable[[], str]) -> None:
    """Compute ``parser``'s epilog only when its help is shown (every other command skips it)."""
    shown = parser.format_help

    def format_help() -> str:
        parser.epilog = make()
        return shown()

    parser.format_help = format_help  # type: ignore[method-assign]


class _Version(argparse.Action):
    """``preagg --version``: the installed distribution's version, read only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"preagg {version('preagg')}")
        except PackageNotFoundError:
            print("preagg (not installed: a source checkout)")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``preagg``: the kinds of ``PREAGG_KINDS`` add their own subcommands."""
    from pipeline.kinds import load_kinds

    p = argparse.ArgumentParser(prog="preagg", description=DESCRIPTION)
    p.add_argument("--version", action=_Version, nargs=0, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("services", help="start/inspect/stop the embedded Kafka and MongoDB")
    sp.add_argument("action", choices=["up", "status", "down", "url"])
    sp.add_argument(
        "which",
        nargs="?",
        choices=["mongodb", "kafka"],
        default="mongodb",
        help="url: which URL to print, the one every preagg command here uses (default mongodb)",
    )
    sp.set_defaults(func=cmd_services)

    cp = sub.add_parser("completion", help='shell completion: eval "$(preagg completion bash)"')
    cp.add_argument("shell", choices=["bash"], help="bash (zsh: autoload bashcompinit first)")
    cp.set_defaults(func=lambda a: cmd_completion(a, p))

    kinds = load_kinds(Settings.from_env().kinds)
    pp = sub.add_parser("produce", help="send events from files (or - for stdin) to Kafka")
    psub = pp.add_subparsers(dest="kind", required=True, metavar="KIND")
    for kind in kinds:
        kp = psub.add_parser(kind.name, help=kind.about)
        kp.add_argument("files", nargs="+")
        kp.add_argument("--format", choices=kind.formats, help=f"default: {kind.formats[0]}")
        kp.add_argument(
            "--pack",
            type=int,
            help="events per Kafka message (default PREAGG_PACK_SIZE=100; 1 with --as other than event)",
        )
        kp.add_argument(
            "--as",
            dest="send_as",
            choices=SEND_AS,
            default="event",
            help="send checked events (default), or each file line as is (line) or in a log shipper's "
            "envelope, unchecked and keyless, as that shipper would (set the topic's PREAGG_<KIND>_FORMAT)",
        )
        kp.add_argument("--keyless", action="store_true", help="send events without a partition key")
        kp.add_argument(
            "--max-rejected",
            type=float,
            default=0.5,
            help="exit 1 when more than this share of the lines is refused (default 0.5; 1 never)",
        )
        kp.add_argument("--host", help="host name in shipper envelopes (default: this machine's)")
        kind.add_produce_options(kp)
        kp.set_defaults(func=cmd_produce)

    wp = sub.add_parser(
        "worker",
        help="run a Faust worker (replicas share partitions)",
        epilog="",  # made from the settings' comments when the help is shown (settings_doc)
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _lazy_epilog(wp, _worker_help)
    wp.add_argument("--loglevel", default="info")
    wp.add_argument(
        "--no-restart",
        action="store_true",
        help="exit with status 75 when the worker must resume from MongoDB's positions (a supervisor "
        "restarts it) instead of restarting in place",
    )
    wp.set_defaults(func=cmd_worker)

    qp = sub.add_parser("query", help="query pre-aggregated documents")
    qsub = qp.add_subparsers(dest="what", required=True)
    queries = Commands(qsub)
    for kind in kinds:
        for qc in kind.query_commands():
            # the answer says what of this kind's topic waits to be counted
            add_command(queries, qc).set_defaults(pending_kind=kind.name)
    for kind in kinds:
        kind.add_commands(Commands(sub))

    sc = sub.add_parser("schema", help="the stored field names of every collection, and what they mean")
    sc.add_argument("--mode", choices=["compact", "readable"], help="default: PREAGG_SCHEMA (compact)")
    sc.add_argument("--json", action="store_true")
    sc.add_argument(
        "--json-schema",
        metavar="NAME",
        help="print the JSON Schema (MongoDB's $jsonSchema dialect) of one collection or view",
    )
    sc.set_defaults(func=cmd_schema)

    ms = sub.add_parser(
        "mongosh",
        help="the MongoDB shell on the deployment's database (its views: docs/analysts.md)",
        description="Runs mongosh connected to the database the workers write; arguments after it "
        "(--eval, --quiet, --json, a script) go to mongosh.",
    )
    ms.add_argument("args", nargs=argparse.REMAINDER, help="mongosh's own arguments")
    ms.set_defaults(func=cmd_mongosh)

    st = sub.add_parser("status", help="lag, throughput and dead letters of the whole worker group")
    st.add_argument(
        "--interval",
        type=float,
        default=2.0,
        help="seconds between the two ledger reads that measure throughput (0: skip)",
    )
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    dl = sub.add_parser("deadletters", help="the dead-letter topic: show by reason, replay what belongs")
    dl.add_argument("action", choices=["show", "replay"])
    dl.add_argument("--reason", required=True, help="late, schema, future, ... (as in preagg status)")
    dl.add_argument("--since", help="only those dead-lettered since: ISO time or now-2d")
    dl.add_argument("--topic", help="only those from this source topic")
    dl.add_argument("--dry-run", action="store_true", help="replay: count, send nothing")
    dl.set_defaults(func=cmd_deadletters)

    su = sub.add_parser("setup", help="create topics, collections, indexes (and shard keys) once; idempotent")
    su.add_argument("--check", action="store_true", help="only list what is missing (exit 1 if anything)")
    su.set_defaults(func=cmd_setup)

    pos = sub.add_parser(
        "positions",
        help="the ledgers' positions against Kafka's logs; reset them; adopt another group's; rebuild "
        "them from the documents' marks; acknowledge offsets lost before counting",
    )
    pos.add_argument("action", choices=["show", "reset", "adopt", "rebuild", "acknowledge"])
    pos.add_argument(
        "--topic",
        help="the topic (show/reset/rebuild/acknowledge: required; adopt: default every stream topic)",
    )
    pos.add_argument("--from-group", help="adopt: the consumer group whose ledgers this group takes over")
    pos.add_argument("--partition", type=int, help="one partition (default: all)")
    pos.add_argument("--to", help="reset: earliest, latest or an offset")
    pos.add_argument(
        "--apply", action="store_true", help="reset/adopt/rebuild: write the change (default: a dry run)"
    )
    pos.set_defaults(func=cmd_positions)

    sv = sub.add_parser("serve", help="the read-only query API, OpenAPI document and dashboard over HTTP")
    sv.add_argument("--port", type=int, help="default PREAGG_SERVE_PORT (8900); 0: any free port")
    sv.add_argument("--bind", help="default PREAGG_SERVE_BIND (127.0.0.1)")
    sv.add_argument("--loglevel", default="warning", help="info logs every request")
    sv.set_defaults(func=cmd_serve)

    dp = sub.add_parser("demo", help="run everything on the embedded services and summarise")
    dp.add_argument("--events", type=int, default=60_000)
    dp.add_argument("--file", action="append", help="replay this file instead of generated traffic")
    dp.add_argument("--format", choices=["jsonl", "clf"], default="jsonl")
    dp.add_argument("--site")
    dp.add_argument("--chart", default="preagg-demo.png", help="PNG of the busiest page")
    dp.add_argument(
        "--serve",
        action="store_true",
        help="then keep it all running with live traffic and the dashboard (make dashboard) until Ctrl-C",
    )
    dp.set_defaults(func=cmd_demo)
    return p


def unreachable(exc: BaseException, s: Settings) -> str | None:
    """One line for a store or broker that did not answer (``None``: ``exc`` is something else).

    PyMongo's and aiokafka's tracebacks run to 40-90 lines; the operator needs the URL
    (password hidden) and what to check.
    """
    from pymongo.errors import ConnectionFailure

    from pipeline.settings import redact_url

    if isinstance(exc, ConnectionFailure):
        where = redact_url(s.mongo_url) if s.mongo_url else "the embedded store (preagg services up)"
        first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        return (
            f"MongoDB at {where} did not answer within {s.connect_timeout:g}s ({first}); "
            "check that it runs and PREAGG_MONGO_URL (and PREAGG_CONNECT_TIMEOUT)"
        )
    from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

    if isinstance(exc, KafkaConnectionError | KafkaTimeoutError):
        where = s.kafka_url or "the embedded broker (preagg services up)"
        return f"Kafka at {where} did not answer ({exc}); check that it runs and PREAGG_KAFKA_URL"
    return None


def look_pending(kind: str) -> tuple[Any, str | None]:
    """Before a query: what of its kind's topic waits to be counted, or why that cannot be told
    (said after the answer, which stands; a store that does not answer is the query's to say)."""
    from pipeline.ops.pending import look_once
    from pipeline.services.urls import command_settings
    from pipeline.store.command import on_db

    s = command_settings()
    topic = s.topic(kind)
    try:
        return on_db(s, lambda db: look_once(s, db, topic)), None
    except Exception as exc:
        return None, f"preagg: cannot tell whether events of {topic} wait to be counted ({exc})"


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line as ``main`` runs it: ``preagg mongosh ...`` passes every later argument
    to the shell, in order (argparse would take its options as its own)."""
    if argv[:1] == ["mongosh"] and argv[1:2] not in (["-h"], ["--help"]):
        return argparse.Namespace(func=cmd_mongosh, args=argv[1:])
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``preagg``: ordinary mistakes are one line and exit 2, never a traceback."""
    # A one-shot command says in one line of its own what failed (``unreachable`` below); the
    # Kafka client's own "Unable connect to ..." ERROR would be a second line before it. The
    # worker and `preagg serve` configure their logging themselves (pipeline/core/logs.py).
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        kind = getattr(args, "pending_kind", None)
        found, unknown = look_pending(kind) if kind else (None, None)
        # how many wait: an unknown site among them is "not counted yet", not "no such site"
        args.waiting = found.messages if found is not None else -1
        code = args.func(args)
        said = unknown or (found.note() if found is not None else None)
        if code == 0 and said:
            print(said, file=sys.stderr)
    except PreaggError as exc:  # raised on purpose: one line, the class's exit status (core/errors.py)
        print(f"preagg: {exc}", file=sys.stderr)
        code = exc.exit_code
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as exc:
        print(f"preagg: {exc.filename}: {exc.strerror}", file=sys.stderr)
        code = 2
    except BrokenPipeError:
        # `preagg query ... | head`: the reader has what it wanted. Python would print a
        # second error while flushing stdout at exit: point stdout at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except Exception as exc:  # a store or broker that did not answer: one line, not 90
        line = unreachable(exc, Settings.from_env())
        if line is None:
            raise
        print(f"preagg: {line}", file=sys.stderr)
        code = 2
    sys.exit(code)
