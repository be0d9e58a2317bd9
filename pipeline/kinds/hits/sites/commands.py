"""``preagg sites`` (zones, retention overrides), ``preagg retention run``, ``preagg rollups rebuild``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from typing import TYPE_CHECKING, Any

from pipeline.core.text import printable
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.settings import KEY
from pipeline.kinds.hits.sites.tiers import SETTLE_SECONDS, Tiers
from pipeline.services.urls import command_settings
from pipeline.settings import Settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.core.cli_params import Commands
    from pipeline.store.client import Db


def _tiers(s: Settings) -> Tiers:

    hs = s.of(KEY)
    return Tiers(hs.retention_minute_days, hs.retention_hour_days)


def cmd_sites(args: argparse.Namespace) -> int:
    """List every site (with hits or settings): its zone, its zone changes, its retention."""
    from pipeline.kinds.hits.query import listed_sites, site_months
    from pipeline.kinds.hits.sites.tiers import site_tiers

    s = command_settings()
    default = _tiers(s)

    async def run(db: Db) -> list[dict[str, Any]]:
        rows = []
        months = await site_months(db, hits_fields(s.schema))
        for c in await listed_sites(db, hits_fields(s.schema)):
            t = site_tiers(default, c.minute_days, c.hour_days)
            rows.append(
                {
                    "site": c.site,
                    "zone": c.zone,
                    "zones": [
                        {"since": ch.since.isoformat() if ch.since else None, "zone": ch.zone}
                        for ch in c.changes
                    ],
                    "minute_days": t.minute_days,
                    "hour_days": t.hour_days,
                    "first_month": months.get(c.site, (None, None))[0],
                    "last_month": months.get(c.site, (None, None))[1],
                }
            )
        return rows

    rows = on_db(s, run)
    if args.json:
        print(json.dumps(rows))
        return 0
    width = max([len(printable(r["site"])) for r in rows] + [4])
    print(f"{'site':<{width}}  {'zone':<22}  minutes  hours  {'hits from':<17}  zone history")
    for r in rows:
        history = ", ".join(f"{z['zone']} from {z['since']}" for z in r["zones"] if z["since"])
        keep = [("forever" if r[k] == 0 else f"{r[k]} d") for k in ("minute_days", "hour_days")]
        span = f"{r['first_month']} to {r['last_month']}" if r["first_month"] else "none"
        name = printable(r["site"])
        print(f"{name:<{width}}  {r['zone']:<22}  {keep[0]:>7}  {keep[1]:>5}  {span:<17}  {history}")
    return 0


def cmd_set_zone(args: argparse.Namespace) -> int:
    """Give a site a time zone, from the beginning (a site without hits) or from a local date on."""
    from pipeline.kinds.hits.sites.store import (
        SiteConfigError,
        has_hits,
        plan_zone_change,
        save_zones,
        site_config,
    )

    s = command_settings()
    f = hits_fields(s.schema).monthly

    async def run(db: Db) -> str:
        current = await site_config(db, args.site)
        hits = await has_hits(db, f.collection, f"{f.metadata}.{f.site}", args.site)
        changes = plan_zone_change(current, args.zone, args.since, hits, time.time(), s.future_skew)
        await save_zones(db, current, changes)
        if args.since is None:
            return f"{args.site}: {args.zone}"
        return f"{args.site}: {args.zone} from {args.since} (earlier days keep {current.zone})"

    try:
        print(on_db(s, run, primary_reads=True))
    except SiteConfigError as exc:
        print(f"preagg sites set-zone: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_set_retention(args: argparse.Namespace) -> int:
    """Override (or with 0 restore) the retention of a site's minute and hourly counters."""
    from pipeline.kinds.hits.sites.store import SiteConfigError, save_retention

    s = command_settings()
    if args.minutes is None and args.hours is None:
        print("preagg sites set-retention: give --minutes and/or --hours", file=sys.stderr)
        return 2

    async def run(db: Db) -> None:
        await save_retention(db, args.site, args.minutes, args.hours)

    try:
        on_db(s, run, primary_reads=True)
    except SiteConfigError as exc:
        print(f"preagg sites set-retention: {exc}", file=sys.stderr)
        return 2
    print(f"{args.site}: retention set (preagg sites lists it)")
    return 0


def cmd_retention(args: argparse.Namespace) -> int:
    """Prune minute and hourly counters past their tiers (``--dry-run``: count only)."""
    from pipeline.kinds.hits.sites.fold import fold_pending
    from pipeline.kinds.hits.sites.prune import PruneResult, run_retention
    from pipeline.kinds.hits.sites.schedule import SCHEDULE_ID
    from pipeline.kinds.hits.sites.tiers import utc_today
    from pipeline.store.meta import META_COLLECTION

    s = command_settings()
    default = _tiers(s)
    today = args.today or utc_today()

    async def run(db: Db) -> tuple[list[PruneResult], dict[str, Any], int]:
        last = await db[META_COLLECTION].find_one({"_id": SCHEDULE_ID}) or {}
        fields = hits_fields(s.schema)
        done = await run_retention(db, fields, default, today, args.dry_run, args.settle)
        return done, last, await fold_pending(db, fields, today, args.dry_run)

    t0 = time.monotonic()
    done, last, folds = on_db(s, run, primary_reads=True)
    print(periodic_text(s.of(KEY).retention_every, last))
    verb = "would prune" if args.dry_run else "pruned"
    for p in done:
        registers = f", {p.registers} register documents" if p.registers else ""
        print(f"{verb} {p.what}: {p.documents} daily documents{registers}")
    if not done:
        print("nothing to prune: every tier is forever (0)")
    if folds:
        print(
            f"{'would fold' if args.dry_run else 'folded'} the visitor registers of {folds} past site rollups"
        )
    print(f"{len(done)} statements in {time.monotonic() - t0:.2f} s")
    return 0


