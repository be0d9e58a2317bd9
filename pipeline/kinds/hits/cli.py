"""``preagg query hits|pages|props|visitors|visits|sites``: each query's answer (answers.py, the one the
HTTP API gives) formatted for a terminal, ``--json`` (the API's rows) or ``--csv``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pipeline.core.cli_params import QueryCommand, option
from pipeline.core.params import BadParam, NotFound
from pipeline.core.parse import UsageError
from pipeline.core.text import csv_text, print_rows, printable
from pipeline.kinds.hits.queries import QUERIES
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.kinds.hits import answers

T = TypeVar("T")


def answer(run: Callable[..., Awaitable[T]], a: Mapping[str, Any]) -> T:
    """The query's answer from the deployment's store; a refused parameter is a usage error
    naming its option, as the API's 400 names the parameter."""
    from pipeline.kinds.hits.answers import Reading

    s = command_settings()
    reading = Reading.of(s)
    try:
        return on_db(s, lambda db: run(db, a, reading))
    except NotFound:
        raise  # exit 2 naming the closest known site
    except BadParam as exc:
        raise UsageError(f"{option(exc.name)}: {exc.message}") from None


def cmd_query_hits(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Zero-filled hit series of a site or page as a table, JSON, CSV and/or a PNG."""
    from pipeline.kinds.hits import answers
    from pipeline.kinds.hits.render import as_csv, as_table, plot_png, pruned_note, sparkline

    got = answer(answers.hits, a)
    series, by = got.series, a["by"]
    if args.json:
        print(json.dumps(got.json()))
    elif args.csv:
        print(as_csv(series), end="")
    else:
        print(as_table(series))
        print(f"total {sum(n for _, n in series)}  " + sparkline([n for _, n in series], unit=f"{by}s"))
        if note := pruned_note(series, by):
            print(note)
    if args.plot:
        title = f"{a['site']}{a['page'] or ' (all pages)'}: hits per {by} ({got.zone})"
        print(f"plot written to {plot_png(series, Path(args.plot), title, got.zone)}", file=sys.stderr)
    return 0


def cmd_query_props(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Custom property counts of a site or page over a range of days."""
    from pipeline.kinds.hits import answers

    got = answer(answers.props, a)
    if args.json:
        print(json.dumps(got.json()))
        return 0
    rows = got.rows
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
    from pipeline.kinds.hits import answers

    got = answer(answers.pages, a)
    if got.visitors is not None:
        print_page_visitors(got, args)
    elif args.json:
        print(json.dumps(got.json()))
    else:
        print_rows(got.top, False, ("page", "hits"), args.csv)
    if not got.top.exact:
        print(not_exact_note(got.top.bound), file=sys.stderr)
    return 0


def cmd_query_visitors(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Unique visitors of a site or page per hour, day or month, or over the whole range."""
    from pipeline.kinds.hits import answers

    got = answer(answers.visitors, a)
    table = got.table()
    if args.json:
        print(json.dumps(got.json()))
    elif args.csv:
        print(csv_text(table, ("t", "visitors", "exact", "hits", "sum_of_days")), end="")
    else:
        print(f"{'t':>19}  {'visitors':>9}  {'hits':>9}  exact")
        for t, n, exact, hits, summed in table:
            how = "yes" if exact else "no (estimate)"
            print(f"{t:>19}  {n:>9}  {hits:>9}  {how}{', sum of daily visitors' if summed else ''}")
        if not all(exact for _, _, exact, _, _ in table):
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


def cmd_query_visits(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Visits, bounce rate, views per visit and visit duration per day, month or range."""
    from pipeline.kinds.hits import answers

    rows = answer(answers.visits, a).json()
    header = tuple(VISIT_COLUMNS)
    if args.json:
        print(json.dumps(rows))
    elif args.csv:
        print(csv_text([tuple(r[h] for h in header) for r in rows], header), end="")
    else:
        print("  ".join(f"{title:>{w}}" for title, w in VISIT_COLUMNS.values()))
        for r in rows:
            print("  ".join(f"{_shown(r[h]):>{w}}" for h, (_, w) in VISIT_COLUMNS.items()))
        if not all(r["complete"] for r in rows):
            print(
                "not final: a visit counts once PREAGG_HITS_VISIT_TIMEOUT passed its last hit, so days "
                "marked no may still grow (docs/visits.md)",
                file=sys.stderr,
            )
    return 0


#: The visits table's columns: JSON name → (title, width).
VISIT_COLUMNS = {
    "t": ("t", 10),
    "visits": ("visits", 8),
    "bounces": ("bounces", 8),
    "bounce_rate": ("bounce rate", 11),
    "views": ("views", 8),
    "views_per_visit": ("views/visit", 11),
    "visit_duration": ("duration s", 10),
    "median_duration_at_most": ("median <= s", 11),
    "complete": ("final", 5),
}


def _shown(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def cmd_query_visit_pages(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """The pages most visits entered or left by, with both counts."""
    from pipeline.kinds.hits import answers

    rows = answer(answers.visit_pages_answer, a).json()
    header = ("page", "entries", "exits")
    if args.json:
        print(json.dumps(rows))
    elif args.csv:
        print(csv_text([tuple(r[h] for h in header) for r in rows], header), end="")
    else:
        width = max([len(printable(r["page"])) for r in rows] + [4])
        print(f"{'page':<{width}}  {'entries':>9}  {'exits':>9}")
        for r in rows:
            print(f"{printable(r['page']):<{width}}  {r['entries']:>9}  {r['exits']:>9}")
    return 0


def cmd_query_sites(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Every site with hits or settings, its zone, and its first and last month with hits."""
    from pipeline.kinds.hits import answers

    got = answer(answers.sites, a)
    header = ("site", "zone", "first_month", "last_month")
    rows = [tuple(r[h] or "" for h in header) for r in got.json()]
    if args.json:
        print(json.dumps(got.json()))
    elif args.csv:
        print(csv_text(rows, header), end="")
    else:
        width = max([len(printable(str(r[0]))) for r in rows] + [4])
        print(f"{'site':<{width}}  {'zone':<20}  first    last")
        for site, zone, first, last in rows:
            print(f"{printable(str(site)):<{width}}  {zone!s:<20}  {first!s:<7}  {last}")
    return 0


def print_page_visitors(got: answers.Pages, args: argparse.Namespace) -> None:
    """Top pages with each page's unique visitors (``--metric visitors``)."""
    rows = got.json()
    if args.json:
        print(json.dumps(rows))
        return
    header = ("page", "hits", "visitors", "visitors_exact")
    if args.csv:
        print(csv_text([tuple(r[h] for h in header) for r in rows], header), end="")
        return
    width = max([len(printable(r["page"])) for r in rows] + [4])
    print(f"{'page':<{width}}  {'hits':>9}  {'visitors':>9}")
    for r in rows:
        shown = f"{r['visitors']:>9}{'' if r['visitors_exact'] else ' (estimate)'}"
        print(f"{printable(r['page']):<{width}}  {r['hits']:>9}  {shown}")


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
        QueryCommand(QUERIES["visits"], cmd_query_visits, ("json", "csv")),
        QueryCommand(QUERIES["visit-pages"], cmd_query_visit_pages, ("json", "csv")),
        QueryCommand(QUERIES["sites"], cmd_query_sites, ("json", "csv")),
    )
