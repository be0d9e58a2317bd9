"""``preagg query hits`` and ``preagg query props``."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.parse import UsageError, parse_end, parse_time
from pipeline.core.text import csv_text, print_rows, printable
from pipeline.kinds.hits.layout import hits_fields
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_hits(args: argparse.Namespace) -> int:
    """Zero-filled hit series of a site or page as a table, JSON, CSV and/or a PNG."""
    from pipeline.kinds.hits.bots import FILTERED_BY
    from pipeline.kinds.hits.query import hits_series, instant
    from pipeline.kinds.hits.query_bots import humans
    from pipeline.kinds.hits.render import as_csv, as_json, as_table, plot_png, pruned_note, sparkline
    from pipeline.kinds.hits.sites.store import site_config

    s = command_settings()
    start, end = parse_time(args.start, local=True), parse_end(args.end, local=True)
    within_limits(start, end, args.by)
    if args.no_bots and args.by not in FILTERED_BY:
        raise UsageError("--no-bots needs --by day or --by month: bot hits are counted per day")
    zone = "UTC"

    async def run(db: Db) -> list[tuple[datetime, int]]:
        nonlocal zone
        cal = (await site_config(db, args.site)).calendar
        zone = cal.zone
        if instant(end, cal) < instant(start, cal):
            raise SystemExit("--to is before --from")
        fields = hits_fields(s.schema)
        series = await hits_series(db, args.site, args.page, start, end, args.by, fields, cal)
        return await humans(db, args.site, args.page, series, args.by, fields) if args.no_bots else series

    series = on_db(s, run)
    if args.json:
        print(as_json(series))
    elif args.csv:
        print(as_csv(series), end="")
    else:
        print(as_table(series))
        print(f"total {sum(n for _, n in series)}  " + sparkline([n for _, n in series]))
        if note := pruned_note(series, args.by):
            print(note)
    if args.plot:
        title = f"{args.site}{args.page or ' (all pages)'}: hits per {args.by} ({zone})"
        print(f"plot written to {plot_png(series, Path(args.plot), title, zone)}", file=sys.stderr)
    return 0


def within_limits(start: datetime, end: datetime, by: str) -> None:
    """The API's bounds (:mod:`pipeline.kinds.hits.limits`) on the CLI too, as one-line usage errors.

    ``--by minute`` over 30 years printed 15.8 million rows for a minute while the API refused it.
    """
    from pipeline.core.params import BadParam, check_bounds
    from pipeline.kinds.hits.limits import MAX_SPAN, check_span

    try:
        check_bounds("--from", start)
        check_bounds("--to", end)
        check_span("--from", start, end, MAX_SPAN[by], f"--by {by}")
    except BadParam as exc:
        raise UsageError(str(exc).replace("to: ", "--to: ", 1)) from None


def cmd_query_props(args: argparse.Namespace) -> int:
    """Custom property counts of a site or page over a range of days."""
    from pipeline.kinds.hits.query_props import prop_counts, prop_rows

    s = command_settings()
    start: date = args.start
    end: date = args.end or start

    async def run(db: Db) -> Any:
        return await prop_counts(db, args.site, args.page, start, end, args.name, hits_fields(s.schema))

    rows = on_db(s, run)
    if args.json:
        print(json.dumps(prop_rows(rows)))
        return 0
    if args.csv:
        print(csv_text([(r.name, r.value, r.count) for r in rows], ("name", "value", "count")), end="")
        return 0
    width = max([len(printable(r.name)) for r in rows] + [4])
    print(f"{'name':<{width}}  {'count':>9}  value")
    for r in rows:
        print(f"{printable(r.name):<{width}}  {r.count:>9}  {printable(r.value)}")
    return 0


def cmd_query_pages(args: argparse.Namespace) -> int:
    """The pages of a site with the most hits over a range of days."""
    from pipeline.kinds.hits.query import TopPages, top_pages
    from pipeline.kinds.hits.query_bots import top_human_pages

    s = command_settings()
    end: date = args.end or args.start
    top = top_human_pages if args.no_bots else top_pages

    async def run(db: Db) -> TopPages:
        return await top(db, args.site, args.start, end, args.limit, hits_fields(s.schema))

    rows = on_db(s, run)
    print_rows(rows, args.json, ("page", "hits"), args.csv)
    if not rows.exact:
        print(not_exact_note(rows.bound), file=sys.stderr)
    return 0


def not_exact_note(bound: int) -> str:
    """The line that says a top-pages answer is not proven exact yet, and by how much it may be off."""
    return (
        f"not exact yet: a page's hits may be off by up to {bound}, or a page missing from the list may "
        "have that many (the range's top lists are made exact a few seconds after its last hits are counted)"
    )


def _day_range(parser: argparse.ArgumentParser) -> None:
    """``--from DAY [--to DAY]``: local days of the site."""
    parser.add_argument(
        "--from",
        dest="start",
        type=date.fromisoformat,
        required=True,
        help="first day (the site's local calendar), YYYY-MM-DD",
    )
    parser.add_argument(
        "--to", dest="end", type=date.fromisoformat, help="last local day, YYYY-MM-DD (default: --from)"
    )


def add_queries(qsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The hits kind's ``preagg query`` subcommands."""
    qh = qsub.add_parser("hits", help="zero-filled hit series of a site or page")
    qh.add_argument("--site", required=True)
    qh.add_argument("--page", help="one page (default: all pages of the site)")
    qh.add_argument(
        "--from",
        dest="start",
        default="now-60m",
        help="ISO date or time (without offset: the site's local time) or now-60m (default)",
    )
    qh.add_argument(
        "--to",
        dest="end",
        default="now",
        help="ISO time or now (default); a date is its whole (local) day, at every --by",
    )
    qh.add_argument("--by", choices=["minute", "hour", "day", "month"], default="minute")
    qh.add_argument(
        "--no-bots",
        action="store_true",
        help="leave out hits whose agent property is Bot (produce --format clf --props); --by day or month",
    )
    fmt = qh.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    qh.add_argument("--plot", metavar="FILE.png")
    qh.set_defaults(func=cmd_query_hits)
    qp = qsub.add_parser("props", help="custom property counts of a site or page over a range of days")
    qp.add_argument("--site", required=True)
    qp.add_argument("--page", help="one page (default: all pages of the site)")
    _day_range(qp)
    qp.add_argument("--name", help="one property (default: all)")
    fmt = qp.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    qp.set_defaults(func=cmd_query_props)
    qt = qsub.add_parser("pages", help="the pages of a site with the most hits over a range of days")
    qt.add_argument("--site", required=True)
    _day_range(qt)
    qt.add_argument("--limit", type=int, default=10, help="at most this many pages (0: all)")
    qt.add_argument(
        "--no-bots",
        action="store_true",
        help="leave out hits whose agent property is Bot (produce --format clf --props)",
    )
    fmt = qt.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    qt.set_defaults(func=cmd_query_pages)