def cmd_rollups_rebuild(args: argparse.Namespace) -> int:
    """Rebuild a site's rollups from its page documents (idempotent, resumable)."""
    from pipeline.kinds.hits.sites.rebuild import RebuildResult, rebuild_rollups

    s = command_settings()

    async def run(db: Db) -> RebuildResult:
        return await rebuild_rollups(
            db, hits_fields(s.schema), args.site, args.since, s.of(KEY).top_pages_bytes, print
        )

    t0 = time.monotonic()
    r = on_db(s, run, primary_reads=True)
    if not r.days:
        since = f" since {args.since}" if args.since else ""
        print(f"{printable(args.site)}: no page documents to rebuild from{since}")
        return 0
    print(
        f"{printable(args.site)}: rebuilt {r.days} daily and {r.months} monthly rollups "
        f"({r.first} to {r.last}) from {r.page_documents} page documents in {time.monotonic() - t0:.1f} s"
    )
    return 0


def periodic_text(every_hours: float, schedule: dict[str, Any]) -> str:
    """One line on the workers' periodic runs: their interval, the group's last run, one under way."""
    if every_hours <= 0:
        out = "workers' periodic retention: off (PREAGG_HITS_RETENTION_EVERY=0)"
    else:
        out = f"workers' periodic retention: every {every_hours:g} h"
    last = schedule.get("last") or {}
    if last:
        at = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(last["started"])))
        pruned = ", ".join(f"{w}: {n}" for w, n in (last.get("pruned") or {}).items()) or "nothing to prune"
        took = float(last["finished"]) - float(last["started"])
        out += f"; last run {at} by {last.get('by')}, {took:.0f} s, {pruned}"
    elif not schedule.get("started"):
        out += "; none run yet"
    if schedule.get("started") and float(schedule["started"]) > float(last.get("started") or 0):
        out += f"; one started by {schedule.get('by')} is under way or was cut short"
    return out


def add_commands(commands: Commands) -> None:
    """``preagg sites ...``, ``preagg retention run`` and ``preagg rollups rebuild``."""
    sp = commands.add("sites", "sites: their time zones and retention (set-zone, set-retention)")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_sites)
    ssub = sp.add_subparsers(dest="action")
    z = ssub.add_parser(
        "set-zone", help="a site's IANA time zone, from the beginning or from a local date on"
    )
    z.add_argument("site")
    z.add_argument("zone", help="IANA name: Europe/Berlin, America/New_York, Asia/Kolkata, UTC...")
    z.add_argument(
        "--from",
        dest="since",
        type=date.fromisoformat,
        help="first local day in the new zone, YYYY-MM-DD (needed once the site has hits; "
        "earlier days keep their zone)",
    )
    z.set_defaults(func=cmd_set_zone)
    r = ssub.add_parser("set-retention", help="a site's own retention of minute and hourly counters")
    r.add_argument("site")
    r.add_argument("--minutes", type=int, help="days of minute counters (0: the deployment's)")
    r.add_argument("--hours", type=int, help="days of hourly counters (0: the deployment's)")
    r.set_defaults(func=cmd_set_retention)
    rp = commands.add("retention", "prune minute and hourly counters past their retention")
    rsub = rp.add_subparsers(dest="action", required=True)
    run = rsub.add_parser("run", help="prune now (a few update_many statements, safe while workers run)")
    run.add_argument("--dry-run", action="store_true", help="count what would be pruned, change nothing")
    run.add_argument("--today", type=date.fromisoformat, help=argparse.SUPPRESS)
    run.add_argument(
        "--settle",
        type=float,
        default=SETTLE_SECONDS,
        help=f"seconds between recording the cutoffs and pruning, for workers to read them "
        f"(default {SETTLE_SECONDS:g})",
    )
    run.set_defaults(func=cmd_retention)
    ro = commands.add("rollups", "site rollups: rebuild them from page documents")
    rosub = ro.add_subparsers(dest="action", required=True)
    rb = rosub.add_parser(
        "rebuild",
        help="a site's daily and monthly rollups from its page documents (for data written before "
        "rollups; idempotent, resumes where a run stopped)",
    )
    rb.add_argument("--site", required=True)
    rb.add_argument(
        "--from",
        dest="since",
        type=date.fromisoformat,
        help="first local day, YYYY-MM-DD (default: where the last run stopped, else the first day)",
    )
    rb.set_defaults(func=cmd_rollups_rebuild)
