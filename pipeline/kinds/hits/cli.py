"""``preagg query hits`` and ``preagg query props``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.cli_params import QueryCommand
from pipeline.core.parse import UsageError
from pipeline.core.routes import WAITING
from pipeline.core.text import csv_text, print_rows, printable
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.queries import QUERIES
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_hits(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Zero-filled hit series of a site or page as a table, JSON, CSV and/or a PNG."""
    from pipeline.kinds.hits.query import hits_series, instant
    from pipeline.kinds.hits.query_bots import humans
    from pipeline.kinds.hits.render import as_csv, as_json, as_table, plot_png, pruned_note, sparkline
    from pipeline.kinds.hits.sites.store import site_config

    s = command_settings()
    site, page, by = a["site"], a["page"], a["by"]
    zone = "UTC"

    async def run(db: Db) -> list[tuple[datetime, int]]:
        nonlocal zone
        await known_site(db, site, int(a.get(WAITING, 0)))
        cal = (await site_config(db, site)).calendar
        zone = cal.zone
        if instant(a["to"], cal) < instant(a["from"], cal):
            raise UsageError("--to is before --from")
        fields = hits_fields(s.schema)
        series = await hits_series(db, site, page, a["from"], a["to"], by, fields, cal)
        return await humans(db, site, page, series, by, fields) if a["bots"] == "exclude" else series

    series = on_db(s, run)
    if args.json:
        print(as_json(series))
    elif args.csv:
        print(as_csv(series), end="")
    else:
        print(as_table(series))
        print(f"total {sum(n for _, n in series)}  " + sparkline([n for _, n in series], unit=f"{by}s"))
        if note := pruned_note(series, by):
            print(note)
    if args.plot:
        title = f"{site}{page or ' (all pages)'}: hits per {by} ({zone})"
        print(f"plot written to {plot_png(series, Path(args.plot), title, zone)}", file=sys.stderr)
    return 0


async def _days(db: Db, a: Mapping[str, Any]) -> tuple[date, date]:
    from pipeline.kinds.hits.query import site_day_range

    await known_site(db, a["site"], int(a.get(WAITING, 0)))
    return await site_day_range(db, a["site"], a["from"], a["to"])


async def known_site(db: Db, site: str, waiting: int = 0) -> None:
    """Refuse an unknown site (exit 2, the closest known named), unless hits wait to be counted
    (``waiting``, looked at by the command line before the query): it may be among them, and
    the answer then says what waits."""
    from pipeline.kinds.hits.query import require_site

    await require_site(db, site, hits_fields(command_settings().schema), waiting)


def cmd_query_props(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Custom property counts of a site or page over a range of days."""
    from pipeline.kinds.hits.query_props import prop_counts, prop_rows

    s = command_settings()

    async def run(db: Db) -> Any:
        first, last = await _days(db, a)
        return await prop_counts(db, a["site"], a["page"], first, last, a["name"], hits_fields(s.schema))

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


def cmd_query_pages(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """The pages of a site with the most hits over a range of days."""
    from pipeline.kinds.hits.query import TopPages, top_pages
    from pipeline.kinds.hits.query_bots import top_human_pages

    s = command_settings()
    top = top_human_pages if a["bots"] == "exclude" else top_pages

    async def run(db: Db) -> TopPages:
        first, last = await _days(db, a)
        return await top(db, a["site"], first, last, a["limit"], hits_fields(s.schema))

    rows = on_db(s, run)
    if a["metric"] == "visitors":
        print_page_visitors(s, a, rows, args)
    else:
        print_rows(rows, args.json, ("page", "hits"), args.csv)
    if not rows.exact:
        print(not_exact_note(rows.bound), file=sys.stderr)
    return 0


def cmd_query_visitors(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Unique visitors of a site or page per hour, day or month, or over the whole range."""
    from pipeline.kinds.hits.query_visitors import VisitorRow, visitor_rows

    s = command_settings()

    async def run(db: Db) -> list[VisitorRow]:
        first, last = await _days(db, a)
        return await visitor_rows(db, a["site"], a["page"], first, last, a["by"], hits_fields(s.schema))

    rows = on_db(s, run)
    daily = daily_salt(s)
    header = ("t", "visitors", "exact", "hits", "sum_of_days")
    table = [(r.t.isoformat(), r.visitors, r.exact, r.hits, r.sum_of_days(daily)) for r in rows]
    if args.json:
        print(json.dumps([dict(zip(header, row, strict=True)) for row in table]))
    elif args.csv:
        print(csv_text(table, header), end="")
    else:
        print(f"{'t':>19}  {'visitors':>9}  {'hits':>9}  exact")
        for t, n, exact, hits, summed in table:
            how = "yes" if exact else "no (estimate)"
            print(f"{t:>19}  {n:>9}  {hits:>9}  {how}{', sum of daily visitors' if summed else ''}")
        if not all(r.exact for r in rows):
            print(
                "not exact: a HyperLogLog estimate, 0.81% standard error (docs/visitors.md)", file=sys.stderr
            )
        if any(summed for *_, summed in table):
            print(
                "sum of daily visitors: with the daily salt a person is counted once a day; "
                "PREAGG_HITS_VISITOR_SALT=fixed counts people once over a range (docs/visitors.md)",
                file=sys.stderr,
            )
    return 0


def daily_salt(s: Any) -> bool:
    """Whether the deployment's visitor hashes change every day (``PREAGG_HITS_VISITOR_SALT``)."""
    from pipeline.kinds.hits.settings import KEY

    return bool(s.of(KEY).visitor_salt == "daily")


def print_page_visitors(
    s: Any, a: Mapping[str, Any], top: list[tuple[str, int]], args: argparse.Namespace
) -> None:
    """Top pages with each page's unique visitors (``--metric visitors``)."""
    from pipeline.kinds.hits.query_visitors import page_visitors

    async def run(db: Db) -> Any:
        first, last = await _days(db, a)
        return await page_visitors(db, a["site"], [p for p, _ in top], first, last, hits_fields(s.schema))

    seen = on_db(s, run)
    header = ("page", "hits", "visitors", "visitors_exact")
    rows = [(p, n, seen[p].value, seen[p].exact) for p, n in top]
    if args.json:
        print(json.dumps([dict(zip(header, r, strict=True)) for r in rows]))
    elif args.csv:
        print(csv_text(rows, header), end="")
    else:
        width = max([len(printable(p)) for p, *_ in rows] + [4])
        print(f"{'page':<{width}}  {'hits':>9}  {'visitors':>9}")
        for p, n, v, exact in rows:
            print(f"{printable(p):<{width}}  {n:>9}  {v:>9}{'' if exact else ' (estimate)'}")


def not_exact_note(bound: int) -> str:
    """The line that says a top-pages answer is not proven exact yet, and by how much it may be off."""
    return (
        f"not exact yet: a page's hits may be off by up to {bound}, or a page missing from the list may "
        "have that many (the range's top lists are made exact a few seconds after its last hits are counted)"
    )


def query_commands() -> tuple[QueryCommand, ...]:
    """The hits kind's ``preagg query`` subcommands: their declarations (queries.py) and runners."""
    return (
        QueryCommand(QUERIES["hits"], cmd_query_hits, ("json", "csv", "plot")),
        QueryCommand(QUERIES["props"], cmd_query_props, ("json", "csv")),
        QueryCommand(QUERIES["pages"], cmd_query_pages, ("json", "csv")),
        QueryCommand(QUERIES["visitors"], cmd_query_visitors, ("json", "csv")),
    )
